// Measures the wall time of one NED + F-NORM iteration (rate update, price
// update, normalization) on two-tier Clos networks with the paper's §5.2 sizes
// (384 hosts / 3,072 flows up to 4,608 hosts / 49,152 flows), for the engine
// in float and double, serial and on the multi-core driver at 1..N threads, next to a
// naive serial implementation (bench/naive_engine.h) on the same flows in the
// same run. Counters: ns per flow, and core-cycles per flow = wall time x TSC
// rate x threads / flows (TSC ticks at the nominal clock; turbo or throttling
// shift it). The Clos layout (clos_engine.h) is timed beside both, and
// beside the engine under churn. bench/engine_table.py turns the JSON output into the
// docs tables.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <utility>
#include <x86intrin.h>

#include "flowtune/alloc/clos_engine.h"
#include "floor_kernels.h"
#include "flowtune/alloc/coflow.h"
#include "flowtune/alloc/engine.h"
#include "flowtune/alloc/engine_driver.h"
#include "flowtune/alloc/parallel.h"
#include "naive_engine.h"
#include "workload.h"

namespace {

using flowtune::alloc::BasicEngine;
using flowtune::alloc::DriverView;
using flowtune::alloc::EngineConfig;
using flowtune::alloc::FlowSpec;
using flowtune::alloc::ParallelDriver;
using flowtune::alloc::Schedule;
using flowtune::alloc::Topology;
using flowtune::alloc::TwoTierSpec;

constexpr std::uint32_t kHostsPerRack = 16;
constexpr std::uint32_t kSpines = 4;
constexpr int kWarmupIterations = 50;
constexpr int kAbBlock = 10;

double tsc_hz() {
  static double hz = [] {
    auto t0 = std::chrono::steady_clock::now();
    std::uint64_t c0 = __rdtsc();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::uint64_t c1 = __rdtsc();
    std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    return static_cast<double>(c1 - c0) / dt.count();
  }();
  return hz;
}

Topology make_topology(std::uint32_t hosts) {
  TwoTierSpec s;
  s.racks = hosts / kHostsPerRack;
  s.hosts_per_rack = kHostsPerRack;
  s.spines = kSpines;
  s.host_link_bps = 40e9;  // the paper's throughput figures assume 40 Gbit/s links
  return Topology::two_tier(s);
}

void set_counters(benchmark::State& state, std::uint32_t flows, unsigned threads) {
  state.counters["flows"] = flows;
  state.counters["threads"] = threads;
  state.counters["ns_per_flow"] = benchmark::Counter(
      static_cast<double>(flows) * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["core_cycles_per_flow"] = benchmark::Counter(
      static_cast<double>(flows) / (tsc_hz() * threads),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// The engine and the naive baseline over the same flows; threads == 0 means
// the serial engine (one block), otherwise blocks for the multi-core driver.
template <typename Real>
std::unique_ptr<BasicEngine<Real>> make_engine(const Topology& t, const std::vector<FlowSpec>& specs,
                                               unsigned threads, bool sparse_links = true) {
  EngineConfig cfg;
  cfg.sparse_links = sparse_links;
  cfg.blocks = threads == 0 ? 1 : ParallelDriver::blocks_for_threads(threads);
  auto e = std::make_unique<BasicEngine<Real>>(t.capacities_bps(), t.num_sites(), cfg);
  for (const auto& f : specs) e->add_flow(f);
  return e;
}

flowtune::bench::NaiveEngine make_naive(const Topology& t, const std::vector<FlowSpec>& specs) {
  flowtune::bench::NaiveEngine e;
  for (double c : t.capacities_bps()) e.links.push_back({c / 1e9, 1, 0, 0});
  for (const auto& f : specs) {
    flowtune::bench::NaiveFlow nf;
    for (auto l : f.path) nf.path.push_back(static_cast<int>(l));
    e.flows.push_back(std::move(nf));
  }
  return e;
}

// A benchmark's arguments (hosts, flows, threads) and the network and flows
// they name.
struct Case {
  std::uint32_t flows;
  unsigned threads;
  Topology topology;
  std::vector<FlowSpec> specs;
};

Case make_case(const benchmark::State& state) {
  const auto hosts = static_cast<std::uint32_t>(state.range(0));
  const auto flows = static_cast<std::uint32_t>(state.range(1));
  Topology t = make_topology(hosts);
  std::vector<FlowSpec> specs = flowtune::bench::random_host_pairs(t, flows, 42);
  return {flows, static_cast<unsigned>(state.range(2)), std::move(t), std::move(specs)};
}

// Args: hosts, flows, threads (0 = the serial engine, no TBB).
template <typename Real>
void BM_Engine(benchmark::State& state) {
  auto hosts = static_cast<std::uint32_t>(state.range(0));
  auto flows = static_cast<std::uint32_t>(state.range(1));
  auto threads = static_cast<unsigned>(state.range(2));
  Topology t = make_topology(hosts);
  auto engine = make_engine<Real>(t, flowtune::bench::random_host_pairs(t, flows, 42), threads);
  BasicEngine<Real>& e = *engine;
  if (threads == 0) {
    for (int i = 0; i < kWarmupIterations; ++i) e.iterate();
    for (auto _ : state) e.iterate();
  } else {
    ParallelDriver d(threads);
    for (int i = 0; i < kWarmupIterations; ++i) d.iterate(e);
    for (auto _ : state) d.iterate(e);
  }
  set_counters(state, flows, threads == 0 ? 1 : threads);
}

void BM_Naive(benchmark::State& state) {
  auto hosts = static_cast<std::uint32_t>(state.range(0));
  auto flows = static_cast<std::uint32_t>(state.range(1));
  Topology t = make_topology(hosts);
  flowtune::bench::NaiveEngine e = make_naive(t, flowtune::bench::random_host_pairs(t, flows, 42));
  for (int i = 0; i < kWarmupIterations; ++i) e.iterate();
  for (auto _ : state) e.iterate();
  set_counters(state, flows, 1);
}

// Times kAbBlock iterations of a, then kAbBlock of b, per benchmark iteration
// (b's time per iteration is the reported manual time); returns the total
// seconds each took.
template <typename A, typename B>
std::pair<double, double> interleave(benchmark::State& state, A a, B b) {
  double a_s = 0, b_s = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kAbBlock; ++i) a();
    auto t1 = std::chrono::steady_clock::now();
    for (int i = 0; i < kAbBlock; ++i) b();
    auto t2 = std::chrono::steady_clock::now();
    std::chrono::duration<double> da = t1 - t0, db = t2 - t1;
    a_s += da.count();
    b_s += db.count();
    state.SetIterationTime(db.count() / kAbBlock);
  }
  return {a_s, b_s};
}

// Microseconds per iteration of the side of interleave() that took total_s.
double per_iteration_us(const benchmark::State& state, double total_s) {
  return total_s * 1e6 / (static_cast<double>(state.iterations()) * kAbBlock);
}

// One iteration of an engine: serial (threads 0) or on the multi-core driver.
class Stepper {
 public:
  explicit Stepper(unsigned threads, Schedule schedule = Schedule::kPersistent,
                   bool one_block_solo = true) {
    if (threads > 0) driver_ = std::make_unique<ParallelDriver>(threads, schedule, one_block_solo);
  }
  const ParallelDriver* driver() const { return driver_.get(); }
  template <typename Real>
  void operator()(BasicEngine<Real>& e) {
    if (driver_) {
      driver_->iterate(e);
    } else {
      e.iterate();
    }
  }

 private:
  std::unique_ptr<ParallelDriver> driver_;
};

// Interleaved A/B: each benchmark iteration times kAbBlock naive iterations
// and then kAbBlock engine iterations, so both see the same machine state
// within milliseconds and the speed-up counter survives this VM's drift
// (sequential benchmarks do not: their medians are taken minutes apart).
// Blocks, not single iterations, so each side runs with warm caches as it
// would back to back. Reported time = engine time per iteration.
template <typename Real>
void BM_EngineVsNaive(benchmark::State& state) {
  const Case c = make_case(state);
  auto engine = make_engine<Real>(c.topology, c.specs, c.threads);
  BasicEngine<Real>& e = *engine;
  flowtune::bench::NaiveEngine naive = make_naive(c.topology, c.specs);
  Stepper step(c.threads);
  auto engine_step = [&] { step(e); };
  for (int i = 0; i < kWarmupIterations; ++i) {
    engine_step();
    naive.iterate();
  }
  const auto [naive_s, engine_s] = interleave(state, [&] { naive.iterate(); }, engine_step);
  set_counters(state, c.flows, c.threads == 0 ? 1 : c.threads);
  state.counters["naive_us"] = per_iteration_us(state, naive_s);
  state.counters["speedup_vs_naive"] = naive_s / engine_s;
}

// The multi-core driver against the serial engine (one block, no threads),
// interleaved A/B as above over the same flows: speedup_vs_serial > 1 means
// the threads paid off at this size. Reported time = the driver's
// iteration; solo_share = the share of its iterations the persistent
// driver chose to run on one thread. persistent-same-layout: the persistent
// driver running alone on the team's layout (what it did before it
// re-partitioned), for the comparison in the same run.
template <Schedule kSchedule, bool kOneBlockSolo = true>
void BM_ThreadsVsSerial(benchmark::State& state) {
  const Case c = make_case(state);
  auto serial = make_engine<double>(c.topology, c.specs, 0);
  auto parallel = make_engine<double>(c.topology, c.specs, c.threads);
  Stepper one(0);
  Stepper many(c.threads, kSchedule, kOneBlockSolo);
  for (int i = 0; i < kWarmupIterations; ++i) {
    one(*serial);
    many(*parallel);
  }
  const std::uint64_t solo0 = many.driver()->solo_iterations();
  const std::uint64_t it0 = parallel->iterations();
  const auto [serial_s, parallel_s] =
      interleave(state, [&] { one(*serial); }, [&] { many(*parallel); });
  set_counters(state, c.flows, c.threads);
  state.counters["serial_us"] = per_iteration_us(state, serial_s);
  state.counters["speedup_vs_serial"] = serial_s / parallel_s;
  state.counters["solo_share"] =
      static_cast<double>(many.driver()->solo_iterations() - solo0) /
      static_cast<double>(std::max<std::uint64_t>(1, parallel->iterations() - it0));
}

// Policy cost, interleaved A/B as above: the all-default engine against one
// with the same flows where a third are spread over all eight classes and a
// tenth have floors (tenant guarantees, deadlines). Reported time = the
// policy engine's iteration; policy_cost = its time over the default one's.
void BM_PolicyVsDefault(benchmark::State& state) {
  Case c = make_case(state);
  const Topology& t = c.topology;
  std::vector<FlowSpec>& specs = c.specs;
  const std::uint32_t flows = c.flows;
  const unsigned threads = c.threads;
  auto plain = make_engine<double>(t, specs, threads);
  std::mt19937_64 rng(7);
  for (FlowSpec& f : specs) {
    if (rng() % 3 == 0) f.priority = static_cast<std::uint8_t>(rng() % flowtune::alloc::kNumClasses);
  }
  auto policy = make_engine<double>(t, specs, threads);
  for (flowtune::alloc::FlowId id = 0; id < flows; id += 10) policy->set_floor(id, 1e8);
  Stepper step(threads);
  for (int i = 0; i < kWarmupIterations; ++i) {
    step(*plain);
    step(*policy);
  }
  const auto [plain_s, policy_s] =
      interleave(state, [&] { step(*plain); }, [&] { step(*policy); });
  set_counters(state, flows, threads == 0 ? 1 : threads);
  state.counters["default_us"] = per_iteration_us(state, plain_s);
  state.counters["policy_cost"] = policy_s / plain_s;
}

// A big network carrying few flows (the daemon between bursts, a swarm of
// mostly idle hosts): the price update over the links in use
// (EngineConfig::sparse_links, the default) against a sweep over every
// link, interleaved; the same flows, the same bits. speedup = sweep / used.
void BM_SparseVsDense(benchmark::State& state) {
  Case c = make_case(state);
  auto sweep = make_engine<double>(c.topology, c.specs, 0, false);
  auto used = make_engine<double>(c.topology, c.specs, 0, true);
  Stepper step(0);
  for (int i = 0; i < kWarmupIterations; ++i) {
    step(*sweep);
    step(*used);
  }
  const auto [sweep_s, used_s] = interleave(state, [&] { step(*sweep); }, [&] { step(*used); });
  set_counters(state, c.flows, 1);
  state.counters["links"] = static_cast<double>(used->num_links());
  state.counters["sweep_us"] = per_iteration_us(state, sweep_s);
  state.counters["used_us"] = per_iteration_us(state, used_s);
  state.counters["speedup"] = sweep_s / used_s;
}

// Coflow planning (alloc::CoflowPlanner, run by PolicyBook when a flowlet of
// a coflow comes or goes, --coflow-policy sebf), interleaved with one serial
// engine iteration over the same flows: plan_over_iteration says what a plan
// costs in iterations. Flows form coflows of 1-200 flows in arrival order.
void BM_CoflowPlanVsIteration(benchmark::State& state) {
  auto hosts = static_cast<std::uint32_t>(state.range(0));
  auto flows = static_cast<std::uint32_t>(state.range(1));
  Topology t = make_topology(hosts);
  std::vector<FlowSpec> specs = flowtune::bench::random_host_pairs(t, flows, 42);
  auto engine = make_engine<double>(t, specs, 0);
  std::mt19937_64 rng(11);
  std::vector<flowtune::alloc::CoflowFlow> cf(specs.size());
  std::uint64_t coflow = 1;
  std::uint64_t left_in_coflow = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (left_in_coflow == 0) {
      ++coflow;
      left_in_coflow = 1 + rng() % 200;
    }
    --left_in_coflow;
    cf[i] = {coflow, 1e3 * static_cast<double>(1 + rng() % 100'000), specs[i].path};
  }
  std::vector<double> avail(engine->num_links());
  for (std::size_t l = 0; l < avail.size(); ++l) avail[l] = engine->capacity_bps(static_cast<flowtune::alloc::LinkId>(l));
  flowtune::alloc::CoflowPlanner planner;
  std::vector<double> rates;
  const flowtune::alloc::CoflowConfig config{flowtune::alloc::CoflowPolicy::kSebf, 0.9};
  Stepper step(0);
  for (int i = 0; i < kWarmupIterations; ++i) step(*engine);
  const auto [iteration_s, plan_s] = interleave(
      state, [&] { step(*engine); }, [&] { planner.plan(config, avail, cf, rates); });
  set_counters(state, flows, 1);
  state.counters["iteration_us"] = per_iteration_us(state, iteration_s);
  state.counters["plan_over_iteration"] = plan_s / iteration_s;
}

// What the persistent driver pays to switch layouts (ParallelDriver runs
// alone on one block, the team on 2x2), interleaved with serial iterations
// over the same flows: each timed step is one re-partition, alternately to
// one block and back to the team's four. repartition_over_iteration says
// what a switch costs in iterations.
void BM_RepartitionVsIteration(benchmark::State& state) {
  const Case c = make_case(state);
  auto serial = make_engine<double>(c.topology, c.specs, 0);
  auto moved = make_engine<double>(c.topology, c.specs, 4);
  const std::uint32_t team = moved->config().blocks;
  if (!moved->set_blocks(1)) {
    // More links x classes than one block holds: the driver then runs
    // alone on the team's layout and never switches.
    state.SkipWithError("one block cannot hold this topology's links for every class");
    return;
  }
  moved->set_blocks(team);
  for (int i = 0; i < kWarmupIterations; ++i) {
    serial->iterate();
    moved->iterate();
  }
  bool one = false;
  const auto [iteration_s, switch_s] = interleave(
      state, [&] { serial->iterate(); },
      [&] {
        one = !one;
        moved->set_blocks(one ? 1 : team);
        DriverView(*moved).prepare();  // the link sums' table, rebuilt before the next iteration
      });
  set_counters(state, c.flows, 1);
  state.counters["iteration_us"] = per_iteration_us(state, iteration_s);
  state.counters["repartition_over_iteration"] = switch_s / iteration_s;
}

// The Clos layout (clos_engine.h) against the general engine (serial, one
// block) and the naive baseline over the same flows, interleaved in blocks
// of kAbBlock iterations each (naive, engine, Clos) so the three see the
// same machine state. Reported time and core_cycles_per_flow = the Clos
// engine's iteration; engine_us / naive_us and the speed-ups beside it.
template <typename Real>
void BM_ClosVsEngine(benchmark::State& state) {
  const Case c = make_case(state);
  auto engine = make_engine<Real>(c.topology, c.specs, 0);
  flowtune::alloc::BasicClosEngine<Real> clos(c.topology, EngineConfig{});
  for (const auto& f : c.specs) clos.add_flow(f);
  flowtune::bench::NaiveEngine naive = make_naive(c.topology, c.specs);
  for (int i = 0; i < kWarmupIterations; ++i) {
    naive.iterate();
    engine->iterate();
    clos.iterate();
  }
  double naive_s = 0, engine_s = 0, clos_s = 0;
  using Clock = std::chrono::steady_clock;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kAbBlock; ++i) naive.iterate();
    const auto t1 = Clock::now();
    for (int i = 0; i < kAbBlock; ++i) engine->iterate();
    const auto t2 = Clock::now();
    for (int i = 0; i < kAbBlock; ++i) clos.iterate();
    const auto t3 = Clock::now();
    naive_s += std::chrono::duration<double>(t1 - t0).count();
    engine_s += std::chrono::duration<double>(t2 - t1).count();
    const double dc = std::chrono::duration<double>(t3 - t2).count();
    clos_s += dc;
    state.SetIterationTime(dc / kAbBlock);
  }
  set_counters(state, c.flows, 1);
  state.counters["naive_us"] = per_iteration_us(state, naive_s);
  state.counters["engine_us"] = per_iteration_us(state, engine_s);
  state.counters["speedup_vs_naive"] = naive_s / clos_s;
  state.counters["speedup_vs_engine"] = engine_s / clos_s;
  state.counters["engine_core_cycles_per_flow"] =
      engine_s / (static_cast<double>(state.iterations()) * kAbBlock) * tsc_hz() / c.flows;
}

// F-NORM folded into the next rate pass (BasicClosEngine::set_fold_fnorm)
// against its own pass, each iteration followed by what a driver does with
// the rates, a scan of every one (summed here): the separate engine's
// rates(), the folded one's lagged_rates() (one iteration late, no pass of
// their own). Interleaved in blocks of kAbBlock; reported time and
// core_cycles_per_flow = the folded engine's; separate_us and the speed-up
// beside it.
template <typename Real>
void BM_ClosFoldVsSeparate(benchmark::State& state) {
  const Case c = make_case(state);
  flowtune::alloc::BasicClosEngine<Real> separate(c.topology, EngineConfig{}), folded(c.topology, EngineConfig{});
  separate.set_fold_fnorm(false);
  folded.set_fold_fnorm(true);
  for (const auto& f : c.specs) {
    separate.add_flow(f);
    folded.add_flow(f);
  }
  auto scan = [](auto rates) {
    Real sum = 0;
    for (std::size_t s = 0; s < rates.size; ++s) sum += rates.rates[s];
    benchmark::DoNotOptimize(sum);
  };
  for (int i = 0; i < kWarmupIterations; ++i) {
    separate.iterate();
    folded.iterate();
  }
  const auto [separate_s, folded_s] = interleave(
      state,
      [&] {
        separate.iterate();
        scan(separate.rates());
      },
      [&] {
        folded.iterate();
        scan(folded.lagged_rates());
      });
  set_counters(state, c.flows, 1);
  state.counters["separate_us"] = per_iteration_us(state, separate_s);
  state.counters["speedup_vs_separate"] = separate_s / folded_s;
  state.counters["separate_cycles_per_flow"] =
      separate_s / (static_cast<double>(state.iterations()) * kAbBlock) * tsc_hz() / c.flows;
}

#if defined(FT_FLOOR_AVX512)
// BM_ClosFloor's arrays: the case's flows as the Clos engine lays them out
// (sorted by source half; dst = each flow's destination half, perm and run
// its destination order), with weights, floors, link prices and ratios.
struct FloorData {
  std::size_t n;
  std::vector<std::uint32_t> dst, perm, run;
  std::vector<float> w, floor_price, x, table, sums, ratio, cap, xn;
  std::vector<flowtune::bench::floor::Pair> acc;
};

FloorData make_floor_data(const Case& c) {
  namespace fl = flowtune::bench::floor;
  const Topology& t = c.topology;
  const std::uint32_t H = t.num_hosts(), S = t.num_spines(), ways = S + 1;
  struct Half {
    std::uint32_t src, dst;
  };
  std::vector<Half> halves;
  for (const FlowSpec& f : c.specs) {
    const std::uint32_t a = f.path.links[0], b = f.path.links[f.path.size - 1] - H;
    const std::uint32_t way = f.path.size == 4 ? (f.path.links[1] - 2 * H) % S : S;
    halves.push_back({a * ways + way, way * H + b});
  }
  std::stable_sort(halves.begin(), halves.end(), [](Half x, Half y) { return x.src < y.src; });
  const std::size_t n = halves.size(), tables = std::size_t{ways} * H;
  std::vector<std::uint32_t> dst(n), perm(n), run(n);
  for (std::size_t s = 0; s < n; ++s) dst[s] = halves[s].dst;
  for (std::size_t s = 0; s < n; ++s) perm[s] = static_cast<std::uint32_t>(s);
  std::stable_sort(perm.begin(), perm.end(), [&](std::uint32_t x, std::uint32_t y) { return dst[x] < dst[y]; });
  for (std::size_t s = 0; s < n; ++s) run[s] = dst[perm[s]];
  std::mt19937_64 rng(3);
  std::vector<float> w(n), floor_price(n), x(n), table(tables), sums(tables);
  for (std::size_t s = 0; s < n; ++s) {
    w[s] = 1.0f + static_cast<float>(rng() % 4);
    floor_price[s] = 0.01f;
  }
  for (auto& v : table) v = 0.5f + static_cast<float>(rng() % 100) / 100.0f;
  std::vector<fl::Pair> acc(tables, fl::Pair{0, 0});
  std::vector<float> ratio(tables);
  for (auto& v : ratio) v = 1.0f + static_cast<float>(rng() % 8) / 8.0f;
  std::vector<float> cap(n, 10.0f), xn(n);
  return {n,     std::move(dst),   std::move(perm), std::move(run), std::move(w),
          std::move(floor_price), std::move(x), std::move(table), std::move(sums),
          std::move(ratio), std::move(cap), std::move(xn), std::move(acc)};
}
#endif

// The floor under any layout of the Clos engine (floor_kernels.cc), float,
// over the §5.2 flows laid out as the Clos engine lays them (sorted by
// source half; dst = each flow's destination half): a pass of streams alone,
// one with a gather, one with a gather and an add into the same entry (the
// least a pushing layout does per flow), and a pull in destination order (a
// gather by permutation, summed into runs). Timed in turn with the Clos
// engine's whole iteration over the same flows; TSC cycles per flow each.
void BM_ClosFloor(benchmark::State& state) {
#if !defined(FT_FLOOR_AVX512)
  state.SkipWithError("floor kernels built without AVX-512: the engine's best kernels would differ");
  return;
#else
  if (!__builtin_cpu_supports("avx512f")) {
    state.SkipWithError("this CPU has no AVX-512: the floor would not be the engine's");
    return;
  }
  namespace fl = flowtune::bench::floor;
  const Case c = make_case(state);
  const Topology& t = c.topology;
  FloorData d = make_floor_data(c);
  auto& [n, dst, perm, run, w, floor_price, x, table, sums, ratio, cap, xn, acc] = d;
  flowtune::alloc::BasicClosEngine<float> clos(t, EngineConfig{});
  for (const auto& f : c.specs) clos.add_flow(f);
  for (int i = 0; i < kWarmupIterations; ++i) clos.iterate();
  using Clock = std::chrono::steady_clock;
  double t_stream = 0, t_gather = 0, t_add = 0, t_add1 = 0, t_fused = 0, t_fused1 = 0, t_pull = 0,
         t_clos = 0;
  auto timed = [](double& total, auto&& f) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kAbBlock; ++i) benchmark::DoNotOptimize(f());
    total += std::chrono::duration<double>(Clock::now() - t0).count();
  };
  for (auto _ : state) {
    timed(t_stream, [&] { return fl::stream(n, w.data(), floor_price.data(), x.data()); });
    timed(t_gather, [&] { return fl::gather(n, dst.data(), table.data(), w.data(), floor_price.data(), x.data()); });
    timed(t_add, [&] {
      return fl::gather_add(n, dst.data(), table.data(), w.data(), floor_price.data(), x.data(), acc.data());
    });
    timed(t_fused, [&] {
      return fl::fused(n, dst.data(), table.data(), ratio.data(), w.data(), floor_price.data(), cap.data(), x.data(),
                       xn.data(), acc.data());
    });
    timed(t_add1, [&] {
      return fl::gather_add_scalar(n, dst.data(), table.data(), w.data(), floor_price.data(), x.data(),
                                   acc.data());
    });
    timed(t_fused1, [&] {
      return fl::fused_scalar(n, dst.data(), table.data(), ratio.data(), w.data(), floor_price.data(),
                              cap.data(), x.data(), xn.data(), acc.data());
    });
    timed(t_pull, [&] { return fl::pull(n, perm.data(), run.data(), x.data(), sums.data()); });
    const auto t0 = Clock::now();
    for (int i = 0; i < kAbBlock; ++i) clos.iterate();
    const double dc = std::chrono::duration<double>(Clock::now() - t0).count();
    t_clos += dc;
    state.SetIterationTime(dc / kAbBlock);
  }
  set_counters(state, c.flows, 1);
  const double per = tsc_hz() / (static_cast<double>(state.iterations()) * kAbBlock * static_cast<double>(n));
  state.counters["stream_cycles_per_flow"] = t_stream * per;
  state.counters["gather_cycles_per_flow"] = t_gather * per;
  // Each of the two kernels of each kind, and the faster as the floor.
  state.counters["gather_add_chunked_cycles_per_flow"] = t_add * per;
  state.counters["gather_add_scalar_cycles_per_flow"] = t_add1 * per;
  state.counters["gather_add_cycles_per_flow"] = std::min(t_add, t_add1) * per;
  state.counters["fused_chunked_cycles_per_flow"] = t_fused * per;
  state.counters["fused_scalar_cycles_per_flow"] = t_fused1 * per;
  state.counters["fused_cycles_per_flow"] = std::min(t_fused, t_fused1) * per;
  state.counters["pull_cycles_per_flow"] = t_pull * per;
  state.counters["clos_iteration_cycles_per_flow"] = t_clos * per;
#endif
}

// Churn: each timed step replaces kChurn flows (one leaves, a new random one
// arrives) and runs one iteration, on the general engine and the Clos one
// over the same flows, interleaved; the Clos engine's sorts are in its time.
// churn_ns_per_change = (step - iteration alone) / kChurn, from the
// iteration times measured beside it.
template <bool kClos>
void BM_ChurnStep(benchmark::State& state) {
  constexpr int kChurn = 64;
  const Case c = make_case(state);
  auto engine = make_engine<double>(c.topology, c.specs, 0);
  flowtune::alloc::ClosEngine clos(c.topology, EngineConfig{});
  std::vector<flowtune::alloc::FlowId> ids;
  for (const auto& f : c.specs) {
    ids.push_back(clos.add_flow(f));
  }
  std::vector<FlowSpec> arrivals = flowtune::bench::random_host_pairs(c.topology, 1u << 16, 99);
  std::mt19937_64 rng(5);
  std::size_t next = 0;
  std::vector<flowtune::alloc::FlowId> eids(ids);  // the engine gave the same ids
  auto step = [&] {
    for (int k = 0; k < kChurn; ++k) {
      const std::size_t i = rng() % ids.size();
      const FlowSpec& f = arrivals[next++ % arrivals.size()];
      if constexpr (kClos) {
        clos.remove_flow(ids[i]);
        ids[i] = clos.add_flow(f);
      } else {
        engine->remove_flow(eids[i]);
        eids[i] = engine->add_flow(f);
      }
    }
    if constexpr (kClos) {
      clos.iterate();
    } else {
      engine->iterate();
    }
  };
  for (int i = 0; i < kWarmupIterations; ++i) step();
  const std::uint64_t sorts0 = clos.sorts();
  for (auto _ : state) step();
  set_counters(state, c.flows, 1);
  state.counters["changes_per_step"] = kChurn;
  if constexpr (kClos) {
    state.counters["sorts_per_step"] = static_cast<double>(clos.sorts() - sorts0) /
                                       static_cast<double>(state.iterations());
  }
}

// The paper's §5.2 table: (hosts, flows).
const std::vector<std::pair<std::int64_t, std::int64_t>> kSizes = {
    {384, 3072},    {768, 6144},    {1536, 12288}, {1536, 24576},
    {1536, 49152},  {3072, 49152},  {4608, 49152}};

std::vector<std::int64_t> thread_counts() {
  std::vector<std::int64_t> out{0, 1, 2};
  for (std::int64_t n = 4; n <= std::thread::hardware_concurrency(); n *= 2) out.push_back(n);
  return out;
}

void size_thread_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"hosts", "flows", "threads"});
  for (auto [hosts, flows] : kSizes) {
    for (auto th : thread_counts()) b->Args({hosts, flows, th});
  }
}

void engine_args(benchmark::internal::Benchmark* b) {
  size_thread_args(b);
  b->UseRealTime();
}

void naive_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"hosts", "flows", "threads"});
  for (auto [hosts, flows] : kSizes) b->Args({hosts, flows, 0});
  b->UseRealTime();
}

void ab_args(benchmark::internal::Benchmark* b) {
  size_thread_args(b);
  b->UseManualTime();
  // Manual time counts only the engine's share (about 1/30 of the wall time
  // here), so a short target keeps each run near a second of wall time.
  b->MinTime(0.05);
}

// Driver thread counts 1..N (the serial engine is the A side).
void threads_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"hosts", "flows", "threads"});
  for (auto [hosts, flows] : kSizes) {
    for (auto th : thread_counts()) {
      if (th > 0) b->Args({hosts, flows, th});
    }
  }
  b->UseManualTime();
  b->MinTime(0.05);
}

BENCHMARK(BM_Naive)->Apply(naive_args);
BENCHMARK(BM_EngineVsNaive<float>)->Name("BM_EngineVsNaive/float")->Apply(ab_args);
BENCHMARK(BM_EngineVsNaive<double>)->Name("BM_EngineVsNaive/double")->Apply(ab_args);
BENCHMARK(BM_Engine<float>)->Name("BM_Ned_Iteration/float")->Apply(engine_args);
BENCHMARK(BM_Engine<double>)->Name("BM_Ned_Iteration/double")->Apply(engine_args);
BENCHMARK(BM_PolicyVsDefault)->Apply(ab_args);
BENCHMARK(BM_ThreadsVsSerial<Schedule::kTbb>)->Name("BM_ThreadsVsSerial/tbb")->Apply(threads_args);
BENCHMARK(BM_ThreadsVsSerial<Schedule::kPersistent>)
    ->Name("BM_ThreadsVsSerial/persistent")
    ->Apply(threads_args);
BENCHMARK(BM_ThreadsVsSerial<Schedule::kPersistent, false>)
    ->Name("BM_ThreadsVsSerial/persistent-same-layout")
    ->Apply(threads_args);
BENCHMARK(BM_RepartitionVsIteration)->Apply([](benchmark::internal::Benchmark* b) {
  b->ArgNames({"hosts", "flows", "threads"});
  for (auto [hosts, flows] : kSizes) b->Args({hosts, flows, 0});
  b->UseManualTime();
  b->MinTime(0.05);
});
BENCHMARK(BM_SparseVsDense)->Apply([](benchmark::internal::Benchmark* b) {
  b->ArgNames({"hosts", "flows", "threads"});
  for (std::int64_t flows : {64, 256, 1024, 4096}) b->Args({4608, flows, 0});
  b->Args({1536, 49152, 0});  // every link in use: the sweep either way
  b->UseManualTime();
  b->MinTime(0.05);
});
BENCHMARK(BM_CoflowPlanVsIteration)->Apply([](benchmark::internal::Benchmark* b) {
  b->ArgNames({"hosts", "flows"});
  for (auto [hosts, flows] : kSizes) b->Args({hosts, flows});
  b->UseManualTime();
  b->MinTime(0.05);
});

BENCHMARK(BM_ClosVsEngine<float>)->Name("BM_ClosVsEngine/float")->Apply([](benchmark::internal::Benchmark* b) {
  b->ArgNames({"hosts", "flows", "threads"});
  for (auto [hosts, flows] : kSizes) b->Args({hosts, flows, 0});
  b->UseManualTime();
  b->MinTime(0.05);
});
BENCHMARK(BM_ClosVsEngine<double>)->Name("BM_ClosVsEngine/double")->Apply([](benchmark::internal::Benchmark* b) {
  b->ArgNames({"hosts", "flows", "threads"});
  for (auto [hosts, flows] : kSizes) b->Args({hosts, flows, 0});
  b->UseManualTime();
  b->MinTime(0.05);
});
BENCHMARK(BM_ClosFoldVsSeparate<float>)->Name("BM_ClosFoldVsSeparate/float")->Apply([](benchmark::internal::Benchmark* b) {
  b->ArgNames({"hosts", "flows", "threads"});
  for (auto [hosts, flows] : kSizes) b->Args({hosts, flows, 0});
  b->UseManualTime();
  b->MinTime(0.05);
});
BENCHMARK(BM_ClosFoldVsSeparate<double>)->Name("BM_ClosFoldVsSeparate/double")->Apply([](benchmark::internal::Benchmark* b) {
  b->ArgNames({"hosts", "flows", "threads"});
  for (auto [hosts, flows] : kSizes) b->Args({hosts, flows, 0});
  b->UseManualTime();
  b->MinTime(0.05);
});
BENCHMARK(BM_ClosFloor)->Apply([](benchmark::internal::Benchmark* b) {
  b->ArgNames({"hosts", "flows", "threads"});
  for (auto [hosts, flows] : kSizes) b->Args({hosts, flows, 0});
  b->UseManualTime();
  b->MinTime(0.05);
});
BENCHMARK(BM_ChurnStep<false>)->Name("BM_ChurnStep/engine")->Apply(naive_args);
BENCHMARK(BM_ChurnStep<true>)->Name("BM_ChurnStep/clos")->Apply(naive_args);

}  // namespace

BENCHMARK_MAIN();
