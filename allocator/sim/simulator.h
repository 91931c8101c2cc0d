// The flow-level simulator behind `flowtune-sim run` (paper §5.3.2, §5.4):
// flowlets arrive (Poisson, sizes from a measured CDF, random host pairs) on a
// two-tier network; every iteration_s of simulated time the real engine
// (allocator/core, the code the daemon runs) iterates once over the flows that
// exist, the allocator's update rule decides which endpoints hear of a new
// rate, and each flowlet drains at the rate its endpoint was last told.
//
// Model, step k (time t = k * iteration_s):
//   1. flowlets that arrived in (t - dt, t] and ends from the last drain reach
//      the allocator (one message per host per step);
//   2. one engine iteration; rates that moved by more than `threshold` are
//      sent (one message per host per step), as the daemon does;
//   3. measurements (every sample_every / oracle_every steps, after warm-up);
//   4. every flowlet drains for dt at its last notified rate; a flowlet whose
//      bytes run out ends at its exact finishing time.
// Control messages are encoded with the real wire codec, so byte counts are
// ours, not the paper's; they are assumed to arrive within the step.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flowtune/alloc/engine.h"
#include "flowtune/alloc/topology.h"
#include "flowtune/common/rules.h"
#include "flow_list.h"

namespace flowtune::sim {

struct SimConfig {
  // The paper's network (§5.3): 9 racks x 16 hosts, 4 spines, 10 Gbit/s,
  // full bisection.
  alloc::TwoTierSpec topology;
  std::string workload = "web";  // a built-in name or a CDF file
  double load = 0.6;             // offered load, fraction of host link capacity
  double warmup_s = 0.005;       // simulated, not measured
  double duration_s = 0.02;      // simulated and measured, after warm-up
  double iteration_s = 10e-6;    // the allocator iterates every 10 µs (§5.3)
  alloc::Algorithm algorithm = alloc::Algorithm::kNed;
  alloc::Normalizer normalizer = alloc::Normalizer::kFNorm;
  double gamma = 0.4;
  double gradient_step = 0.002;
  // Notify an endpoint when its rate moves by more than this fraction; the
  // engine allocates (1 - threshold) of every link so lagging rates fit (§5.3.2).
  // The rule, its rounding and this scaling are the daemon's
  // (flowtune/common/rules.h).
  double threshold = rules::kThreshold;
  // A further fraction of every link left unscheduled, as the daemon's
  // --headroom (paper §6): (1 - threshold)(1 - headroom) is scheduled.
  double headroom = rules::kHeadroom;
  std::uint64_t seed = 1;
  // Link measurements every N steps; 0 = none.
  std::uint32_t sample_every = 10;
  // Every N steps, solve the same flow set to optimality with a separate
  // engine (warm-started) and compare; 0 = never (it costs many iterations).
  std::uint32_t oracle_every = 0;
  double oracle_tolerance = 1e-5;
  std::uint32_t oracle_max_iterations = 5000;
  // Per packet on the wire: IPv4 20 + TCP 20 + Ethernet header, FCS,
  // preamble and inter-frame gap 38.
  std::uint32_t packet_overhead_bytes = 78;
  std::uint32_t mss_bytes = 1448;
  // Policy (docs/policy.md): this fraction of flowlets is tagged (drawn per
  // arrival whatever the mode, so both modes see the same flowlets); with
  // tagged_class0 they run in strict priority class 0, else in the default
  // class like the rest (the control). FCTs are reported for tagged and
  // other flowlets apart; "short" ones are at most short_bytes.
  double tagged_fraction = 0;
  bool tagged_class0 = false;
  // Iterate with the Clos layout (alloc::ClosEngine, docs/engine.md)
  // instead of the general engine: the same rates up to the rounding of
  // link sums, faster on large networks. F-NORM, one class.
  bool clos_engine = false;
  double short_bytes = 100e3;
  // Given flowlets (a flow list, flow_list.h): when not empty, these arrive
  // instead of the Poisson draw (workload and load unused), each on the
  // spine its ecmp_hash picks, and the run stops early once every one has
  // finished. Used to run the packet-level simulator's flows.
  std::vector<ListedFlow> flows;
  // Keep every flowlet's arrival and end in SimResult::flow_records.
  bool record_flows = false;
  // Optional: incremented by the number of steps run, for a progress bar.
  std::atomic<std::uint64_t>* progress = nullptr;
};

// Checks ranges; throws std::invalid_argument naming the field.
void validate(const SimConfig& c);
std::uint64_t total_steps(const SimConfig& c);

struct Distribution {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
  std::uint64_t count = 0;
};
Distribution summarize(std::vector<double> values);

struct SimResult {
  double wall_s = 0;
  // The engine's own time per iteration (steady_clock around iterate(),
  // measured window only) on the machine the simulation ran on: the
  // iteration interval this engine sustains at this network and load.
  double engine_iteration_us_mean = 0;
  std::uint64_t steps = 0;
  double offered_flowlets_per_s = 0;
  double workload_mean_bytes = 0;
  // Everything below counts the measured window only (after warm-up).
  std::uint64_t flowlets_started = 0;
  std::uint64_t flowlets_finished = 0;
  double active_flowlets_mean = 0;
  std::uint64_t active_flowlets_max = 0;
  Distribution fct_us;  // arrival to last byte, finished flowlets
  // The same for short flowlets (SimConfig::short_bytes), tagged and not.
  Distribution short_fct_tagged_us, short_fct_other_us;

  // Control traffic, bytes on the wire including per-packet overhead.
  std::uint64_t bytes_to_allocator = 0;
  std::uint64_t bytes_from_allocator = 0;
  std::uint64_t messages_to_allocator = 0;
  std::uint64_t messages_from_allocator = 0;
  std::uint64_t rate_updates = 0;
  std::uint64_t payload_bytes_to_allocator = 0;    // encoded messages only
  std::uint64_t payload_bytes_from_allocator = 0;
  // Bits sent / (Σ host link capacity x measured time): the paper's Fig. 9 axis.
  double fraction_to_allocator = 0;
  double fraction_from_allocator = 0;
  // The same messages priced at the paper's encodings (16 B per start, 4 B
  // per end, 6 B per update, §5.3) with the same per-packet overhead: what
  // our wire format costs beside theirs.
  std::uint64_t start_events = 0, end_events = 0;
  double paper_encoding_fraction_to = 0;
  double paper_encoding_fraction_from = 0;

  // Link samples (sample_every). Over-allocation: Σ over links of the raw
  // (unnormalized) rates above capacity, Gbit/s (Fig. 16).
  std::uint64_t link_samples = 0;
  Distribution overallocation_gbps;
  double max_link_utilization_normalized = 0;  // engine's normalized rates
  double max_link_utilization_applied = 0;     // rates endpoints were last told
  double throughput_normalized_gbps_mean = 0;
  double throughput_applied_gbps_mean = 0;

  // Oracle samples (oracle_every).
  std::uint64_t oracle_samples = 0;
  double oracle_iterations_mean = 0;
  std::uint64_t oracle_unconverged = 0;
  // Σ normalized rates / Σ optimal rates over all samples (Fig. 17).
  double fraction_of_optimal = 0;
  // Proportional-fairness score (§5.3.3 K): mean over flows and samples of
  // log2(rate / optimal rate), in points (0 = optimal, -1 = half the rate).
  double fairness_points_per_flow = 0;
  // Σ log2(rate) / Σ log2(optimal rate), rates in Mbit/s.
  double fairness_score_vs_optimal = 0;

  // SimConfig::record_flows: every flowlet that arrived, in arrival order,
  // warm-up included; end_s -1 for those still running at the end.
  std::vector<ListedFlow> flow_records;
};

SimResult simulate(const SimConfig& config);

nlohmann::json to_json(const SimConfig& c);
nlohmann::json to_json(const SimResult& r);
nlohmann::json to_json(const Distribution& d);

}  // namespace flowtune::sim
