// flowtune-relay's metric table (metrics/json_rows.h), from its status
// reply (Relay::status); docs/operate.md's table is checked against it.
#include "flowtune/relay/metrics.h"

namespace flowtune::relay {

namespace {

using metrics::Type;
constexpr Type C = Type::kCounter;
constexpr Type G = Type::kGauge;

const metrics::Spec kUp = {"flowtune_relay_up", G, "1", "",
                           "1 when the relay answered this scrape's status request, else 0"};

// clang-format off
const metrics::Row kTable[] = {
  {{"flowtune_relay_messages_up_total", C, "1", "", "Endpoint messages forwarded upstream"}, 0, "/counters/messages_up"},
  {{"flowtune_relay_batches_up_total", C, "1", "", "Batches sent upstream"}, 0, "/counters/batches_up"},
  {{"flowtune_relay_messages_down_total", C, "1", "", "Answers delivered to endpoints or relays below"}, 0, "/counters/messages_down"},
  {{"flowtune_relay_batches_down_total", C, "1", "", "Batches received from upstream"}, 0, "/counters/batches_down"},
  {{"flowtune_relay_dropped_total", C, "1", "", "Messages dropped: a queue was full, or a route unknown or malformed"}, 0, "/counters/dropped"},
  {{"flowtune_relay_bad_frames_total", C, "1", "", "Inputs that were neither a message, a batch nor a flowtune-ctl request"}, 0, "/counters/bad_frames"},
  {{"flowtune_relay_upstream_switches_total", C, "1", "", "Times a standby took over and the relay followed"}, 0, "/counters/upstream_switches"},
  {{"flowtune_relay_key_changes_total", C, "1", "", "Times the allocator's key file named a new key"}, 0, "/counters/key_changes"},
  {{"flowtune_relay_auth_failures_total", C, "1", "kind", "Inputs refused by CURVE downstream, by kind: unkeyed, refused (handshake), not_listed"}, 0, "/counters/unkeyed|/counters/refused|/counters/not_listed"},
  {{"flowtune_relay_reloads_total", C, "1", "", "Allow-lists read again (SIGHUP), successfully"}, 0, "/counters/reloads"},
  {{"flowtune_relay_allow_list_keys", G, "1", "", "Keys in the allow-list (--curve-clients, --curve-ctl only)"}, 0, "/allow_list/keys"},
};
// clang-format on

}  // namespace

const metrics::Spec& relay_up_spec() { return kUp; }
std::span<const metrics::Row> relay_metric_rows() { return kTable; }

std::vector<metrics::Spec> relay_metric_specs() { return metrics::specs(kUp, kTable); }

}  // namespace flowtune::relay
