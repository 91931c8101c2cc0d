#include "coflow_trace.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <unordered_set>

#include "flowtune/alloc/coflow.h"
#include "flowtune/alloc/engine.h"

namespace flowtune::sim {

using nlohmann::json;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

[[noreturn]] void bad(const std::string& name, std::size_t line, const std::string& why) {
  throw std::runtime_error(name + ":" + std::to_string(line) + ": " + why);
}

}  // namespace

CoflowTrace parse_coflow_trace(std::istream& in, const std::string& name) {
  CoflowTrace t;
  std::string text;
  std::size_t lineno = 0, expected = 0;
  bool header = false;
  std::unordered_set<std::uint64_t> ids;
  while (std::getline(in, text)) {
    ++lineno;
    std::istringstream ls(text);
    if (!header) {
      long long ports = 0, n = 0;
      if (!(ls >> ports >> n) || ports <= 0 || ports > 1'000'000 || n < 0 || n > 10'000'000) {
        bad(name, lineno, "expected 'PORTS COFLOWS' (positive counts)");
      }
      t.ports = static_cast<std::uint32_t>(ports);
      expected = static_cast<std::size_t>(n);
      header = true;
      continue;
    }
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    TraceCoflow c;
    double arrival_ms = 0;
    long long m = 0;
    if (!(ls >> c.id >> arrival_ms >> m) || !(arrival_ms >= 0) || m <= 0 || m > t.ports) {
      bad(name, lineno, "expected 'ID ARRIVAL_MS MAPPERS ...' with 1..PORTS mappers");
    }
    c.arrival_s = arrival_ms / 1000;
    for (long long i = 0; i < m; ++i) {
      long long p = -1;
      if (!(ls >> p) || p < 0 || p >= t.ports) bad(name, lineno, "mapper port outside 0..PORTS-1");
      c.mappers.push_back(static_cast<std::uint32_t>(p));
    }
    long long r = 0;
    if (!(ls >> r) || r <= 0 || r > t.ports) bad(name, lineno, "expected 1..PORTS reducers");
    for (long long i = 0; i < r; ++i) {
      std::string tok;
      if (!(ls >> tok)) bad(name, lineno, "fewer reducers than announced");
      const auto colon = tok.find(':');
      char* end = nullptr;
      const long long p = std::strtoll(tok.c_str(), &end, 10);
      if (colon == std::string::npos || colon == 0 || end != tok.c_str() + colon || p < 0 ||
          p >= t.ports) {
        bad(name, lineno, "reducer '" + tok + "': expected PORT:MB with PORT in 0..PORTS-1");
      }
      const char* mb_text = tok.c_str() + colon + 1;
      const double mb = std::strtod(mb_text, &end);
      if (end == mb_text || *end != 0 || !(mb >= 0) || !std::isfinite(mb)) {
        bad(name, lineno, "reducer '" + tok + "': bad MB");
      }
      c.reducers.emplace_back(static_cast<std::uint32_t>(p), mb * kMiB);
    }
    std::string extra;
    if (ls >> extra) bad(name, lineno, "unexpected '" + extra + "' after the reducers");
    if (!t.coflows.empty() && c.arrival_s < t.coflows.back().arrival_s) {
      bad(name, lineno, "arrival times must not decrease");
    }
    if (!ids.insert(c.id).second) bad(name, lineno, "coflow id " + std::to_string(c.id) + " repeats");
    t.coflows.push_back(std::move(c));
  }
  if (!header) bad(name, lineno, "empty trace");
  if (t.coflows.size() != expected) {
    bad(name, lineno, "header announces " + std::to_string(expected) + " coflows, found " +
                          std::to_string(t.coflows.size()));
  }
  return t;
}

CoflowTrace load_coflow_trace(const std::string& name_or_path) {
  std::string path = name_or_path;
  if (name_or_path == "fb") {
    // The shipped trace: an installed copy, then the source tree.
    std::vector<std::string> dirs;
    if (const char* env = std::getenv("FLOWTUNE_WORKLOADS"); env != nullptr && *env != '\0') {
      dirs.emplace_back(env);
    }
    dirs.emplace_back(FT_SIM_INSTALLED_WORKLOADS);
    dirs.emplace_back(FT_SIM_SOURCE_WORKLOADS);
    path.clear();
    for (const auto& d : dirs) {
      if (std::ifstream(d + "/fb_coflows.txt").good()) {
        path = d + "/fb_coflows.txt";
        break;
      }
    }
    if (path.empty()) {
      throw std::runtime_error("trace 'fb' not found: set FLOWTUNE_WORKLOADS to the folder "
                               "holding fb_coflows.txt");
    }
  }
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open (a trace is 'fb' or a file)");
  return parse_coflow_trace(in, path);
}

std::vector<TraceFlow> trace_flows(const TraceCoflow& c) {
  std::vector<TraceFlow> out;
  for (const auto& [rp, bytes] : c.reducers) {
    const double each = bytes / static_cast<double>(c.mappers.size());
    for (std::uint32_t mp : c.mappers) {
      if (mp != rp && each > 0) out.push_back({mp, rp, each});
    }
  }
  return out;
}

std::string check(const CoflowSimConfig& c) {
  if (c.policy != "pf" && c.policy != "pf-engine" && c.policy != "fair" && c.policy != "stf" &&
      c.policy != "sebf" && c.policy != "bssi" && c.policy != "offline") {
    return "policy must be pf, pf-engine, fair, stf, sebf, bssi or offline";
  }
  if (!(c.port_gbps > 0 && c.port_gbps <= 1e4)) return "port rate must be within (0, 10000] Gbit/s";
  if (!(c.time_scale > 0 && c.time_scale <= 1e6)) return "time scale must be positive";
  if (!(c.ordered_share > 0 && c.ordered_share <= 1)) return "ordered share must be within (0, 1]";
  if (!(c.aging_s >= 0 && c.aging_s < alloc::kMaxAgingS)) return "aging must be within [0, 1e9) s";
  if (!(c.batch_s >= 0 && c.batch_s <= 1)) return "batch must be within [0, 1] s";
  return "";
}

namespace {

// One coflow's flows over the fabric: uplink of the mapper's port, downlink
// of the reducer's.
struct Expanded {
  std::vector<alloc::CoflowFlow> flows;
  CoflowOutcome out;
};

Expanded expand(const TraceCoflow& c, std::uint32_t ports, double port_bps) {
  Expanded e;
  e.out.id = c.id;
  std::vector<double> load(2 * static_cast<std::size_t>(ports), 0.0);
  for (const TraceFlow& t : trace_flows(c)) {
    alloc::CoflowFlow f;
    f.coflow = c.id;
    f.remaining_bytes = t.bytes;
    f.path.push(t.mapper);
    f.path.push(ports + t.reducer);
    load[t.mapper] += t.bytes;
    load[ports + t.reducer] += t.bytes;
    e.flows.push_back(f);
    e.out.bytes += t.bytes;
    e.out.longest_flow_bytes = std::max(e.out.longest_flow_bytes, t.bytes);
  }
  e.out.flows = static_cast<std::uint32_t>(e.flows.size());
  for (double b : load) e.out.bound_s = std::max(e.out.bound_s, 8 * b / port_bps);
  return e;
}

// Per-port equal shares: each flow gets the smaller of its uplink's and its
// downlink's capacity divided by the flows crossing that link, and what a
// flow cannot use is not handed on. That is per-flow fair sharing as the
// Varys/Aalo trace simulator defines it; `pf` is the max-min allocation,
// which hands the spare on and so is the stronger baseline.
void equal_shares(const std::vector<double>& cap, const std::vector<alloc::CoflowFlow>& flows,
                  std::vector<std::uint32_t>& count, std::vector<double>& rates) {
  count.assign(cap.size(), 0);
  for (const auto& f : flows) {
    for (std::uint32_t l : f.path) ++count[l];
  }
  rates.resize(flows.size());
  for (std::size_t i = 0; i < flows.size(); ++i) {
    double r = std::numeric_limits<double>::infinity();
    for (std::uint32_t l : flows[i].path) r = std::min(r, cap[l] / count[l]);
    rates[i] = r;
  }
}

}  // namespace

namespace {

// The trace's first coflows (c.max_coflows), expanded, with arrivals scaled
// (c.time_scale); those with no flow left out and counted. Sets the
// offered load.
std::vector<Expanded> expand_all(const CoflowTrace& trace, const CoflowSimConfig& c, double port_bps,
                                 CoflowSimResult& r) {
  const std::size_t n = c.max_coflows ? std::min(c.max_coflows, trace.coflows.size())
                                      : trace.coflows.size();
  std::vector<Expanded> all;
  all.reserve(n);
  double bytes = 0, first = 0, last = 0;
  for (std::size_t i = 0; i < n; ++i) {
    Expanded e = expand(trace.coflows[i], trace.ports, port_bps);
    e.out.arrival_s = trace.coflows[i].arrival_s * c.time_scale;
    if (e.flows.empty()) {
      ++r.left_out;
      continue;
    }
    if (all.empty()) first = e.out.arrival_s;
    last = e.out.arrival_s;
    bytes += e.out.bytes;
    all.push_back(std::move(e));
  }
  if (last > first) r.offered_load = 8 * bytes / (trace.ports * port_bps * (last - first));
  return all;
}

alloc::CoflowConfig planner_config(const CoflowSimConfig& c) {
  alloc::CoflowConfig pc;
  pc.policy = c.policy == "stf"    ? alloc::CoflowPolicy::kStf
              : c.policy == "sebf" ? alloc::CoflowPolicy::kSebf
              : c.policy == "bssi" ? alloc::CoflowPolicy::kBssi
                                   : alloc::CoflowPolicy::kNone;
  pc.ordered_share = c.ordered_share;
  pc.aging_s = c.aging_s;
  return pc;
}

constexpr double kInf = std::numeric_limits<double>::infinity();

// An online replay: coflows arrive, their flows get rates from the
// policy, and the clock moves to the next arrival or end.
struct Replay {
  const CoflowSimConfig& c;
  std::vector<Expanded>& all;
  CoflowSimResult& r;
  alloc::CoflowConfig pc;
  std::vector<double> cap;
  alloc::CoflowPlanner planner;
  // pf-engine: the allocator's own engine (NED + F-NORM, log utility) solved
  // to its tolerance at every event, from the last event's prices.
  std::unique_ptr<alloc::Engine> engine;
  std::vector<alloc::FlowId> engine_id;  // beside flows
  // Active flows stay grouped by coflow in arrival order (ends compact them
  // in place), so the planner's grouping finds them sorted.
  std::vector<alloc::CoflowFlow> flows;
  std::vector<std::uint32_t> owner;  // index into all
  std::vector<std::uint32_t> left;
  std::vector<double> rates;
  std::vector<std::uint32_t> per_link;
  double t = 0;
  std::size_t next = 0;

  Replay(const CoflowSimConfig& config, std::vector<Expanded>& coflows, CoflowSimResult& result,
         std::uint32_t ports, double port_bps)
      : c(config),
        all(coflows),
        r(result),
        pc(planner_config(config)),
        cap(2 * static_cast<std::size_t>(ports), port_bps),
        left(coflows.size(), 0) {
    if (c.policy == "pf-engine") {
      alloc::EngineConfig ec;
      engine = std::make_unique<alloc::Engine>(cap, 1, ec);
    }
  }

  bool done() const { return next >= all.size() && flows.empty(); }

  // The coflows that have arrived by t (by the next arrival when idle).
  void admit() {
    if (flows.empty()) t = std::max(t, all[next].out.arrival_s);
    while (next < all.size() && all[next].out.arrival_s <= t) {
      for (const auto& f : all[next].flows) {
        flows.push_back(f);
        owner.push_back(static_cast<std::uint32_t>(next));
        if (engine) {
          alloc::FlowSpec spec;
          spec.path = f.path;
          engine_id.push_back(engine->add_flow(spec));
        }
      }
      left[next] = static_cast<std::uint32_t>(all[next].flows.size());
      ++next;
    }
  }

  void allocate() {
    if (c.policy == "fair") {
      equal_shares(cap, flows, per_link, rates);
    } else if (engine) {
      engine->solve(c.engine_iterations);
      rates.resize(flows.size());
      for (std::size_t i = 0; i < flows.size(); ++i) rates[i] = engine->rate_bps(engine_id[i]);
    } else {
      if (pc.aging_s > 0) {
        for (std::size_t i = 0; i < flows.size(); ++i) flows[i].waited_s = t - all[owner[i]].out.arrival_s;
      }
      planner.plan(pc, cap, flows, rates);
      planner.backfill(cap, flows, rates);
    }
    ++r.events;
  }

  // Time to the next arrival or flow end.
  double step() const {
    double dt = next < all.size() ? all[next].out.arrival_s - t : kInf;
    for (std::size_t i = 0; i < flows.size(); ++i) {
      if (rates[i] > 0) dt = std::min(dt, 8 * flows[i].remaining_bytes / rates[i]);
    }
    if (!(dt < kInf)) throw std::logic_error("coflow replay: no flow can progress");
    return dt;
  }

  // Moves the clock by dt. Flows that end within batch_s after the next end
  // end now, each at its own time.
  void advance(double dt) {
    const double horizon = dt + c.batch_s;
    std::size_t w = 0;
    for (std::size_t i = 0; i < flows.size(); ++i) {
      const double need = rates[i] > 0 ? 8 * flows[i].remaining_bytes / rates[i] : kInf;
      if (need <= horizon) {
        // Ended at its own time; a coflow ends with the latest of its flows,
        // which need not be the last one ended.
        const std::uint32_t k = owner[i];
        CoflowOutcome& o = all[k].out;
        o.cct_s = std::max(o.cct_s, t + need - o.arrival_s);  // starts at 0
        if (--left[k] == 0) {
          r.coflows.push_back(o);
        }
        if (engine) engine->remove_flow(engine_id[i]);
        continue;
      }
      flows[i].remaining_bytes -= rates[i] * dt / 8;
      flows[w] = flows[i];
      owner[w] = owner[i];
      if (engine) engine_id[w] = engine_id[i];
      ++w;
    }
    flows.resize(w);
    owner.resize(w);
    if (engine) engine_id.resize(w);
    t += dt;
  }
};

}  // namespace

CoflowSimResult simulate_coflows(const CoflowTrace& trace, const CoflowSimConfig& c) {
  if (const std::string why = check(c); !why.empty()) throw std::invalid_argument(why);
  const auto wall0 = std::chrono::steady_clock::now();
  const double port_bps = c.port_gbps * 1e9;
  CoflowSimResult r;
  std::vector<Expanded> all = expand_all(trace, c, port_bps, r);

  if (c.policy == "offline") {
    for (auto& e : all) {
      e.out.cct_s = e.out.bound_s;
      r.coflows.push_back(e.out);
    }
    r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    return r;
  }

  Replay replay(c, all, r, trace.ports, port_bps);
  while (!replay.done()) {
    replay.admit();
    replay.allocate();
    replay.advance(replay.step());
  }
  std::sort(r.coflows.begin(), r.coflows.end(),
            [](const CoflowOutcome& a, const CoflowOutcome& b) { return a.id < b.id; });
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return r;
}

namespace {

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(rank);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

}  // namespace

json summarize(const CoflowSimResult& r) {
  std::vector<double> all;
  std::vector<double> bins[4];  // SN, LN, SW, LW
  std::vector<double> slowdown;
  for (const auto& o : r.coflows) {
    all.push_back(o.cct_s);
    if (o.bound_s > 0) slowdown.push_back(o.cct_s / o.bound_s);
    const bool is_short = o.longest_flow_bytes < 5 * kMiB;
    const bool narrow = o.flows <= 50;
    bins[(is_short ? 0 : 1) + (narrow ? 0 : 2)].push_back(o.cct_s);
  }
  json j = {{"coflows", r.coflows.size()},
            {"left_out", r.left_out},
            {"offered_load", r.offered_load},
            {"events", r.events},
            {"wall_s", r.wall_s},
            {"cct_mean_s", mean(all)},
            {"cct_p50_s", pct(all, 50)},
            {"cct_p95_s", pct(all, 95)},
            {"cct_small_mean_s", mean(bins[0])},
            {"slowdown_p50", pct(slowdown, 50)},
            {"slowdown_p99", pct(slowdown, 99)},
            {"slowdown_max", pct(slowdown, 100)}};
  const char* names[4] = {"short_narrow", "long_narrow", "short_wide", "long_wide"};
  for (int b = 0; b < 4; ++b) {
    j["bins"][names[b]] = {{"coflows", bins[b].size()}, {"cct_mean_s", mean(bins[b])},
                           {"cct_p95_s", pct(bins[b], 95)}};
  }
  return j;
}

}  // namespace flowtune::sim
