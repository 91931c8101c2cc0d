#include "simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <variant>

#include "flowtune/alloc/clos_engine.h"
#include "flowtune/common/rules.h"
#include "flowtune/wire/codec.h"
#include "workload.h"

namespace flowtune::sim {

void validate(const SimConfig& c) {
  auto need = [](bool ok, const char* what) {
    if (!ok) throw std::invalid_argument(what);
  };
  const auto& t = c.topology;
  need(t.racks >= 1 && t.hosts_per_rack >= 1 && t.spines >= 1, "topology needs racks, hosts and spines");
  need(static_cast<std::uint64_t>(t.racks) * t.hosts_per_rack >= 2, "the network needs at least 2 hosts");
  need(static_cast<std::uint64_t>(t.racks) * t.hosts_per_rack <= 65536, "at most 65,536 hosts");
  need(t.host_link_bps >= 1e6 && t.host_link_bps <= 1e13, "host link rate must be in [1 Mbit/s, 10 Tbit/s]");
  need(c.load > 0 && c.load <= 2, "load must be in (0, 2]");
  need(c.warmup_s >= 0 && c.duration_s > 0 && c.warmup_s + c.duration_s <= 100,
       "duration must be positive and warm-up + duration at most 100 simulated seconds");
  need(c.iteration_s >= 1e-7 && c.iteration_s <= 0.1, "iteration interval must be in [0.1 µs, 100 ms]");
  need((c.warmup_s + c.duration_s) / c.iteration_s <= 1e9, "more than 1e9 iterations");
  need(rules::valid_threshold(c.threshold), "threshold must be in [0, 0.5]");
  need(rules::valid_headroom(c.headroom), "headroom must be in [0, 0.9]");
  need(c.gamma > 0 && c.gamma <= 1 && c.gradient_step > 0,
       "gamma must be within (0, 1] and the gradient step positive");
  need(c.oracle_tolerance > 0 && c.oracle_max_iterations > 0, "oracle tolerance and iterations must be positive");
  need(c.mss_bytes >= 64, "MSS must be at least 64 bytes");
  need(c.tagged_fraction >= 0 && c.tagged_fraction <= 1, "tagged fraction must be in [0, 1]");
  need(c.short_bytes > 0, "short flowlet size must be positive");
  need(!c.clos_engine || (c.normalizer == alloc::Normalizer::kFNorm && !c.tagged_class0),
       "the Clos engine runs F-NORM with one class: no --norm other than fnorm, no --class0");
  const std::uint64_t hosts = static_cast<std::uint64_t>(t.racks) * t.hosts_per_rack;
  for (std::size_t i = 0; i < c.flows.size(); ++i) {
    const ListedFlow& f = c.flows[i];
    need(f.src < hosts && f.dst < hosts && f.src != f.dst && f.bytes > 0 && f.start_s >= 0,
         "a given flow needs two distinct hosts of the network, bytes and a start >= 0");
    need(i == 0 || f.start_s >= c.flows[i - 1].start_s, "given flows must be sorted by start");
  }
  need(c.flows.empty() || c.tagged_fraction == 0, "given flows are not tagged: no --class0");
}

std::uint64_t total_steps(const SimConfig& c) {
  return static_cast<std::uint64_t>(std::llround((c.warmup_s + c.duration_s) / c.iteration_s));
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
    std::size_t i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
    return v[std::min(i, v.size() - 1)];
  };
  d.p50 = at(0.5);
  d.p90 = at(0.9);
  d.p99 = at(0.99);
  d.max = v.back();
  return d;
}

namespace {

using alloc::Engine;
using alloc::FlowId;
using alloc::HostId;

// One message per host per step in each direction, encoded with the real
// codec; bytes on the wire add ZeroMQ framing and per-packet headers.
class ControlCounter {
 public:
  ControlCounter(std::uint32_t hosts, const SimConfig& c)
      : to_(hosts), from_(hosts), digests_(hosts), overhead_(c.packet_overhead_bytes),
        mss_(c.mss_bytes) {}

  void start(HostId h, std::uint64_t key, const wire::FiveTuple& t, std::uint64_t bytes) {
    wire::FlowletStart s;
    s.flow_key = key;
    s.endpoints = t;
    s.bytes = bytes;
    touch(to_, h).events.emplace_back(s);
    digests_[h].add(key);
  }
  void end(HostId h, std::uint64_t key) {
    touch(to_, h).events.emplace_back(wire::FlowletEnd{key});
    digests_[h].remove(key);
  }
  void rate(HostId h, std::uint64_t key, std::uint64_t bytes_per_sec) {
    touch(from_, h).rates.push_back({key, bytes_per_sec, rules::kLeaseUs});
  }

  std::uint64_t paper_bytes_to() const { return paper_to_; }
  std::uint64_t paper_bytes_from() const { return paper_from_; }

  // Encodes and counts (when `count`) every pending message, then clears.
  void flush(bool count, SimResult* r) {
    for (HostId h : to_.touched) {
      auto& m = to_.pending[h];
      if (count) {
        m.seq = ++seq_;
        m.digest = digests_[h];  // as endpoints send it: every message carries one
        add(wire::encode(m).size(), &r->payload_bytes_to_allocator, &r->bytes_to_allocator);
        ++r->messages_to_allocator;
        std::size_t paper = 0;
        for (const auto& e : m.events) {
          bool is_start = std::holds_alternative<wire::FlowletStart>(e);
          (is_start ? r->start_events : r->end_events) += 1;
          paper += is_start ? 16 : 4;
        }
        paper_to_ += paper + packets(paper) * overhead_;
      }
      m.events.clear();
      to_.marked[h] = 0;
    }
    to_.touched.clear();
    for (HostId h : from_.touched) {
      auto& m = from_.pending[h];
      if (count) {
        m.epoch = 1;
        m.lease_refresh_us = rules::kLeaseUs;
        add(wire::encode(m).size(), &r->payload_bytes_from_allocator, &r->bytes_from_allocator);
        ++r->messages_from_allocator;
        r->rate_updates += m.rates.size();
        std::size_t paper = 6 * m.rates.size();
        paper_from_ += paper + packets(paper) * overhead_;
      }
      m.rates.clear();
      from_.marked[h] = 0;
    }
    from_.touched.clear();
  }

 private:
  template <typename Msg>
  struct Side {
    explicit Side(std::uint32_t hosts) : pending(hosts), marked(hosts, 0) {}
    std::vector<Msg> pending;
    std::vector<char> marked;
    std::vector<HostId> touched;
  };
  template <typename Msg>
  static Msg& touch(Side<Msg>& s, HostId h) {
    if (!s.marked[h]) {
      s.marked[h] = 1;
      s.touched.push_back(h);
    }
    return s.pending[h];
  }
  std::size_t packets(std::size_t bytes) const { return (bytes + mss_ - 1) / mss_; }
  void add(std::size_t encoded, std::uint64_t* payload, std::uint64_t* wire_bytes) const {
    const std::size_t framed = rules::zmq_frame_bytes(encoded);
    *payload += encoded;
    *wire_bytes += framed + packets(framed) * overhead_;
  }

  Side<wire::EndpointMessage> to_;
  Side<wire::AllocatorMessage> from_;
  std::vector<wire::StateDigest> digests_;  // each host's live flows, as its endpoint keeps it
  std::uint64_t seq_ = 0;
  std::uint64_t paper_to_ = 0, paper_from_ = 0;  // bytes at the paper's encodings
  std::uint32_t overhead_;
  std::uint32_t mss_;
};

struct Flowlet {
  double remaining_bytes = 0;
  double size_bytes = 0;
  double arrival_s = 0;
  std::uint64_t told_bytes_per_sec = 0;  // 0 = not told yet
  double notified_bps = 0;                // told_bytes_per_sec * 8
  std::uint64_t key = 0;
  alloc::Path path;
  HostId src = 0;
  FlowId oracle_id = 0;
  std::uint32_t active_pos = 0;
  bool tagged = false;
  std::uint32_t record = 0;  // index in SimResult::flow_records
};

class Simulation {
 public:
  explicit Simulation(const SimConfig& c);
  SimResult run();

 private:
  void arrive(double now);
  void admit(double now, HostId src, HostId dst, std::uint64_t key, std::uint64_t hash, bool tagged,
             double bytes);
  double next_arrival();
  void finalize(std::uint64_t steps, std::uint64_t warm_steps, double engine_s);
  void finish(FlowId id, double when);
  void step_updates(bool measuring);
  void drain(double t0);
  void sample_links();
  void sample_oracle();

  static alloc::EngineConfig engine_config(const SimConfig& c);

  SimConfig c_;
  alloc::Topology topo_;
  FlowSizeCdf sizes_;
  Rng rng_;
  PoissonArrivals arrivals_;
  // The engine every step iterates: clos_ when the config asks for it.
  FlowId add_flow(const alloc::FlowSpec& spec) { return clos_ ? clos_->add_flow(spec) : engine_.add_flow(spec); }
  void remove_flow(FlowId id) { clos_ ? clos_->remove_flow(id) : engine_.remove_flow(id); }
  void iterate_engine() { clos_ ? clos_->iterate() : engine_.iterate(); }
  double rate_bps(FlowId id) const { return clos_ ? clos_->rate_bps(id) : engine_.rate_bps(id); }
  double raw_rate_bps(FlowId id) const { return clos_ ? clos_->raw_rate_bps(id) : engine_.raw_rate_bps(id); }
  void tell(Flowlet& f, double rate_units);

  Engine engine_;
  std::unique_ptr<alloc::ClosEngine> clos_;
  std::unique_ptr<Engine> oracle_;
  ControlCounter control_;
  std::vector<Flowlet> flows_;      // by engine FlowId
  std::vector<FlowId> active_;      // dense list of live ids
  std::vector<std::uint64_t> next_key_;  // per host
  double next_arrival_s_;
  std::size_t next_given_ = 0;  // SimConfig::flows
  bool measuring_ = false;
  SimResult r_;
  std::vector<double> fct_us_, short_tagged_us_, short_other_us_;
  std::vector<double> overalloc_;
  double active_sum_ = 0;
  double throughput_norm_sum_ = 0, throughput_applied_sum_ = 0;
  double optimal_sum_ = 0, normalized_sum_ = 0;
  double fair_points_sum_ = 0, fair_log_sum_ = 0, fair_opt_log_sum_ = 0;
  std::uint64_t fair_flows_ = 0;
  double oracle_iterations_sum_ = 0;
  std::vector<double> y_raw_, y_norm_, y_applied_;
};

alloc::EngineConfig Simulation::engine_config(const SimConfig& c) {
  alloc::EngineConfig e;
  e.algorithm = c.algorithm;
  e.normalizer = c.normalizer;
  e.gamma = c.gamma;
  e.gradient_step = c.gradient_step;
  return e;
}

// The daemon's scheduled capacities (rules::capacity_scale).
std::vector<double> scaled(std::vector<double> caps, const SimConfig& c) {
  const double factor = rules::capacity_scale(c.threshold, c.headroom);
  for (double& x : caps) x *= factor;
  return caps;
}

Simulation::Simulation(const SimConfig& c)
    : c_((validate(c), c)),
      topo_(alloc::Topology::two_tier(c.topology)),
      sizes_(load_workload(c.workload)),
      rng_(c.seed),
      arrivals_(c.load, topo_.num_hosts(), c.topology.host_link_bps, sizes_.mean()),
      engine_(scaled(topo_.capacities_bps(), c), topo_.num_sites(), engine_config(c)),
      control_(topo_.num_hosts(), c),
      next_key_(topo_.num_hosts(), 0),
      next_arrival_s_(0) {
  if (c.clos_engine) {
    clos_ = std::make_unique<alloc::ClosEngine>(topo_, engine_config(c), scaled(topo_.capacities_bps(), c));
  }
  if (c.oracle_every > 0) {
    alloc::EngineConfig o;  // NED, run to convergence, unnormalized
    o.normalizer = alloc::Normalizer::kNone;
    o.tolerance = c.oracle_tolerance;
    oracle_ = std::make_unique<Engine>(scaled(topo_.capacities_bps(), c),
                                       topo_.num_sites(), o);
  }
  next_arrival_s_ = next_arrival();
  y_raw_.resize(topo_.num_links());
  y_norm_.resize(topo_.num_links());
  y_applied_.resize(topo_.num_links());
}

// The 5-tuple an endpoint would report for its key-th flowlet (10.h.h.h, an
// ephemeral port per flowlet) and its ECMP hash, which picks the spine.
wire::FiveTuple endpoint_tuple(HostId src, HostId dst, std::uint64_t key) {
  return wire::FiveTuple{0x0a000000u | src, 0x0a000000u | dst,
                         static_cast<std::uint16_t>(32768 + key % 28000), 5201, 6};
}

// The next arrival's time: the next given flowlet's start, or the Poisson
// process's next draw; infinity once the given ones have all arrived.
double Simulation::next_arrival() {
  if (c_.flows.empty()) return arrivals_.next(rng_);
  if (next_given_ < c_.flows.size()) return c_.flows[next_given_].start_s;
  return std::numeric_limits<double>::infinity();
}

void Simulation::arrive(double now) {
  if (!c_.flows.empty()) {
    const ListedFlow& g = c_.flows[next_given_++];
    admit(now, g.src, g.dst, ++next_key_[g.src], g.ecmp_hash, false, static_cast<double>(g.bytes));
    return;
  }
  HostId src = rng_.below(topo_.num_hosts());
  HostId dst = rng_.below(topo_.num_hosts() - 1);
  if (dst >= src) ++dst;
  const std::uint64_t key = ++next_key_[src];
  const wire::FiveTuple t = endpoint_tuple(src, dst, key);
  const std::uint64_t hash =
      alloc::ecmp_hash(alloc::FiveTuple{t.src_ip, t.dst_ip, t.src_port, t.dst_port, t.protocol});
  // Drawn only when tagging is on, so runs without it keep their arrivals.
  const bool tagged = c_.tagged_fraction > 0 && rng_.uniform() < c_.tagged_fraction;
  admit(now, src, dst, key, hash, tagged, sizes_.sample(rng_));
}

void Simulation::admit(double now, HostId src, HostId dst, std::uint64_t key, std::uint64_t hash,
                       bool tagged, double bytes) {
  alloc::FlowSpec spec = alloc::make_flow(topo_, src, dst, hash);
  if (tagged && c_.tagged_class0) spec.priority = 0;
  FlowId id = add_flow(spec);
  if (id >= flows_.size()) flows_.resize(id + 1);
  Flowlet& f = flows_[id];
  f = Flowlet{};
  f.size_bytes = f.remaining_bytes = bytes;
  f.arrival_s = now;
  f.key = key;
  f.path = spec.path;
  f.src = src;
  f.tagged = tagged;
  f.active_pos = static_cast<std::uint32_t>(active_.size());
  if (oracle_) f.oracle_id = oracle_->add_flow(spec);
  active_.push_back(id);
  control_.start(src, key, endpoint_tuple(src, dst, key), static_cast<std::uint64_t>(f.size_bytes));
  if (measuring_) ++r_.flowlets_started;
  if (c_.record_flows) {
    f.record = static_cast<std::uint32_t>(r_.flow_records.size());
    r_.flow_records.push_back(
        {src, dst, static_cast<std::uint64_t>(std::llround(bytes)), now, hash, -1.0});
  }
}

void Simulation::finish(FlowId id, double when) {
  Flowlet& f = flows_[id];
  if (measuring_) {
    ++r_.flowlets_finished;
    const double fct = (when - f.arrival_s) * 1e6;
    fct_us_.push_back(fct);
    if (f.size_bytes <= c_.short_bytes) (f.tagged ? short_tagged_us_ : short_other_us_).push_back(fct);
  }
  if (c_.record_flows) r_.flow_records[f.record].end_s = when;
  control_.end(f.src, f.key);
  remove_flow(id);
  if (oracle_) oracle_->remove_flow(f.oracle_id);
  FlowId last = active_.back();
  active_[f.active_pos] = last;
  flows_[last].active_pos = f.active_pos;
  active_.pop_back();
}

// The daemon's rule (rules::update_decision on rates rounded as endpoints
// apply them): a new flow always hears its rate, a known one when the rate
// moved by more than the threshold.
void Simulation::tell(Flowlet& f, double rate_units) {
  const std::uint64_t rate = rules::round_bytes_per_sec(rate_units * (Engine::kRateUnitBps / 8.0));
  if (rules::update_decision(rate, f.told_bytes_per_sec, c_.threshold) == rules::Update::kSend) {
    f.told_bytes_per_sec = rate;
    f.notified_bps = static_cast<double>(rate) * 8;
    control_.rate(f.src, f.key, rate);
  }
}

void Simulation::step_updates(bool measuring) {
  if (clos_) {
    const auto r = clos_->rates();
    for (std::size_t i = 0; i < r.size; ++i) {
      if (r.ids[i] != alloc::ClosEngine::kNoFlow) tell(flows_[r.ids[i]], r.rates[i]);
    }
  } else {
    for (std::size_t b = 0; b < engine_.num_blocks(); ++b) {
      const auto br = engine_.block_rates(b);
      for (std::size_t i = 0; i < br.size; ++i) tell(flows_[br.ids[i]], static_cast<double>(br.rates[i]));
    }
  }
  control_.flush(measuring, &r_);
}

void Simulation::drain(double t0) {
  const double dt = c_.iteration_s;
  // Walk backwards: finish() moves the last active flow into the hole.
  for (std::size_t i = active_.size(); i-- > 0;) {
    FlowId id = active_[i];
    Flowlet& f = flows_[id];
    if (f.notified_bps <= 0) continue;
    double bytes = f.notified_bps / 8 * dt;
    if (bytes < f.remaining_bytes) {
      f.remaining_bytes -= bytes;
    } else {
      finish(id, t0 + f.remaining_bytes * 8 / f.notified_bps);
    }
  }
}

void Simulation::sample_links() {
  std::fill(y_raw_.begin(), y_raw_.end(), 0);
  std::fill(y_norm_.begin(), y_norm_.end(), 0);
  std::fill(y_applied_.begin(), y_applied_.end(), 0);
  double norm = 0, applied = 0;
  for (FlowId id : active_) {
    const Flowlet& f = flows_[id];
    double raw = raw_rate_bps(id), x = rate_bps(id);
    norm += x;
    applied += f.notified_bps;
    for (alloc::LinkId l : f.path) {
      y_raw_[l] += raw;
      y_norm_[l] += x;
      y_applied_[l] += f.notified_bps;
    }
  }
  double over = 0;
  for (std::size_t l = 0; l < y_raw_.size(); ++l) {
    double cap = topo_.capacity_bps(static_cast<alloc::LinkId>(l));
    over += std::max(0.0, y_raw_[l] - cap);
    r_.max_link_utilization_normalized = std::max(r_.max_link_utilization_normalized, y_norm_[l] / cap);
    r_.max_link_utilization_applied = std::max(r_.max_link_utilization_applied, y_applied_[l] / cap);
  }
  overalloc_.push_back(over / 1e9);
  throughput_norm_sum_ += norm / 1e9;
  throughput_applied_sum_ += applied / 1e9;
  ++r_.link_samples;
}

void Simulation::sample_oracle() {
  if (active_.empty()) return;
  std::uint64_t before = oracle_->iterations();
  oracle_->solve(c_.oracle_max_iterations);
  oracle_iterations_sum_ += static_cast<double>(oracle_->iterations() - before);
  if (!oracle_->stats().converged) ++r_.oracle_unconverged;
  for (FlowId id : active_) {
    double x = rate_bps(id);
    double opt = oracle_->raw_rate_bps(flows_[id].oracle_id);
    normalized_sum_ += x;
    optimal_sum_ += opt;
    if (x > 0 && opt > 0) {
      fair_points_sum_ += std::log2(x / opt);
      fair_log_sum_ += std::log2(x / 1e6);
      fair_opt_log_sum_ += std::log2(opt / 1e6);
      ++fair_flows_;
    }
  }
  ++r_.oracle_samples;
}

SimResult Simulation::run() {
  auto wall0 = std::chrono::steady_clock::now();
  std::uint64_t steps = total_steps(c_);
  const std::uint64_t warm_steps = static_cast<std::uint64_t>(std::llround(c_.warmup_s / c_.iteration_s));
  std::uint64_t reported = 0;
  double engine_s = 0;
  for (std::uint64_t k = 1; k <= steps; ++k) {
    const double t = static_cast<double>(k) * c_.iteration_s;
    measuring_ = k > warm_steps;
    while (next_arrival_s_ <= t) {
      arrive(next_arrival_s_);
      next_arrival_s_ = next_arrival();
    }
    if (measuring_) {
      const auto e0 = std::chrono::steady_clock::now();
      iterate_engine();
      engine_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count();
    } else {
      iterate_engine();
    }
    step_updates(measuring_);
    if (measuring_) {
      active_sum_ += static_cast<double>(active_.size());
      r_.active_flowlets_max = std::max<std::uint64_t>(r_.active_flowlets_max, active_.size());
      if (c_.sample_every > 0 && k % c_.sample_every == 0) sample_links();
      if (oracle_ && k % c_.oracle_every == 0) sample_oracle();
    }
    drain(t);
    if (c_.progress != nullptr && (k & 255) == 0) {
      c_.progress->fetch_add(k - reported, std::memory_order_relaxed);
      reported = k;
    }
    // Given flowlets: done once every one arrived and finished.
    if (!c_.flows.empty() && next_given_ == c_.flows.size() && active_.empty()) {
      if (c_.progress != nullptr) c_.progress->fetch_add(steps - k, std::memory_order_relaxed);
      steps = k;
    }
  }
  if (c_.progress != nullptr) c_.progress->fetch_add(steps - reported, std::memory_order_relaxed);
  finalize(steps, warm_steps, engine_s);
  r_.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return r_;
}

// The result's totals and means over the `steps` run, of which the first
// `warm_steps` were not measured.
void Simulation::finalize(std::uint64_t steps, std::uint64_t warm_steps, double engine_s) {
  const std::uint64_t measured = steps - std::min(steps, warm_steps);
  const double seconds = static_cast<double>(measured) * c_.iteration_s;
  const double capacity = topo_.num_hosts() * c_.topology.host_link_bps;
  r_.steps = steps;
  r_.offered_flowlets_per_s = arrivals_.rate_per_s();
  r_.workload_mean_bytes = sizes_.mean();
  r_.active_flowlets_mean = measured ? active_sum_ / static_cast<double>(measured) : 0;
  r_.engine_iteration_us_mean = measured ? engine_s * 1e6 / static_cast<double>(measured) : 0;
  r_.fct_us = summarize(std::move(fct_us_));
  r_.short_fct_tagged_us = summarize(std::move(short_tagged_us_));
  r_.short_fct_other_us = summarize(std::move(short_other_us_));
  r_.fraction_to_allocator = seconds > 0 ? static_cast<double>(r_.bytes_to_allocator) * 8 / (capacity * seconds) : 0;
  r_.fraction_from_allocator = seconds > 0 ? static_cast<double>(r_.bytes_from_allocator) * 8 / (capacity * seconds) : 0;
  r_.overallocation_gbps = summarize(std::move(overalloc_));
  if (seconds > 0) {
    r_.paper_encoding_fraction_to = static_cast<double>(control_.paper_bytes_to()) * 8 / (capacity * seconds);
    r_.paper_encoding_fraction_from = static_cast<double>(control_.paper_bytes_from()) * 8 / (capacity * seconds);
  }
  if (r_.link_samples > 0) {
    r_.throughput_normalized_gbps_mean = throughput_norm_sum_ / static_cast<double>(r_.link_samples);
    r_.throughput_applied_gbps_mean = throughput_applied_sum_ / static_cast<double>(r_.link_samples);
  }
  if (r_.oracle_samples > 0) {
    r_.oracle_iterations_mean = oracle_iterations_sum_ / static_cast<double>(r_.oracle_samples);
    r_.fraction_of_optimal = optimal_sum_ > 0 ? normalized_sum_ / optimal_sum_ : 0;
    if (fair_flows_ > 0) {
      r_.fairness_points_per_flow = fair_points_sum_ / static_cast<double>(fair_flows_);
      r_.fairness_score_vs_optimal = fair_opt_log_sum_ != 0 ? fair_log_sum_ / fair_opt_log_sum_ : 0;
    }
  }
}

}  // namespace

SimResult simulate(const SimConfig& config) { return Simulation(config).run(); }

nlohmann::json to_json(const Distribution& d) {
  return {{"mean", d.mean}, {"p50", d.p50}, {"p90", d.p90},
          {"p99", d.p99},   {"max", d.max}, {"count", d.count}};
}

nlohmann::json to_json(const SimConfig& c) {
  nlohmann::json j = {{"racks", c.topology.racks},
          {"hosts_per_rack", c.topology.hosts_per_rack},
          {"spines", c.topology.spines},
          {"hosts", c.topology.racks * c.topology.hosts_per_rack},
          {"host_link_bps", c.topology.host_link_bps},
          {"workload", c.workload},
          {"load", c.load},
          {"warmup_s", c.warmup_s},
          {"duration_s", c.duration_s},
          {"iteration_us", c.iteration_s * 1e6},
          {"algorithm", alloc::to_string(c.algorithm)},
          {"normalizer", alloc::to_string(c.normalizer)},
          {"gamma", c.gamma},
          {"gradient_step", c.gradient_step},
          {"threshold", c.threshold},
          {"headroom", c.headroom},
          {"seed", c.seed},
          {"sample_every", c.sample_every},
          {"oracle_every", c.oracle_every},
          {"oracle_tolerance", c.oracle_tolerance},
          {"packet_overhead_bytes", c.packet_overhead_bytes},
          {"mss_bytes", c.mss_bytes},
          {"tagged_fraction", c.tagged_fraction},
          {"tagged_class0", c.tagged_class0},
          {"engine", c.clos_engine ? "clos" : "general"},
          {"short_bytes", c.short_bytes}};
  if (!c.flows.empty()) j["given_flows"] = c.flows.size();
  return j;
}

nlohmann::json to_json(const SimResult& r) {
  using nlohmann::json;
  auto per = [](std::uint64_t bytes, std::uint64_t n) {
    return n ? static_cast<double>(bytes) / static_cast<double>(n) : 0.0;
  };
  return {
      {"wall_s", r.wall_s},
      {"engine_iteration_us_mean", r.engine_iteration_us_mean},
      {"steps", r.steps},
      {"offered_flowlets_per_s", r.offered_flowlets_per_s},
      {"workload_mean_bytes", r.workload_mean_bytes},
      {"flowlets", {{"started", r.flowlets_started},
                    {"finished", r.flowlets_finished},
                    {"active_mean", r.active_flowlets_mean},
                    {"active_max", r.active_flowlets_max},
                    {"fct_us", to_json(r.fct_us)},
                    {"short_fct_tagged_us", to_json(r.short_fct_tagged_us)},
                    {"short_fct_other_us", to_json(r.short_fct_other_us)}}},
      {"control", {{"bytes_to_allocator", r.bytes_to_allocator},
                   {"bytes_from_allocator", r.bytes_from_allocator},
                   {"messages_to_allocator", r.messages_to_allocator},
                   {"messages_from_allocator", r.messages_from_allocator},
                   {"rate_updates", r.rate_updates},
                   {"payload_bytes_per_message_to", per(r.payload_bytes_to_allocator, r.messages_to_allocator)},
                   {"payload_bytes_per_message_from", per(r.payload_bytes_from_allocator, r.messages_from_allocator)},
                   {"wire_bytes_per_flowlet_to", per(r.bytes_to_allocator, r.flowlets_started)},
                   {"wire_bytes_per_update_from", per(r.bytes_from_allocator, r.rate_updates)},
                   {"fraction_to_allocator", r.fraction_to_allocator},
                   {"fraction_from_allocator", r.fraction_from_allocator},
                   {"fraction_of_capacity", r.fraction_to_allocator + r.fraction_from_allocator},
                   {"start_events", r.start_events},
                   {"end_events", r.end_events},
                   {"paper_encoding_fraction_to", r.paper_encoding_fraction_to},
                   {"paper_encoding_fraction_from", r.paper_encoding_fraction_from},
                   {"paper_encoding_fraction_of_capacity",
                    r.paper_encoding_fraction_to + r.paper_encoding_fraction_from}}},
      {"links", {{"samples", r.link_samples},
                 {"overallocation_gbps", to_json(r.overallocation_gbps)},
                 {"max_utilization_normalized", r.max_link_utilization_normalized},
                 {"max_utilization_applied", r.max_link_utilization_applied},
                 {"throughput_normalized_gbps_mean", r.throughput_normalized_gbps_mean},
                 {"throughput_applied_gbps_mean", r.throughput_applied_gbps_mean}}},
      {"optimal", {{"samples", r.oracle_samples},
                   {"oracle_iterations_mean", r.oracle_iterations_mean},
                   {"oracle_unconverged", r.oracle_unconverged},
                   {"fraction_of_optimal", r.fraction_of_optimal},
                   {"fairness_points_per_flow", r.fairness_points_per_flow},
                   {"fairness_score_vs_optimal", r.fairness_score_vs_optimal}}}};
}

}  // namespace flowtune::sim
