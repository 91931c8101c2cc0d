// Differential test of the multi-core driver (paper §4, TBB and persistent
// schedules) against the serial engine.
// The same random flow churn on a two-tier network is applied to three
// engines: one run by ParallelDriver with B blocks per side, one run by
// BasicEngine::iterate() with the same B, and one serial engine with B = 1.
//   - parallel vs serial, same B: bit-identical (the engine sums each link's
//     block copies in block order whatever the schedule), so EXPECT_EQ on
//     doubles and floats.
//   - parallel vs serial B = 1: the same mathematics summed in a different
//     order, so equal up to rounding. Tolerance: 1e-9 relative on rates and
//     prices (double; rounding differences start near 1e-16 and NED is a
//     contraction, so they stay many orders of magnitude below this), plus
//     1e-15 absolute on prices so a price clamped to 0 in one engine may be a
//     rounding-sized positive number in the other.
#include "flowtune/alloc/parallel.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "flowtune/alloc/engine.h"
#include "flowtune/alloc/topology.h"

namespace flowtune::alloc {
namespace {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : gen_(seed) {}
  double uniform(double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(gen_() >> 11) * 0x1.0p-53;
  }
  std::uint64_t below(std::uint64_t n) { return gen_() % n; }
  std::uint64_t next() { return gen_(); }

 private:
  std::mt19937_64 gen_;
};

Topology two_tier_8x8x4() {
  TwoTierSpec s;
  s.racks = 8;
  s.hosts_per_rack = 8;
  s.spines = 4;
  s.host_link_bps = 10e9;
  return Topology::two_tier(s);
}

FlowSpec random_flow(const Topology& t, Rng& rng) {
  const auto src = static_cast<HostId>(rng.below(t.num_hosts()));
  auto dst = static_cast<HostId>(rng.below(t.num_hosts() - 1));
  if (dst >= src) ++dst;
  FlowSpec f;
  f.path = t.path(src, dst, rng.next());
  f.weight = rng.uniform(0.2, 5);
  f.max_bps = rng.below(5) == 0 ? rng.uniform(0.5e9, 8e9) : 0;
  // A third of the flows in a random strict-priority class (their own layer
  // of prices), the rest in the default one.
  if (rng.below(3) == 0) f.priority = static_cast<std::uint8_t>(rng.below(kNumClasses));
  f.src_site = t.site_of_host(src);
  f.dst_site = t.site_of_host(dst);
  return f;
}

// One engine and the ids it gave to the live flows (same order everywhere).
template <typename Real>
struct Subject {
  std::unique_ptr<BasicEngine<Real>> engine;
  std::vector<FlowId> ids;
};

template <typename Real>
Subject<Real> make(const Topology& t, std::uint32_t blocks,
                   Normalizer normalizer = Normalizer::kFNorm) {
  EngineConfig cfg;
  cfg.blocks = blocks;
  cfg.normalizer = normalizer;
  cfg.tolerance = 1e-12;
  return {std::make_unique<BasicEngine<Real>>(t.capacities_bps(), t.num_sites(), cfg), {}};
}

template <typename Real>
void add(Subject<Real>& s, const FlowSpec& f) {
  ASSERT_EQ(s.engine->check_flow(f), FlowError::kOk);
  s.ids.push_back(s.engine->add_flow(f));
  // A quarter of the flows with a floor (tenant guarantees, deadlines), the
  // same calls in every engine compared.
  if (s.ids.size() % 4 == 1) s.engine->set_floor(s.ids.back(), 2e8 * f.weight);
}

template <typename Real>
void remove_at(Subject<Real>& s, std::size_t k) {
  s.engine->remove_flow(s.ids[k]);
  s.ids[k] = s.ids.back();
  s.ids.pop_back();
}

template <typename Real>
void expect_identical(const Subject<Real>& a, const Subject<Real>& b) {
  ASSERT_EQ(a.ids.size(), b.ids.size());
  for (std::size_t k = 0; k < a.ids.size(); ++k) {
    ASSERT_EQ(a.engine->rate_bps(a.ids[k]), b.engine->rate_bps(b.ids[k])) << "flow " << k;
    ASSERT_EQ(a.engine->raw_rate_bps(a.ids[k]), b.engine->raw_rate_bps(b.ids[k])) << "flow " << k;
  }
  for (LinkId l = 0; l < a.engine->num_links(); ++l) {
    ASSERT_EQ(a.engine->price(l), b.engine->price(l)) << "link " << l;
  }
  EXPECT_EQ(a.engine->link_allocation_bps(), b.engine->link_allocation_bps());
  EXPECT_EQ(a.engine->stats().max_residual, b.engine->stats().max_residual);
  EXPECT_EQ(a.engine->stats().max_raw_utilization, b.engine->stats().max_raw_utilization);
  EXPECT_EQ(a.engine->stats().converged, b.engine->stats().converged);
  EXPECT_EQ(a.engine->iterations(), b.engine->iterations());
}

void expect_close(const Subject<double>& a, const Subject<double>& ref, double rel) {
  ASSERT_EQ(a.ids.size(), ref.ids.size());
  for (std::size_t k = 0; k < a.ids.size(); ++k) {
    const double want = ref.engine->rate_bps(ref.ids[k]);
    ASSERT_NEAR(a.engine->rate_bps(a.ids[k]), want, rel * want) << "flow " << k;
    const double raw = ref.engine->raw_rate_bps(ref.ids[k]);
    ASSERT_NEAR(a.engine->raw_rate_bps(a.ids[k]), raw, rel * raw) << "flow " << k;
  }
  for (LinkId l = 0; l < a.engine->num_links(); ++l) {
    const double want = ref.engine->price(l);
    ASSERT_NEAR(a.engine->price(l), want, rel * want + 1e-15) << "link " << l;
  }
}

// Runs `iterations` rounds of churn (about 5% of flows leave and as many
// arrive) followed by one iteration, on every subject alike.
template <typename Real, typename Check>
void churn(const Topology& t, std::uint64_t seed, int initial_flows, int iterations,
           ParallelDriver& driver, Subject<Real>& par, Subject<Real>& ser,
           std::vector<Subject<Real>*> others, Check check) {
  Rng rng(seed);
  std::vector<Subject<Real>*> all = {&par, &ser};
  all.insert(all.end(), others.begin(), others.end());
  for (int i = 0; i < initial_flows; ++i) {
    FlowSpec f = random_flow(t, rng);
    for (auto* s : all) add(*s, f);
  }
  for (int it = 0; it < iterations; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    if (it > 0) {
      const auto leave = rng.below(par.ids.size() / 10 + 1);
      for (std::uint64_t j = 0; j < leave && !par.ids.empty(); ++j) {
        const std::size_t k = rng.below(par.ids.size());
        for (auto* s : all) remove_at(*s, k);
      }
      const auto arrive = rng.below(initial_flows / 10 + 1);
      for (std::uint64_t j = 0; j < arrive; ++j) {
        FlowSpec f = random_flow(t, rng);
        for (auto* s : all) add(*s, f);
      }
    }
    driver.iterate(*par.engine);
    ser.engine->iterate();
    for (auto* s : others) s->engine->iterate();
    check();
    if (::testing::Test::HasFatalFailure()) return;
  }
}

class ParallelDriverSchedule : public ::testing::TestWithParam<Schedule> {};

TEST_P(ParallelDriverSchedule, MatchesSerialEngineBitForBitAndSingleBlockToRounding) {
  const Topology t = two_tier_8x8x4();
  for (std::uint32_t blocks = 1; blocks <= 4; ++blocks) {
    for (unsigned threads = 1; threads <= 4; ++threads) {
      SCOPED_TRACE("blocks " + std::to_string(blocks) + " threads " + std::to_string(threads));
      // The engine's own layout both ways, so bit for bit.
      ParallelDriver driver(threads, GetParam(), /*one_block_solo=*/false);
      ASSERT_EQ(driver.threads(), threads);
      ASSERT_EQ(driver.schedule(), GetParam());
      // Alternate normalizers: U-NORM depends on the global max ratio that
      // finish_links() publishes, F-NORM on per-link ratios.
      const Normalizer norm = (blocks + threads) % 2 ? Normalizer::kUNorm : Normalizer::kFNorm;
      Subject<double> par = make<double>(t, blocks, norm);
      Subject<double> ser = make<double>(t, blocks, norm);
      Subject<double> one = make<double>(t, 1, norm);
      ASSERT_EQ(par.engine->num_blocks(), std::size_t{blocks} * blocks);
      churn<double>(t, 1000 + blocks * 10 + threads, 400, 25, driver, par, ser, {&one}, [&] {
        expect_identical(par, ser);
        expect_close(par, one, 1e-9);
      });
      // The persistent driver ran iterations both ways (it times both at the
      // start), and both matched the serial engine above.
      if (GetParam() == Schedule::kPersistent && threads > 1) {
        EXPECT_GT(driver.solo_iterations(), 0u);
        EXPECT_LT(driver.solo_iterations(), par.engine->iterations());
      }
      if (GetParam() == Schedule::kTeam && threads > 1) {
        EXPECT_EQ(driver.solo_iterations(), 0u);
      }
      // The flows really were spread over the blocks.
      std::size_t nonempty = 0;
      for (std::size_t b = 0; b < par.engine->num_blocks(); ++b) {
        nonempty += par.engine->block_size(b) > 0;
      }
      EXPECT_EQ(nonempty, par.engine->num_blocks());
    }
  }
}

TEST_P(ParallelDriverSchedule, FloatEngineMatchesSerialBitForBit) {
  const Topology t = two_tier_8x8x4();
  for (std::uint32_t blocks : {2u, 3u}) {
    SCOPED_TRACE("blocks " + std::to_string(blocks));
    ParallelDriver driver(4, GetParam(), /*one_block_solo=*/false);
    Subject<float> par = make<float>(t, blocks);
    Subject<float> ser = make<float>(t, blocks);
    churn<float>(t, 77 + blocks, 400, 20, driver, par, ser, {},
                 [&] { expect_identical(par, ser); });
  }
}

TEST_P(ParallelDriverSchedule, SolveStopsAtTheSameIterationAsSerialSolve) {
  const Topology t = two_tier_8x8x4();
  Rng rng(99);
  EngineConfig cfg;
  cfg.blocks = 3;
  cfg.tolerance = 1e-8;
  Engine par(t.capacities_bps(), t.num_sites(), cfg);
  Engine ser(t.capacities_bps(), t.num_sites(), cfg);
  std::vector<FlowId> ids;
  for (int i = 0; i < 300; ++i) {
    FlowSpec f = random_flow(t, rng);
    ids.push_back(par.add_flow(f));
    ASSERT_EQ(ser.add_flow(f), ids.back());
  }
  ParallelDriver driver(3, GetParam(), /*one_block_solo=*/false);
  const std::uint64_t n = driver.solve(par, 100000);
  EXPECT_EQ(ser.solve(100000), n);
  EXPECT_TRUE(par.stats().converged);
  EXPECT_LE(par.stats().max_residual, 1e-8);
  EXPECT_EQ(par.iterations(), n);
  for (FlowId id : ids) EXPECT_EQ(par.rate_bps(id), ser.rate_bps(id));
  // A budget smaller than needed is honoured.
  Engine fresh(t.capacities_bps(), t.num_sites(), cfg);
  for (int i = 0; i < 50; ++i) fresh.add_flow(random_flow(t, rng));
  EXPECT_EQ(driver.solve(fresh, 3), 3u);
  EXPECT_EQ(fresh.iterations(), 3u);
}

// Alone, the persistent driver runs the engine re-partitioned into one
// block (the team's layout costs one thread its private link copies) and
// puts the layout back for the team: rates follow the single-block serial
// engine to rounding whichever way each iteration ran.
TEST(ParallelDriver, PersistentRunsAloneOnOneBlockAndTheTeamOnItsLayout) {
  const Topology t = two_tier_8x8x4();
  for (std::uint32_t blocks : {2u, 3u}) {
    SCOPED_TRACE("blocks " + std::to_string(blocks));
    ParallelDriver driver(2, Schedule::kPersistent);
    Subject<double> par = make<double>(t, blocks);
    Subject<double> one = make<double>(t, 1);
    Subject<double> one_more = make<double>(t, 1);
    bool saw_one = false, saw_team_layout = false;
    churn<double>(t, 500 + blocks, 400, 60, driver, par, one, {&one_more}, [&] {
      const std::uint32_t now = par.engine->blocks_per_side();
      ASSERT_TRUE(now == 1 || now == blocks) << now;
      saw_one |= now == 1;
      saw_team_layout |= now == blocks;
      expect_close(par, one, 1e-9);
    });
    // The first trial alternates both ways, so both layouts ran.
    EXPECT_TRUE(saw_one);
    EXPECT_TRUE(saw_team_layout);
    EXPECT_GT(driver.solo_iterations(), 0u);
    EXPECT_EQ(par.engine->config().blocks, blocks);
  }
}

// compact() after a burst: the ids freed at the top come back (id_bound()
// falls to one past the highest live id), live flows keep their ids and
// rates, and the engine goes on computing bit for bit what one never
// compacted computes, through later churn (new flows take the lowest free
// ids, so the bound stays low).
TEST(EngineCompact, AfterABurstIdsShrinkAndTheEngineComputesTheSame) {
  const Topology t = two_tier_8x8x4();
  Rng rng(77);
  Subject<double> compacted = make<double>(t, 3);
  Subject<double> plain = make<double>(t, 3);
  std::vector<Subject<double>*> all = {&compacted, &plain};
  for (int j = 0; j < 3000; ++j) {
    const FlowSpec f = random_flow(t, rng);
    for (auto* s : all) add(*s, f);
  }
  for (auto* s : all) s->engine->iterate();
  // The burst ends: all but a few scattered flows go, the highest id among them.
  constexpr FlowId kKeptBelow = 40;
  for (std::size_t k = compacted.ids.size(); k-- > 0;) {
    const FlowId id = compacted.ids[k];
    if (id < kKeptBelow && id % 3 == 0) continue;
    for (auto* s : all) remove_at(*s, k);
  }
  for (auto* s : all) s->engine->iterate();
  ASSERT_EQ(compacted.engine->id_bound(), 3000u);
  std::vector<double> before;
  for (FlowId id : compacted.ids) before.push_back(compacted.engine->rate_bps(id));
  compacted.engine->compact();
  FlowId highest = 0;
  for (FlowId id : compacted.ids) highest = std::max(highest, id);
  EXPECT_EQ(compacted.engine->id_bound(), highest + 1);
  EXPECT_LE(compacted.engine->id_bound(), kKeptBelow);
  for (std::size_t k = 0; k < compacted.ids.size(); ++k) {
    ASSERT_TRUE(compacted.engine->has_flow(compacted.ids[k]));
    EXPECT_EQ(compacted.engine->rate_bps(compacted.ids[k]), before[k]);
  }
  for (int i = 0; i < 12; ++i) {
    for (int j = 0; j < 4 && !compacted.ids.empty(); ++j) {
      const std::size_t k = rng.below(compacted.ids.size());
      for (auto* s : all) remove_at(*s, k);
    }
    for (int j = 0; j < 6; ++j) {
      const FlowSpec f = random_flow(t, rng);
      for (auto* s : all) add(*s, f);
    }
    for (auto* s : all) s->engine->iterate();
    expect_identical(compacted, plain);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_LE(compacted.engine->id_bound(), compacted.ids.size() + kKeptBelow);
}

// set_blocks keeps every flow's id, limits, floor and rates and every
// price, and a round trip back to the original count restores the layout
// exactly: the next iterations are bit-identical to an engine that never
// moved. In between, one block follows a single-block engine to rounding.
TEST(EngineSetBlocks, RepartitionKeepsStateAndRoundTripsBitForBit) {
  const Topology t = two_tier_8x8x4();
  Rng rng(4242);
  Subject<double> moved = make<double>(t, 3);
  Subject<double> stayed = make<double>(t, 3);
  Subject<double> one = make<double>(t, 1);
  std::vector<Subject<double>*> all = {&moved, &stayed, &one};
  auto step = [&](int arrivals, int departures) {
    for (int j = 0; j < departures && !moved.ids.empty(); ++j) {
      const std::size_t k = rng.below(moved.ids.size());
      for (auto* s : all) remove_at(*s, k);
    }
    for (int j = 0; j < arrivals; ++j) {
      FlowSpec f = random_flow(t, rng);
      for (auto* s : all) add(*s, f);
    }
    for (auto* s : all) s->engine->iterate();
  };
  step(300, 0);
  for (int i = 0; i < 20; ++i) step(10, 10);

  std::vector<double> rates, raw, floors;
  for (FlowId id : moved.ids) {
    rates.push_back(moved.engine->rate_bps(id));
    raw.push_back(moved.engine->raw_rate_bps(id));
    floors.push_back(moved.engine->floor_bps(id));
  }
  ASSERT_TRUE(moved.engine->set_blocks(1));
  EXPECT_EQ(moved.engine->num_blocks(), 1u);
  EXPECT_EQ(moved.engine->blocks_per_side(), 1u);
  EXPECT_EQ(moved.engine->config().blocks, 3u);
  EXPECT_EQ(moved.engine->block_size(0), moved.ids.size());
  for (std::size_t k = 0; k < moved.ids.size(); ++k) {
    ASSERT_TRUE(moved.engine->has_flow(moved.ids[k]));
    EXPECT_EQ(moved.engine->rate_bps(moved.ids[k]), rates[k]);
    EXPECT_EQ(moved.engine->raw_rate_bps(moved.ids[k]), raw[k]);
    EXPECT_EQ(moved.engine->floor_bps(moved.ids[k]), floors[k]);
  }
  for (LinkId l = 0; l < t.num_links(); ++l) {
    EXPECT_EQ(moved.engine->price(l), stayed.engine->price(l));
    EXPECT_EQ(moved.engine->reserved_bps(l), stayed.engine->reserved_bps(l));
  }
  // Straight back: every block holds its flows in their old order again.
  ASSERT_TRUE(moved.engine->set_blocks(3));
  ASSERT_TRUE(moved.engine->set_blocks(3));  // no-op
  EXPECT_EQ(moved.engine->num_blocks(), 9u);
  for (int i = 0; i < 8; ++i) {
    step(5, 5);
    expect_identical(moved, stayed);
    if (::testing::Test::HasFatalFailure()) return;
  }

  // Churn on one block: arrivals land in it, departures leave it.
  ASSERT_TRUE(moved.engine->set_blocks(1));
  for (int i = 0; i < 15; ++i) {
    step(12, 8);
    EXPECT_EQ(moved.engine->num_blocks(), 1u);
    expect_close(moved, stayed, 1e-9);
    expect_close(moved, one, 1e-9);
    if (::testing::Test::HasFatalFailure()) return;
  }
  // And out to 2 per side, which this engine was never built with.
  ASSERT_TRUE(moved.engine->set_blocks(2));
  EXPECT_EQ(moved.engine->num_blocks(), 4u);
  std::size_t placed = 0;
  for (std::size_t b = 0; b < 4; ++b) placed += moved.engine->block_size(b);
  EXPECT_EQ(placed, moved.ids.size());
  for (int i = 0; i < 10; ++i) {
    step(6, 6);
    expect_close(moved, stayed, 1e-9);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(EngineSetBlocks, RefusesWhatOneBlockCannotHoldAndBadCounts) {
  EngineConfig cfg;
  cfg.blocks = 2;
  // 9,000 links times 8 classes: more virtual links than a block holds.
  Engine big(std::vector<double>(9000, 1e9), 4, cfg);
  EXPECT_FALSE(big.set_blocks(1));
  EXPECT_EQ(big.blocks_per_side(), 2u);
  EXPECT_EQ(big.num_blocks(), 4u);
  EXPECT_TRUE(big.set_blocks(4));
  EXPECT_EQ(big.num_blocks(), 16u);
  EXPECT_THROW(big.set_blocks(0), std::invalid_argument);
  EXPECT_THROW(big.set_blocks(65), std::invalid_argument);
}

// The persistent team's helpers sleep once idle longer than their spin
// budget: iterations spaced past it must still run every step on every
// thread (a lost wake-up would hang here), and many drivers come and go.
TEST(ParallelDriver, PersistentTeamWakesFromSleepAndShutsDown) {
  const Topology t = two_tier_8x8x4();
  for (unsigned threads : {2u, 3u}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    ParallelDriver driver(threads, Schedule::kTeam);
    Subject<double> par = make<double>(t, 2);
    Subject<double> ser = make<double>(t, 2);
    Rng rng(5 + threads);
    for (int i = 0; i < 200; ++i) {
      FlowSpec f = random_flow(t, rng);
      add(par, f);
      add(ser, f);
    }
    for (int it = 0; it < 6; ++it) {
      std::this_thread::sleep_for(std::chrono::milliseconds(it % 2 ? 5 : 0));
      driver.iterate(*par.engine);
      ser.engine->iterate();
      expect_identical(par, ser);
    }
  }
  for (int i = 0; i < 50; ++i) ParallelDriver(2, i % 2 ? Schedule::kPersistent : Schedule::kTeam);
}

INSTANTIATE_TEST_SUITE_P(Schedules, ParallelDriverSchedule,
                         ::testing::Values(Schedule::kTbb, Schedule::kPersistent,
                                           Schedule::kTeam),
                         [](const auto& p) { return std::string(to_string(p.param)); });

TEST(ParallelDriver, BlocksForThreadsGivesEveryThreadABlock) {
  // B blocks per side make B*B FlowBlocks: the smallest B with B*B >= threads.
  const unsigned threads[] = {1, 2, 3, 4, 5, 9, 10, 16, 17, 64};
  const std::uint32_t want[] = {1, 2, 2, 2, 3, 3, 4, 4, 5, 8};
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(ParallelDriver::blocks_for_threads(threads[i]), want[i]) << threads[i] << " threads";
  }
  EXPECT_EQ(ParallelDriver::blocks_for_threads(0), 1u);
  EXPECT_GE(ParallelDriver(0).threads(), 1u);
}

}  // namespace
}  // namespace flowtune::alloc
