// flowtune-packet: a packet-level simulation (ns-3) of Flowtune and the
// schemes the paper compares it with (§5.3), on the same network and
// workload. This header holds no ns-3 types: the CLI, the metrics and the
// tests use it without ns-3's headers (docs/packet.md).
//
// Flowtune in the loop: an allocator node on the simulated network runs the
// real engine (allocator/core) once per turn and the daemon's update rule
// (common/rules.h); starts, ends and rates cross the network as UDP packets
// as large as the real codec encodes them; endpoints pace each flowlet's TCP
// socket at the rate they were last told.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "flowtune/common/rules.h"

namespace flowtune::packet {

enum class Scheme { kFlowtune, kDctcp, kCubic, kBbr, kFqCodel };
enum class Shape { kClos, kStar };
enum class Traffic { kPoisson, kJoinLeave, kIncast, kGiven, kCoflowTrace };

const char* to_string(Scheme s);
const char* to_string(Shape s);
const char* to_string(Traffic t);
// Throw std::invalid_argument naming the accepted values.
Scheme parse_scheme(const std::string& s);
Shape parse_shape(const std::string& s);
Traffic parse_traffic(const std::string& s);

// One flowlet to send: host ids as the engine numbers them (rack-major).
struct FlowSpec {
  std::uint32_t src = 0;
  std::uint32_t dst = 0;
  std::uint64_t bytes = 0;
  double start_s = 0;
  double stop_s = 0;  // > 0: the sender stops writing then (a leave)
  // Its coflow (coflow-trace traffic): the trace's coflow id + 1; 0 = none.
  std::uint64_t coflow = 0;
};

struct Config {
  Scheme scheme = Scheme::kFlowtune;
  Shape shape = Shape::kClos;
  // The paper's network (§5.3): 9 racks x 16 hosts, 4 spines, 10 Gbit/s
  // host links and 40 Gbit/s ToR-spine links. A star is hosts on one switch.
  std::uint32_t racks = 9, hosts_per_rack = 16, spines = 4, star_hosts = 9;
  double host_gbps = 10, core_gbps = 40;
  double allocator_gbps = 40;          // the allocator's own link (to rack 0's ToR)
  double link_delay_us = 1.0;          // propagation, every link, one way
  std::uint32_t buffer_packets = 250;  // every port's queue
  std::uint32_t dctcp_k_packets = 65;  // ECN marking threshold (DCTCP at 10G)
  double codel_target_us = 50, codel_interval_us = 1000;
  double min_rto_us = 1000;
  std::uint32_t mss = 1448;

  Traffic traffic = Traffic::kPoisson;
  std::string workload = "web";  // allocator/sim's CDF names or a CDF file
  double load = 0.5;
  double duration_ms = 5;  // arrivals happen in [0, duration)
  double drain_ms = 100;   // then at most this long for the rest to finish
  std::uint32_t incast_senders = 8, incast_receivers = 1;
  std::uint64_t incast_bytes = 1'000'000;
  double join_interval_ms = 1;  // join/leave: a sender joins, later leaves, every interval
  std::vector<FlowSpec> flows;  // Traffic::kGiven
  // Traffic::kCoflowTrace (docs/packet.md): the first trace_coflows (0 =
  // all) of a Coflow-Benchmark trace ("fb" or a file), expanded into flows
  // as flowtune-sim coflows does, trace port p on host p % hosts. Bytes are
  // multiplied by trace_byte_scale, arrivals by time_scale and
  // trace_byte_scale (so the load does not depend on the byte scale).
  std::string trace = "fb";
  std::uint64_t trace_coflows = 0;
  double time_scale = 1;
  double trace_byte_scale = 1e-3;
  std::uint64_t seed = 1;

  // Flowtune.
  double turn_us = 45;  // the daemon's measured turn (docs/sim.md: 41-49 µs)
  // Control messages reach the allocator and the endpoints the moment they
  // are sent, off the network (counted as sent all the same): no control
  // delay, as in the flow-level model (docs/packet.md).
  bool instant_control = false;
  double threshold = rules::kThreshold;
  // The allocator's --coflow-policy (none, stf, sebf, bssi) and
  // --coflow-share: coflow order through the daemon's PolicyBook.
  std::string coflow_policy = "none";
  double coflow_share = 0.7;

  // Traces: per-flow received bytes in bins of bin_us (0 = none), and the
  // queue of the port into host `queue_host` sampled every queue_sample_us
  // (-1 = none).
  double bin_us = 0;
  int queue_host = -1;
  double queue_sample_us = 5;
};
// Checks ranges; throws std::invalid_argument naming the field.
void validate(const Config& c);
std::uint32_t num_hosts(const Config& c);
// The workload as flowlets (Poisson, join/leave, incast or the given list),
// drawn from the seed.
std::vector<FlowSpec> make_flows(const Config& c);

struct Distribution {
  double mean = 0, p50 = 0, p99 = 0, max = 0;
  std::uint64_t count = 0;
};
Distribution summarize(std::vector<double> v);

struct FlowResult {
  FlowSpec spec;
  double end_s = -1;            // last byte at the receiver; < 0: not finished
  double ideal_s = 0;           // the FCT alone on the empty network (closed form)
  std::uint64_t ecmp_hash = 0;  // of its 5-tuple: the spine its packets take
  std::uint64_t received = 0;
  std::vector<std::uint64_t> bins;  // bytes received per bin (Config::bin_us)
};

// Rates endpoints were told (Flowtune), in order: for convergence.
struct RateEvent {
  double t_s = 0;
  std::uint32_t flow = 0;
  double bps = 0;
};

struct HopStats {
  std::string name;
  Distribution queue_delay_us;  // per packet, time in the port's queue
  std::uint64_t dropped_bytes = 0, dropped_packets = 0, marked_packets = 0;
};

struct Result {
  std::vector<FlowResult> flows;
  std::vector<HopStats> hops;
  std::vector<RateEvent> rates;
  std::vector<double> queue_samples;     // packets, Config::queue_host
  std::vector<double> control_delay_us;  // start sent -> allocator received
  double simulated_s = 0;
  double wall_s = 0;
  std::uint64_t bytes_to_allocator = 0, bytes_from_allocator = 0;  // on the wire
  std::uint64_t messages_to_allocator = 0, messages_from_allocator = 0;
  std::uint64_t engine_iterations = 0;
};

Result run(const Config& c);

// Summaries (metrics.cc).
// Size buckets in packets of Config::mss: 1, 2-10, 11-100, 101-1000, > 1000.
int size_bucket(std::uint64_t bytes, std::uint32_t mss);
const char* bucket_name(int b);
inline constexpr int kBuckets = 5;
// Time from each join or leave to when every active flow's told rate is within
// `tolerance` of an equal share of the bottleneck (join/leave traffic).
std::vector<double> rate_convergence_us(const Config& c, const Result& r, double tolerance);
// The same read from the packets (every scheme): for each join or leave,
// the end of the first whole bin (Config::bin_us) after it in which every
// active flow received within `tolerance` of their mean. Events after which
// a flow leaves before that are left out. Empty without bins.
std::vector<double> throughput_convergence_us(const Config& c, const Result& r, double tolerance);
// Per-coflow completion times (coflow-trace traffic): CCT from the coflow's
// arrival to its last flow's last byte; its ideal is its busiest host link's
// payload bytes at the host rate (a bound no schedule beats).
struct CoflowResult {
  std::uint64_t id = 0;                           // the trace's
  double arrival_s = 0, end_s = -1, ideal_s = 0;  // end < 0: not finished
  std::uint32_t flows = 0;
  double bytes = 0, longest_flow_bytes = 0;  // as in the trace (unscaled)
};
std::vector<CoflowResult> coflow_results(const Config& c, const Result& r);
nlohmann::json to_json(const Config& c);
nlohmann::json summary_json(const Config& c, const Result& r);

}  // namespace flowtune::packet
