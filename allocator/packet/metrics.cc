// Config, workloads and the summaries of a run: no ns-3 here.
#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "coflow_trace.h"
#include "flowtune/alloc/coflow.h"
#include "packet.h"
#include "workload.h"

namespace flowtune::packet {

const char* to_string(Scheme s) {
  switch (s) {
    case Scheme::kFlowtune:
      return "flowtune";
    case Scheme::kDctcp:
      return "dctcp";
    case Scheme::kCubic:
      return "cubic";
    case Scheme::kBbr:
      return "bbr";
    case Scheme::kFqCodel:
      return "fqcodel";
  }
  return "?";
}
const char* to_string(Shape s) { return s == Shape::kClos ? "clos" : "star"; }
const char* to_string(Traffic t) {
  switch (t) {
    case Traffic::kPoisson:
      return "poisson";
    case Traffic::kJoinLeave:
      return "joinleave";
    case Traffic::kIncast:
      return "incast";
    case Traffic::kGiven:
      return "given";
    case Traffic::kCoflowTrace:
      return "coflow-trace";
  }
  return "?";
}

namespace {
template <typename E, int N>
E parse(const std::string& s, const E (&all)[N], const char* what) {
  std::string names;
  for (E e : all) {
    if (s == to_string(e)) return e;
    names += names.empty() ? "" : ", ";
    names += to_string(e);
  }
  throw std::invalid_argument(std::string(what) + " must be one of " + names + " (got '" + s +
                              "')");
}
}  // namespace

Scheme parse_scheme(const std::string& s) {
  const Scheme all[] = {Scheme::kFlowtune, Scheme::kDctcp, Scheme::kCubic, Scheme::kBbr,
                        Scheme::kFqCodel};
  return parse(s, all, "scheme");
}
Shape parse_shape(const std::string& s) {
  const Shape all[] = {Shape::kClos, Shape::kStar};
  return parse(s, all, "topology");
}
Traffic parse_traffic(const std::string& s) {
  const Traffic all[] = {Traffic::kPoisson, Traffic::kJoinLeave, Traffic::kIncast,
                         Traffic::kCoflowTrace};
  return parse(s, all, "traffic");
}

std::uint32_t num_hosts(const Config& c) {
  return c.shape == Shape::kStar ? c.star_hosts : c.racks * c.hosts_per_rack;
}

void validate(const Config& c) {
  auto need = [](bool ok, const char* what) {
    if (!ok) throw std::invalid_argument(what);
  };
  need(c.racks >= 1 && c.hosts_per_rack >= 1 && c.spines >= 1 && c.star_hosts >= 2,
       "racks, hosts per rack and spines must be >= 1, star hosts >= 2");
  need(num_hosts(c) >= 2 && num_hosts(c) <= 4096, "the network needs 2 to 4,096 hosts");
  need(c.hosts_per_rack <= 250 && c.racks <= 250 && c.spines <= 64,
       "at most 250 racks, 250 hosts per rack, 64 spines");
  need(c.host_gbps > 0 && c.host_gbps <= 400 && c.core_gbps > 0 && c.core_gbps <= 1600 &&
           c.allocator_gbps > 0 && c.allocator_gbps <= 1600,
       "link rates must be positive (at most 400 Gbit/s at hosts)");
  need(c.link_delay_us >= 0 && c.link_delay_us <= 1e5, "link delay must be in [0, 100 ms]");
  need(c.buffer_packets >= 4 && c.dctcp_k_packets >= 1 && c.dctcp_k_packets < c.buffer_packets,
       "buffers need >= 4 packets and DCTCP's K below the buffer");
  need(c.codel_target_us > 0 && c.codel_interval_us > c.codel_target_us,
       "CoDel target must be in (0, interval)");
  need(c.min_rto_us >= 10, "minimum RTO must be at least 10 µs");
  need(c.mss >= 64 && c.mss <= 8960, "MSS must be in [64, 8960]");
  need(c.load > 0 && c.load <= 1, "load must be in (0, 1]");
  need(c.duration_ms > 0 && c.duration_ms <= 10'000 && c.drain_ms >= 0 && c.drain_ms <= 10'000,
       "duration must be in (0, 10 s] and drain in [0, 10 s]");
  need(c.incast_senders >= 1 && c.incast_receivers >= 1 && c.incast_bytes >= 1 &&
           (c.traffic != Traffic::kIncast || c.incast_senders + c.incast_receivers <= num_hosts(c)),
       "incast needs senders + receivers <= hosts and at least one byte");
  need(c.join_interval_ms > 0, "join interval must be positive");
  need(c.turn_us >= 1 && c.turn_us <= 1e5, "turn must be in [1 µs, 100 ms]");
  need(rules::valid_threshold(c.threshold), "threshold must be in [0, 0.5]");
  need(c.bin_us >= 0 && c.queue_sample_us > 0, "bins must be >= 0 and queue samples > 0 µs");
  need(c.queue_host < static_cast<int>(num_hosts(c)), "queue host must be a host");
  alloc::CoflowPolicy policy{};
  need(alloc::parse_coflow_policy(c.coflow_policy, policy) &&
           alloc::check(alloc::CoflowConfig{policy, c.coflow_share, 0}).empty(),
       "coflow policy must be none, stf, sebf or bssi, and its share in (0, 1]");
  need(c.time_scale > 0 && c.time_scale <= 1e6 && c.trace_byte_scale > 0 && c.trace_byte_scale <= 1,
       "time scale must be in (0, 1e6] and the trace's byte scale in (0, 1]");
  for (const auto& f : c.flows) {
    need(f.src != f.dst && f.src < num_hosts(c) && f.dst < num_hosts(c) && f.bytes > 0 &&
             f.start_s >= 0,
         "a given flow needs two distinct hosts, bytes and a start");
  }
}

namespace {

std::vector<FlowSpec> poisson_flows(const Config& c) {
  const sim::FlowSizeCdf sizes = sim::load_workload(c.workload);
  const std::uint32_t hosts = num_hosts(c);
  sim::Rng rng(c.seed);
  sim::PoissonArrivals arrivals(c.load, hosts, c.host_gbps * 1e9, sizes.mean());
  std::vector<FlowSpec> out;
  for (double t = arrivals.next(rng); t < c.duration_ms * 1e-3; t = arrivals.next(rng)) {
    FlowSpec f;
    f.src = rng.below(hosts);
    f.dst = rng.below(hosts - 1);
    if (f.dst >= f.src) ++f.dst;
    f.bytes =
        std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::llround(sizes.sample(rng))));
    f.start_s = t;
    out.push_back(f);
  }
  return out;
}

// Paper §5.1 (A): eight senders to one receiver; sender i joins at i
// intervals and leaves at 8 + i, the last one staying to the end.
std::vector<FlowSpec> join_leave_flows(const Config& c) {
  const double gap = c.join_interval_ms * 1e-3;
  const std::uint32_t n = std::min<std::uint32_t>(8, num_hosts(c) - 1);
  std::vector<FlowSpec> out;
  for (std::uint32_t i = 0; i < n; ++i) {
    FlowSpec f;
    f.src = i + 1;
    f.dst = 0;
    f.bytes = std::uint64_t{1} << 40;  // stopped by stop_s
    f.start_s = i * gap;
    f.stop_s = (n + i) * gap;
    out.push_back(f);
  }
  return out;
}

// An N x M coflow: every sender sends incast_bytes to every receiver at 0.
std::vector<FlowSpec> incast_flows(const Config& c) {
  std::vector<FlowSpec> out;
  for (std::uint32_t r = 0; r < c.incast_receivers; ++r) {
    for (std::uint32_t s = 0; s < c.incast_senders; ++s) {
      out.push_back({c.incast_receivers + s, r, c.incast_bytes, 0.0, 0.0});
    }
  }
  return out;
}

// The trace's first coflows as flows (sim::trace_flows: as flowtune-sim
// coflows expands them), trace port p on host p % hosts; a flow whose two
// ports land on one host is left out. Throws if the trace does not load.
std::vector<FlowSpec> coflow_trace_flows(const Config& c) {
  const sim::CoflowTrace trace = sim::load_coflow_trace(c.trace);
  const std::uint32_t hosts = num_hosts(c);
  const std::size_t n = c.trace_coflows == 0
                            ? trace.coflows.size()
                            : std::min<std::size_t>(c.trace_coflows, trace.coflows.size());
  std::vector<FlowSpec> out;
  for (std::size_t i = 0; i < n; ++i) {
    const sim::TraceCoflow& k = trace.coflows[i];
    for (const sim::TraceFlow& t : sim::trace_flows(k)) {
      FlowSpec f;
      f.src = t.mapper % hosts;
      f.dst = t.reducer % hosts;
      if (f.src == f.dst) continue;
      f.bytes = std::max<std::uint64_t>(1, std::llround(t.bytes * c.trace_byte_scale));
      f.start_s = k.arrival_s * c.time_scale * c.trace_byte_scale;
      f.coflow = k.id + 1;
      out.push_back(f);
    }
  }
  return out;
}

}  // namespace

std::vector<FlowSpec> make_flows(const Config& c) {
  switch (c.traffic) {
    case Traffic::kPoisson:
      return poisson_flows(c);
    case Traffic::kJoinLeave:
      return join_leave_flows(c);
    case Traffic::kIncast:
      return incast_flows(c);
    case Traffic::kGiven:
      return c.flows;
    case Traffic::kCoflowTrace:
      return coflow_trace_flows(c);
  }
  return {};
}

Distribution summarize(std::vector<double> v) {
  Distribution d;
  d.count = v.size();
  if (v.empty()) return d;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  d.mean = sum / static_cast<double>(v.size());
  auto at = [&](double q) {
    auto i = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
  };
  d.p50 = at(0.5);
  d.p99 = at(0.99);
  d.max = v.back();
  return d;
}

int size_bucket(std::uint64_t bytes, std::uint32_t mss) {
  const std::uint64_t packets = (bytes + mss - 1) / mss;
  if (packets <= 1) return 0;
  if (packets <= 10) return 1;
  if (packets <= 100) return 2;
  if (packets <= 1000) return 3;
  return 4;
}

const char* bucket_name(int b) {
  static const char* names[kBuckets] = {"1", "2-10", "11-100", "101-1000", ">1000"};
  return b >= 0 && b < kBuckets ? names[b] : "?";
}

}  // namespace flowtune::packet

namespace flowtune::packet {

// For each join (a flow's start) or leave (its last byte's arrival) at t,
// the time to the told-rate event after which every flow active then holds
// a rate within `tolerance` of an equal share of the receiver's link (host
// rate x (1 - threshold), the engine's scheduled capacity).
std::vector<double> rate_convergence_us(const Config& c, const Result& r, double tolerance) {
  auto ends = [](const FlowResult& f) { return f.end_s < 0 ? 1e300 : f.end_s; };
  std::vector<double> events;
  for (const auto& f : r.flows) {
    events.push_back(f.spec.start_s);
    if (f.end_s >= 0) events.push_back(f.end_s);
  }
  std::sort(events.begin(), events.end());
  std::vector<double> out;
  std::vector<double> held(r.flows.size(), 0);
  std::size_t k = 0;
  const double capacity = c.host_gbps * 1e9 * rules::capacity_scale(c.threshold, rules::kHeadroom);
  for (double t : events) {
    for (; k < r.rates.size() && r.rates[k].t_s < t; ++k) held[r.rates[k].flow] = r.rates[k].bps;
    std::vector<std::uint32_t> active;
    for (std::uint32_t i = 0; i < r.flows.size(); ++i) {
      if (r.flows[i].spec.start_s <= t && ends(r.flows[i]) > t) active.push_back(i);
    }
    if (active.empty()) continue;
    const double share = capacity / static_cast<double>(active.size());
    auto fair = [&](const std::vector<double>& rates) {
      for (std::uint32_t i : active) {
        if (std::fabs(rates[i] - share) > tolerance * share) return false;
      }
      return true;
    };
    std::vector<double> now = held;
    std::size_t j = k;
    for (; !fair(now) && j < r.rates.size(); ++j) now[r.rates[j].flow] = r.rates[j].bps;
    if (fair(now)) out.push_back(j > k ? (r.rates[j - 1].t_s - t) * 1e6 : 0.0);
  }
  return out;
}

// For each join or leave at t (as rate_convergence_us), the end of the
// first whole bin after t in which every active flow received within
// `tolerance` of the active flows' mean: convergence of what the packets
// did, for every scheme, at the resolution of Config::bin_us.
std::vector<double> throughput_convergence_us(const Config& c, const Result& r, double tolerance) {
  std::vector<double> out;
  if (c.bin_us <= 0) return out;
  const double bin_s = c.bin_us * 1e-6;
  auto ends = [](const FlowResult& f) { return f.end_s < 0 ? 1e300 : f.end_s; };
  auto at = [](const FlowResult& f, std::size_t j) {
    return j < f.bins.size() ? static_cast<double>(f.bins[j]) : 0.0;
  };
  for (const auto& e : r.flows) {
    for (double t : {e.spec.start_s, e.end_s}) {
      if (t < 0) continue;
      std::vector<const FlowResult*> active;
      for (const auto& f : r.flows) {
        if (f.spec.start_s <= t && ends(f) > t) active.push_back(&f);
      }
      if (active.empty()) continue;
      for (auto j = static_cast<std::size_t>(std::ceil(t / bin_s));; ++j) {
        double sum = 0;
        bool live = false;
        for (const auto* f : active) {
          sum += at(*f, j);
          live = live || ends(*f) > (static_cast<double>(j) + 1) * bin_s;
        }
        if (!live) break;  // someone left before the flows evened out
        const double mean = sum / static_cast<double>(active.size());
        const bool even = std::all_of(active.begin(), active.end(), [&](const FlowResult* f) {
          return std::fabs(at(*f, j) - mean) <= tolerance * mean;
        });
        if (mean > 0 && even) {
          out.push_back(((static_cast<double>(j) + 1) * bin_s - t) * 1e6);
          break;
        }
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {
nlohmann::json dist(const Distribution& d) {
  return {{"mean", d.mean}, {"p50", d.p50}, {"p99", d.p99}, {"max", d.max}, {"count", d.count}};
}
}  // namespace

nlohmann::json to_json(const Config& c) {
  nlohmann::json j = {{"scheme", to_string(c.scheme)},
                      {"topology", to_string(c.shape)},
                      {"racks", c.racks},
                      {"hosts_per_rack", c.hosts_per_rack},
                      {"spines", c.spines},
                      {"star_hosts", c.star_hosts},
                      {"host_gbps", c.host_gbps},
                      {"core_gbps", c.core_gbps},
                      {"allocator_gbps", c.allocator_gbps},
                      {"link_delay_us", c.link_delay_us},
                      {"buffer_packets", c.buffer_packets},
                      {"dctcp_k_packets", c.dctcp_k_packets},
                      {"codel_target_us", c.codel_target_us},
                      {"codel_interval_us", c.codel_interval_us},
                      {"min_rto_us", c.min_rto_us},
                      {"mss", c.mss},
                      {"traffic", to_string(c.traffic)},
                      {"workload", c.workload},
                      {"load", c.load},
                      {"duration_ms", c.duration_ms},
                      {"drain_ms", c.drain_ms},
                      {"incast_senders", c.incast_senders},
                      {"incast_receivers", c.incast_receivers},
                      {"incast_bytes", c.incast_bytes},
                      {"join_interval_ms", c.join_interval_ms},
                      {"seed", c.seed},
                      {"turn_us", c.turn_us},
                      {"control", c.instant_control ? "instant" : "network"},
                      {"threshold", c.threshold}};
  if (c.traffic == Traffic::kCoflowTrace) {
    j["trace"] = c.trace;
    j["trace_coflows"] = c.trace_coflows;
    j["time_scale"] = c.time_scale;
    j["trace_byte_scale"] = c.trace_byte_scale;
  }
  if (c.traffic == Traffic::kCoflowTrace || c.coflow_policy != "none") {
    j["coflow_policy"] = c.coflow_policy;
    j["coflow_share"] = c.coflow_share;
  }
  return j;
}

namespace {

// FCT slowdown per size bucket, over finished flows.
nlohmann::json slowdowns(const Config& c, const Result& r) {
  std::vector<std::vector<double>> by(kBuckets);
  for (const auto& f : r.flows) {
    if (f.end_s < 0) continue;
    by[size_bucket(f.spec.bytes, c.mss)].push_back((f.end_s - f.spec.start_s) / f.ideal_s);
  }
  nlohmann::json out = nlohmann::json::object();
  for (int b = 0; b < kBuckets; ++b) out[bucket_name(b)] = dist(summarize(by[b]));
  return out;
}

// What flowtune-sim coflows reports (sim::summarize over the finished
// coflows: mean, p50, p95, Varys's bins, slowdowns against the ideal), the
// unfinished count, and every coflow.
nlohmann::json coflows_json(const Config& c, const Result& r) {
  sim::CoflowSimResult s;
  std::uint64_t unfinished = 0;
  nlohmann::json each = nlohmann::json::array();
  for (const CoflowResult& k : coflow_results(c, r)) {
    const double cct = k.end_s < 0 ? -1 : k.end_s - k.arrival_s;
    each.push_back({{"id", k.id},
                    {"arrival_s", k.arrival_s},
                    {"cct_s", cct},
                    {"ideal_s", k.ideal_s},
                    {"flows", k.flows},
                    {"bytes", k.bytes}});
    if (k.end_s < 0) {
      ++unfinished;
      continue;
    }
    s.coflows.push_back(
        {k.id, k.arrival_s, cct, k.bytes, k.flows, k.longest_flow_bytes, k.ideal_s});
  }
  nlohmann::json j = sim::summarize(s);
  for (const char* k : {"left_out", "offered_load", "events", "wall_s"}) j.erase(k);
  j["unfinished"] = unfinished;
  j["per_coflow"] = std::move(each);
  return j;
}

}  // namespace

std::vector<CoflowResult> coflow_results(const Config& c, const Result& r) {
  std::map<std::uint64_t, CoflowResult> by_id;
  std::map<std::uint64_t, std::map<std::uint32_t, std::pair<double, double>>> ports;  // up, down
  for (const FlowResult& f : r.flows) {
    if (f.spec.coflow == 0) continue;
    auto [it, fresh] = by_id.try_emplace(f.spec.coflow);
    CoflowResult& k = it->second;
    if (fresh) {
      k.id = f.spec.coflow - 1;
      k.arrival_s = f.spec.start_s;
      k.end_s = 0;
    }
    k.arrival_s = std::min(k.arrival_s, f.spec.start_s);
    ++k.flows;
    const double b = static_cast<double>(f.spec.bytes);
    k.bytes += b / c.trace_byte_scale;
    k.longest_flow_bytes = std::max(k.longest_flow_bytes, b / c.trace_byte_scale);
    ports[f.spec.coflow][f.spec.src].first += b;
    ports[f.spec.coflow][f.spec.dst].second += b;
    if (f.end_s < 0) k.end_s = -1;
    if (k.end_s >= 0) k.end_s = std::max(k.end_s, f.end_s);
  }
  std::vector<CoflowResult> out;
  for (auto& [key, k] : by_id) {
    double busiest = 0;
    for (const auto& [host, ud] : ports[key]) busiest = std::max({busiest, ud.first, ud.second});
    k.ideal_s = 8 * busiest / (c.host_gbps * 1e9);
    out.push_back(k);
  }
  return out;
}

nlohmann::json summary_json(const Config& c, const Result& r) {
  std::uint64_t finished = 0, bytes = 0, dropped = 0;
  double pf = 0;
  for (const auto& f : r.flows) {
    bytes += f.spec.bytes;
    if (f.end_s < 0) continue;
    ++finished;
    pf += std::log2(static_cast<double>(f.spec.bytes) * 8 / (f.end_s - f.spec.start_s) / 1e6);
  }
  nlohmann::json hops = nlohmann::json::object();
  for (const auto& h : r.hops) {
    dropped += h.dropped_bytes;
    hops[h.name] = {{"queue_delay_us", dist(h.queue_delay_us)},
                    {"dropped_bytes", h.dropped_bytes},
                    {"dropped_packets", h.dropped_packets},
                    {"marked_packets", h.marked_packets}};
  }
  const double capacity_bits = num_hosts(c) * c.host_gbps * 1e9 * std::max(r.simulated_s, 1e-12);
  nlohmann::json j = {
      {"config", to_json(c)},
      {"flows", r.flows.size()},
      {"finished", finished},
      {"bytes", bytes},
      {"fct_slowdown", slowdowns(c, r)},
      {"hops", hops},
      {"dropped_bytes", dropped},
      {"dropped_fraction", bytes ? static_cast<double>(dropped) / static_cast<double>(bytes) : 0.0},
      {"pf_score", pf},
      {"pf_score_per_flow", finished ? pf / static_cast<double>(finished) : 0.0},
      {"allocator_traffic_fraction",
       static_cast<double>(r.bytes_to_allocator + r.bytes_from_allocator) * 8 / capacity_bits},
      {"messages_to_allocator", r.messages_to_allocator},
      {"messages_from_allocator", r.messages_from_allocator},
      {"engine_iterations", r.engine_iterations},
      {"control_delay_us", dist(summarize(r.control_delay_us))},
      {"simulated_ms", r.simulated_s * 1e3},
      {"wall_s", r.wall_s},
      {"wall_s_per_simulated_ms", r.simulated_s > 0 ? r.wall_s / (r.simulated_s * 1e3) : 0.0}};
  if (c.traffic == Traffic::kJoinLeave && c.scheme == Scheme::kFlowtune) {
    j["rate_convergence_us"] = dist(summarize(rate_convergence_us(c, r, 0.1)));
  }
  if (c.traffic == Traffic::kJoinLeave && c.bin_us > 0) {
    j["throughput_convergence_us"] = dist(summarize(throughput_convergence_us(c, r, 0.25)));
  }
  if (!r.queue_samples.empty()) j["queue_packets"] = dist(summarize(r.queue_samples));
  if (c.traffic == Traffic::kCoflowTrace) j["coflows"] = coflows_json(c, r);
  return j;
}

}  // namespace flowtune::packet
