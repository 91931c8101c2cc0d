// Coflow trace replay (`flowtune-sim figure coflow-trace`, docs/coflows.md):
// the Coflow-Benchmark format (the Facebook 2010 MapReduce trace, 150 racks)
// replayed on a big switch of one port per rack, event by event, with rates
// from alloc::CoflowPlanner (the allocator's own planner) under each policy.
//
// Model: each rack is one port with an uplink and a downlink of port_gbps. A
// reducer's bytes come evenly from every mapper of its coflow (one flow per
// mapper and reducer); a flow whose mapper and reducer share a rack does not
// cross the fabric and is left out. Rates are a fluid: recomputed whenever a
// coflow arrives or flows end, constant in between, and a flow ends when its
// bytes run out. Policies:
//   pf       per-flow fair sharing (max-min, the planner's backfill alone)
//   pf-engine  per-flow proportional fairness as the daemon computes it with
//            --coflow-policy none: the engine (NED + F-NORM, log utility)
//            solved to its tolerance at every event, from the last prices
//   fair     per-port equal shares: each flow the smaller of its two links'
//            equal shares, the spare not handed on (per-flow fair sharing as
//            the Varys/Aalo trace simulator models it; a weaker baseline)
//   stf      smallest remaining coflow first, then the backfill
//   sebf     smallest effective bottleneck first with MADD, then the backfill
//   bssi     Sincronia's order (bottleneck-select-scale-iterate), then the backfill
//   offline  each coflow alone on the fabric: its bottleneck time, a bound no
//            schedule beats (not a schedule)
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace flowtune::sim {

struct TraceCoflow {
  std::uint64_t id = 0;
  double arrival_s = 0;
  std::vector<std::uint32_t> mappers;                      // ports
  std::vector<std::pair<std::uint32_t, double>> reducers;  // port, bytes
};

struct CoflowTrace {
  std::uint32_t ports = 0;
  std::vector<TraceCoflow> coflows;  // in arrival order
};

// Coflow-Benchmark text: "PORTS COFLOWS", then per coflow "ID ARRIVAL_MS
// M m1..mM R r1:MB .. rR:MB" (1 MB = 2^20 bytes). Throws std::runtime_error
// "NAME:LINE: reason".
CoflowTrace parse_coflow_trace(std::istream& in, const std::string& name);
// "fb" (the shipped Facebook trace, workloads/fb_coflows.txt) or a path.
CoflowTrace load_coflow_trace(const std::string& name_or_path);

// One flow of a coflow over the fabric: a reducer's bytes come evenly from
// every mapper of its coflow; a mapper and a reducer on one port exchange
// nothing over the fabric (no flow). The replay below and the packet model
// (allocator/packet) both expand coflows with this.
struct TraceFlow {
  std::uint32_t mapper = 0;   // port
  std::uint32_t reducer = 0;  // port
  double bytes = 0;           // > 0
};
std::vector<TraceFlow> trace_flows(const TraceCoflow& c);

struct CoflowSimConfig {
  std::string policy = "sebf";  // pf | pf-engine | fair | stf | sebf | bssi | offline
  // pf-engine: the most NED iterations per event (it stops at the engine's
  // tolerance).
  std::uint64_t engine_iterations = 2000;
  double port_gbps = 1.0;
  // Arrival times are multiplied by this: below 1 the same coflows come
  // faster (a higher load).
  double time_scale = 1.0;
  double ordered_share = 0.9;  // CoflowConfig::ordered_share
  double aging_s = 0;          // CoflowConfig::aging_s (a coflow waits from its arrival)
  std::size_t max_coflows = 0;  // the first N; 0 = all
  // Flows that would end within this of the next end are ended with it
  // (fewer events; each ends at its own exact time).
  // Measured on the first 300 coflows: 0.1, 1 and 10 ms give the same mean
  // CCT (31.084 s) and p95 within 0.01%, with 89k, 63k and 29k rate changes.
  double batch_s = 0.01;
};

// "" when valid, else why not.
std::string check(const CoflowSimConfig& c);

struct CoflowOutcome {
  std::uint64_t id = 0;
  double arrival_s = 0;
  double cct_s = 0;
  double bytes = 0;        // over the fabric
  std::uint32_t flows = 0;  // over the fabric
  double longest_flow_bytes = 0;
  double bound_s = 0;  // alone on the fabric
};

struct CoflowSimResult {
  std::vector<CoflowOutcome> coflows;  // those with bytes over the fabric
  std::size_t left_out = 0;  // coflows with no byte over the fabric (inside racks, or empty)
  double offered_load = 0;             // fabric bytes / (ports × rate × arrival span)
  std::uint64_t events = 0;
  double wall_s = 0;
};

CoflowSimResult simulate_coflows(const CoflowTrace& trace, const CoflowSimConfig& c);

// mean, p95, by Varys's bins (short: longest flow < 5 MB; narrow: ≤ 50 flows),
// cct_small_mean_s over the short-and-narrow bin; slowdowns (CCT over the
// coflow's time alone: how far a schedule starves it) at p50, p99 and max.
nlohmann::json summarize(const CoflowSimResult& r);

}  // namespace flowtune::sim
