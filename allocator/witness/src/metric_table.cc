// flowtune-witness's metric table (metrics/json_rows.h), from its status
// reply (Witness::status); docs/operate.md's table is checked against it.
#include "flowtune/witness/metrics.h"

namespace flowtune::witness {

namespace {

using metrics::Type;
constexpr Type C = Type::kCounter;
constexpr Type G = Type::kGauge;

const metrics::Spec kUp = {"flowtune_witness_up", G, "1", "",
                           "1 when the witness answered this scrape's status request, else 0"};

// clang-format off
const metrics::Row kTable[] = {
  {{"flowtune_witness_claims_total", C, "1", "", "Lease claims received from the pair"}, 0, "/counters/claims"},
  {{"flowtune_witness_grants_total", C, "1", "", "Claims granted"}, 0, "/counters/grants"},
  {{"flowtune_witness_renewals_total", C, "1", "", "Of the grants, renewals by the holder"}, 0, "/counters/renewals"},
  {{"flowtune_witness_refusals_total", C, "1", "", "Claims refused: another held the lease"}, 0, "/counters/refusals"},
  {{"flowtune_witness_holder_changes_total", C, "1", "", "Times the lease went to another allocator"}, 0, "/counters/holder_changes"},
  {{"flowtune_witness_bad_requests_total", C, "1", "", "Requests that were not a claim or a status request"}, 0, "/counters/bad_requests"},
  {{"flowtune_witness_not_authorized_total", C, "1", "", "Claims from a key not in --curve-clients"}, 0, "/counters/not_authorized"},
  {{"flowtune_witness_rate_limited_total", C, "1", "", "Claims told to retry: past --claims-per-sec"}, 0, "/counters/rate_limited"},
  {{"flowtune_witness_term", G, "1", "", "The holder's term, as its last granted claim named it"}, 0, "/term"},
  {{"flowtune_witness_lease_left_seconds", G, "seconds", "", "What the holder's lease has left (0: none)"}, 0, "/lease_left_ms", 1e-3},
};
// clang-format on

}  // namespace

const metrics::Spec& witness_up_spec() { return kUp; }
std::span<const metrics::Row> witness_metric_rows() { return kTable; }

std::vector<metrics::Spec> witness_metric_specs() { return metrics::specs(kUp, kTable); }

}  // namespace flowtune::witness
