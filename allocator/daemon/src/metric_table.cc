// The allocator's metric table: every metric once, with where its value is
// read (metrics/json_rows.h). docs/operate.md's table is checked against it
// (tests/allocator/daemon/metrics_test.cc).
#include "flowtune/daemon/metrics.h"

namespace flowtune::daemon {

namespace {

using metrics::Type;
constexpr Type C = Type::kCounter;
constexpr Type G = Type::kGauge;
constexpr Type H = Type::kHistogram;
constexpr std::size_t S = kStatusReply;
constexpr std::size_t Hi = kHistogramsReply;
constexpr std::size_t L = kLinksReply;

// clang-format off
const metrics::Row kTable[] = {
  {{"flowtune_allocator_messages_received_total", C, "1", "", "Endpoint messages received"}, S, "/counters/messages_in"},
  {{"flowtune_allocator_received_bytes_total", C, "bytes", "", "Bytes of endpoint messages received"}, S, "/counters/bytes_in"},
  {{"flowtune_allocator_messages_sent_total", C, "1", "", "Messages sent to endpoints"}, S, "/counters/messages_out"},
  {{"flowtune_allocator_sent_bytes_total", C, "bytes", "", "Bytes of messages sent to endpoints"}, S, "/counters/bytes_out"},
  {{"flowtune_allocator_send_failures_total", C, "1", "", "Messages dropped: the peer was gone or its queue full"}, S, "/counters/send_failures"},
  {{"flowtune_allocator_hellos_total", C, "1", "", "Endpoint hellos"}, S, "/counters/hellos"},
  {{"flowtune_allocator_flowlet_starts_total", C, "1", "", "Flowlet starts reported by endpoints"}, S, "/counters/starts"},
  {{"flowtune_allocator_flowlet_ends_total", C, "1", "", "Flowlet ends reported by endpoints"}, S, "/counters/ends"},
  {{"flowtune_allocator_heartbeats_total", C, "1", "", "Endpoint heartbeats"}, S, "/counters/heartbeats"},
  {{"flowtune_allocator_resyncs_total", C, "1", "", "Full-state resyncs from endpoints"}, S, "/counters/resyncs"},
  {{"flowtune_allocator_rate_requests_total", C, "1", "", "Events asking again for rates an endpoint lacks"}, S, "/counters/rate_requests"},
  {{"flowtune_allocator_progress_reports_total", C, "1", "", "Progress events (each reporting one or more flowlets)"}, S, "/counters/progress"},
  {{"flowtune_allocator_progress_flowlets_total", C, "1", "", "Flowlets whose size or progress a report updated"}, S, "/counters/progress_flows"},
  {{"flowtune_allocator_rate_updates_total", C, "1", "", "Rates sent to endpoints"}, S, "/counters/rate_updates"},
  {{"flowtune_allocator_rate_updates_suppressed_total", C, "1", "", "Rates not sent: they moved by less than --threshold"}, S, "/counters/rate_updates_suppressed"},
  {{"flowtune_allocator_rate_passes_deferred_total", C, "1", "", "Iterations whose moved rates waited for a later one (--update-interval-us)"}, S, "/counters/rate_passes_deferred"},
  {{"flowtune_allocator_early_rates_total", C, "1", "", "Of the rates sent, starts answered before the turn's iteration (--early-rates)"}, S, "/counters/early_rates"},
  {{"flowtune_allocator_early_rates_corrected_total", C, "1", "", "Of the early rates, those the iteration then corrected"}, S, "/counters/early_rates_corrected"},
  {{"flowtune_allocator_lease_refreshes_total", C, "1", "", "Lease refreshes sent to endpoints"}, S, "/counters/lease_refreshes"},
  {{"flowtune_allocator_host_rate_updates_total", C, "1", "", "Messages telling a host pacer its host's rate"}, S, "/counters/host_rate_updates"},
  {{"flowtune_allocator_endpoints_timed_out_total", C, "1", "", "Endpoints dropped after --endpoint-timeout-ms of silence"}, S, "/counters/endpoints_timed_out"},
  {{"flowtune_allocator_hosts_released_total", C, "1", "", "Added hosts whose slot went back once unused"}, S, "/counters/hosts_released"},
  {{"flowtune_allocator_flows_expired_total", C, "1", "", "Flows whose lease holder timed out, released with it"}, S, "/counters/flows_expired"},
  {{"flowtune_allocator_flows_joined_total", C, "1", "", "Starts that joined a live flow of the same socket"}, S, "/counters/flows_joined"},
  {{"flowtune_allocator_memory_trims_total", C, "1", "", "Times freed heap was handed back to the kernel"}, S, "/counters/memory_trims"},
  {{"flowtune_allocator_compactions_total", C, "1", "", "Times the tables were shrunk after a burst"}, S, "/counters/compactions"},
  {{"flowtune_allocator_classes_lowered_total", C, "1", "", "Starts and resync entries that asked above --top-class"}, S, "/counters/classes_lowered"},
  {{"flowtune_allocator_flows_started_total", C, "1", "class", "Flows taken up (starts and resyncs) by strict priority class"}, S, "/counters/flows_by_class"},
  {{"flowtune_allocator_deadlines_met_total", C, "1", "", "Flowlets with a deadline that ended by it"}, S, "/counters/deadlines_met"},
  {{"flowtune_allocator_deadlines_missed_total", C, "1", "", "Flowlets with a deadline that ended after it"}, S, "/counters/deadlines_missed"},
  {{"flowtune_allocator_iterations_total", C, "1", "", "Engine iterations (NED + normalization)"}, S, "/counters/iterations"},
  {{"flowtune_allocator_control_requests_total", C, "1", "", "flowtune-ctl requests, the metrics' own included (3 a scrape)"}, S, "/counters/control_requests"},
  {{"flowtune_allocator_relay_batches_total", C, "1", "", "Batches received from flowtune-relay"}, S, "/counters/relay_batches"},
  {{"flowtune_allocator_refusals_total", C, "1", "reason", "Inputs refused, by reason (as flowtune-ctl status's errors)"}, S, "/counters/errors"},
  {{"flowtune_allocator_policy_replans_total", C, "1", "", "Times the policy's floors and coflow order were planned again"}, S, "/policy/replans"},
  {{"flowtune_allocator_deadlines_infeasible_total", C, "1", "", "Deadlines that could not be met when planned"}, S, "/policy/deadlines_infeasible"},
  {{"flowtune_allocator_guarantees_refused_total", C, "1", "", "Tenant guarantees refused: over --max-reserved"}, S, "/policy/guarantees_refused"},
  {{"flowtune_allocator_coflow_plans_total", C, "1", "", "Times the coflow order was planned (--coflow-policy)"}, S, "/policy/coflow_plans"},
  {{"flowtune_allocator_coflows_ordered_total", C, "1", "", "Coflows placed in an order, summed over plans"}, S, "/policy/coflows_ordered"},
  {{"flowtune_allocator_auth_accepted_total", C, "1", "", "CURVE handshakes with an allowed key (CURVE on only)"}, S, "/auth/accepted"},
  {{"flowtune_allocator_auth_failures_total", C, "1", "kind", "CURVE handshakes refused, by kind (CURVE on only)"}, S, "/auth/unknown_keys|/auth/unauthenticated|/auth/bad_handshakes"},
  {{"flowtune_allocator_reloads_total", C, "1", "", "Reloads of the key lists (CURVE on only)"}, S, "/auth/reloads"},
  {{"flowtune_allocator_reload_failures_total", C, "1", "", "Reloads of the key lists refused (CURVE on only)"}, S, "/auth/reload_failures"},
  {{"flowtune_allocator_key_rotations_total", C, "1", "", "Reloads that found a new --curve-secret (CURVE on only)"}, S, "/auth/key_rotations"},
  {{"flowtune_allocator_endpoints", G, "1", "", "Connected endpoints"}, S, "/endpoints"},
  {{"flowtune_allocator_flows", G, "1", "", "Live flows, as flowtune-ctl status's flows"}, S, "/flows"},
  {{"flowtune_allocator_busy", G, "1", "", "1 while the engine iterates (flows changing or prices unsettled)"}, S, "/busy"},
  {{"flowtune_allocator_converged", G, "1", "", "1 when the last iteration converged"}, S, "/converged"},
  {{"flowtune_allocator_uptime_seconds", G, "seconds", "", "Seconds since the allocator started"}, S, "/uptime_s"},
  {{"flowtune_allocator_hosts", G, "1", "", "Hosts in the network"}, S, "/topology/hosts"},
  {{"flowtune_allocator_spare_hosts", G, "1", "", "Free slots for hosts added at run time"}, S, "/topology/spare_hosts"},
  {{"flowtune_allocator_links", G, "1", "", "Links in the network"}, S, "/topology/links"},
  {{"flowtune_allocator_tenants", G, "1", "", "Tenants the policy knows"}, S, "/policy/tenants_total"},
  {{"flowtune_allocator_heap_in_use_bytes", G, "bytes", "", "Heap in use at the loop's last memory check"}, S, "/heap/in_use_bytes"},
  {{"flowtune_allocator_heap_free_kept_bytes", G, "bytes", "", "Free heap kept by the allocator at the last check"}, S, "/heap/free_kept_bytes"},
  {{"flowtune_allocator_active", G, "1", "", "1 while this allocator serves, 0 while it stands by (--standby-of)"}, S, "/role", 1, nullptr, nullptr, "active"},
  {{"flowtune_allocator_standby_term", G, "1", "", "The standby pair's term (--standby-of only)"}, S, "/standby_pair/term"},
  {{"flowtune_allocator_standby_peer_heard_seconds", G, "seconds", "", "Seconds since the pair's peer last answered (--standby-of only)"}, S, "/standby_pair/peer_heard_s_ago"},
  {{"flowtune_allocator_turn_seconds", H, "seconds", "", "Loop turns that received messages: first receive to last reply handed to ZeroMQ"}, Hi, "/turn_ns", 1e-9},
  {{"flowtune_allocator_iteration_seconds", H, "seconds", "", "Engine iterations; the sum is the engine's time"}, Hi, "/iteration_ns", 1e-9},
  {{"flowtune_allocator_early_answer_seconds", H, "seconds", "", "From a turn's start to its early rates handed to ZeroMQ"}, Hi, "/early_answer_ns", 1e-9},
  {{"flowtune_allocator_memory_check_seconds", H, "seconds", "", "The loop's memory checks (weighing and trimming the heap)"}, Hi, "/memory_check_ns", 1e-9},
  {{"flowtune_allocator_timer_seconds", H, "seconds", "", "Timer work: lease refresh and timeout scans, deadlines"}, Hi, "/timer_ns", 1e-9},
  {{"flowtune_allocator_busy_links", G, "1", "", "Links carrying flows; the per-link metrics show the first --metrics-max-links of them"}, L, "/total"},
  {{"flowtune_allocator_link_capacity_bytes_per_second", G, "bytes/s", "link", "A busy link's capacity"}, L, "/links", 0.125, "capacity_bps", "name"},
  {{"flowtune_allocator_link_allocated_bytes_per_second", G, "bytes/s", "link", "Rates allocated on a busy link"}, L, "/links", 0.125, "allocated_bps", "name"},
  {{"flowtune_allocator_link_utilization_ratio", G, "ratio", "link", "Allocated over capacity on a busy link"}, L, "/links", 1, "utilization", "name"},
  {{"flowtune_allocator_link_price", G, "1", "link", "A busy link's NED price"}, L, "/links", 1, "price", "name"},
  {{"flowtune_allocator_link_flows", G, "1", "link", "Flows on a busy link"}, L, "/links", 1, "flows", "name"},
};
// clang-format on

// "events" is the sum of hellos, starts, ends, heartbeats, resyncs, rate
// requests and progress, each exported; the *_ns members are quantiles of
// the histograms exported whole from the histograms reply.
const char* const kNotExported[] = {"events",      "iteration_ns",    "turn_ns",
                                    "early_answer_ns", "memory_check_ns", "timer_ns"};

const metrics::Spec kUp = {"flowtune_allocator_up", G, "1", "",
                           "1 when the allocator answered this scrape's status request, else 0 (and nothing else is exposed)"};

}  // namespace

const metrics::Spec& allocator_up_spec() { return kUp; }

std::span<const metrics::Row> allocator_metric_rows() { return kTable; }

std::vector<metrics::Spec> allocator_metric_specs() { return metrics::specs(kUp, kTable); }

std::vector<std::string> allocator_metric_requests(std::size_t max_links) {
  std::vector<std::string> r = {"status", "histograms"};
  if (max_links > 0) r.push_back("links " + std::to_string(max_links));
  return r;
}

std::vector<prometheus::MetricFamily> allocator_metrics(const AllocatorReplies& r) {
  return metrics::families(kTable, {r.status, r.histograms, r.links});
}

std::span<const char* const> allocator_counters_not_exported() { return kNotExported; }

}  // namespace flowtune::daemon
