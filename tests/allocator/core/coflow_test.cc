// CoflowPlanner: the order (STF by bytes, SEBF by bottleneck time), MADD's
// rates, the starvation guard, and work conservation (every flow crosses a
// full link once the backfill has run).
#include "flowtune/alloc/coflow.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace flowtune::alloc {
namespace {

constexpr double kMB = 1e6;

CoflowFlow flow(std::uint64_t coflow, double bytes, std::initializer_list<LinkId> links) {
  CoflowFlow f;
  f.coflow = coflow;
  f.remaining_bytes = bytes;
  for (LinkId l : links) f.path.push(l);
  return f;
}

CoflowConfig config(CoflowPolicy p, double share = 1.0) {
  CoflowConfig c;
  c.policy = p;
  c.ordered_share = share;
  return c;
}

TEST(CoflowPlanner, StfServesTheSmallerCoflowFirstAndFairSharingCannot) {
  // One 8 Mbit/s link (1 MB/s), coflows of 1 MB and 2 MB: fair sharing ends
  // them at 2 s and 3 s (mean 2.5 s), smallest first at 1 s and 3 s (2 s).
  const std::vector<double> cap{8e6};
  const std::vector<CoflowFlow> flows{flow(7, 2 * kMB, {0}), flow(9, 1 * kMB, {0})};
  CoflowPlanner p;
  std::vector<double> r;
  p.plan(config(CoflowPolicy::kStf), cap, flows, r);
  EXPECT_DOUBLE_EQ(r[1], 8e6);
  EXPECT_DOUBLE_EQ(r[0], 0);
  EXPECT_EQ(p.order(), (std::vector<std::uint64_t>{9, 7}));
  // kNone orders nothing; the backfill alone is per-flow fair sharing.
  p.plan(config(CoflowPolicy::kNone), cap, flows, r);
  EXPECT_EQ(r, (std::vector<double>{0, 0}));
  p.backfill(cap, flows, r);
  EXPECT_DOUBLE_EQ(r[0], 4e6);
  EXPECT_DOUBLE_EQ(r[1], 4e6);
}

TEST(CoflowPlanner, SebfOrdersByBottleneckTimeNotBytes) {
  // Three 8 Mbit/s links. X: 1 MB on each (3 MB, 1 s alone); Y: 2 MB on
  // link 0 (2 MB, 2 s alone). STF serves Y first, SEBF X.
  const std::vector<double> cap{8e6, 8e6, 8e6};
  const std::vector<CoflowFlow> flows{flow(1, kMB, {0}), flow(1, kMB, {1}), flow(1, kMB, {2}),
                                      flow(2, 2 * kMB, {0})};
  CoflowPlanner p;
  std::vector<double> r;
  p.plan(config(CoflowPolicy::kStf), cap, flows, r);
  EXPECT_EQ(p.order(), (std::vector<std::uint64_t>{2, 1}));
  EXPECT_DOUBLE_EQ(r[3], 8e6);
  EXPECT_DOUBLE_EQ(r[0], 0);
  EXPECT_DOUBLE_EQ(r[1], 8e6);
  p.plan(config(CoflowPolicy::kSebf), cap, flows, r);
  EXPECT_EQ(p.order(), (std::vector<std::uint64_t>{1, 2}));
  for (int i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(r[i], 8e6);
  EXPECT_DOUBLE_EQ(r[3], 0);
  // Mean CCT on this instance: SEBF 1 s and 3 s (2 s); STF 2 s and 3 s
  // (X's flow on link 0 waits for Y): 2.5 s.
}

TEST(CoflowPlanner, MaddFinishesACoflowsFlowsTogetherAndPassesOnWhatItCannotUse) {
  // A: 1 MB on link 0 and 3 MB on link 1 (Γ = 3 s): 1/3 and 1 MB/s, so both
  // end at 3 s; link 0's other 2/3 goes to B, next in order.
  const std::vector<double> cap{8e6, 8e6};
  const std::vector<CoflowFlow> flows{flow(1, kMB, {0}), flow(1, 3 * kMB, {1}),
                                      flow(2, 10 * kMB, {0})};
  CoflowPlanner p;
  std::vector<double> r;
  p.plan(config(CoflowPolicy::kSebf), cap, flows, r);
  EXPECT_NEAR(r[0], 8e6 / 3, 1e-6);
  EXPECT_NEAR(r[1], 8e6, 1e-6);
  EXPECT_NEAR(r[2], 8e6 * 2 / 3, 1e-6);
  EXPECT_NEAR(kMB * 8 / r[0], 3 * kMB * 8 / r[1], 1e-9);
}

TEST(CoflowPlanner, TheGuardKeepsAShareForEveryFlowSoNoCoflowStarves) {
  const std::vector<double> cap{10e6};
  const std::vector<CoflowFlow> flows{flow(1, kMB, {0}), flow(2, 100 * kMB, {0})};
  CoflowPlanner p;
  std::vector<double> r;
  p.plan(config(CoflowPolicy::kStf, 0.9), cap, flows, r);
  EXPECT_DOUBLE_EQ(r[0], 9e6);
  EXPECT_DOUBLE_EQ(r[1], 0);
  p.backfill(cap, flows, r);
  EXPECT_NEAR(r[0], 9.5e6, 1e-6);
  EXPECT_NEAR(r[1], 0.5e6, 1e-6);
}

TEST(CoflowPlanner, UnknownSizesGoLastWithTheBackfillOnly) {
  const std::vector<double> cap{10e6};
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<CoflowFlow> flows{flow(1, inf, {0}), flow(2, 1e12, {0})};
  for (auto pol : {CoflowPolicy::kStf, CoflowPolicy::kSebf}) {
    CoflowPlanner p;
    std::vector<double> r;
    p.plan(config(pol), cap, flows, r);
    EXPECT_EQ(p.order(), (std::vector<std::uint64_t>{2})) << to_string(pol);
    EXPECT_DOUBLE_EQ(r[0], 0);
    EXPECT_DOUBLE_EQ(r[1], 10e6);
  }
}

TEST(CoflowPlanner, AFlowOfUnknownSizeDoesNotHoldItsCoflowBack) {
  // Coflow 1: a sized 1 MB flow on link 0 and an unsized one on link 1;
  // coflow 2: 5 MB on link 0. Coflow 1 still goes first, its sized flow
  // ordered, the unsized one left to the shared part.
  const std::vector<double> cap{8e6, 8e6};
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<CoflowFlow> flows{flow(1, kMB, {0}), flow(1, inf, {1}), flow(2, 5 * kMB, {0})};
  for (auto pol : {CoflowPolicy::kStf, CoflowPolicy::kSebf}) {
    CoflowPlanner p;
    std::vector<double> r;
    p.plan(config(pol), cap, flows, r);
    EXPECT_EQ(p.order(), (std::vector<std::uint64_t>{1, 2})) << to_string(pol);
    EXPECT_DOUBLE_EQ(r[0], 8e6) << to_string(pol);
    EXPECT_DOUBLE_EQ(r[1], 0) << to_string(pol);
    EXPECT_DOUBLE_EQ(r[2], 0) << to_string(pol);
  }
}

TEST(CoflowPlanner, CapsBoundTheOrderAndTheBackfillAndTheRestPassesOn) {
  // Coflow 1's flow may take at most 2 Mbit/s of the 8: SEBF paces it at its
  // cap (Γ = 4 s) and coflow 2 gets the other 6; the backfill leaves it capped.
  const std::vector<double> cap{8e6};
  std::vector<CoflowFlow> flows{flow(1, kMB, {0}), flow(2, 10 * kMB, {0})};
  flows[0].max_bps = 2e6;
  for (auto pol : {CoflowPolicy::kStf, CoflowPolicy::kSebf}) {
    CoflowPlanner p;
    std::vector<double> r;
    p.plan(config(pol), cap, flows, r);
    EXPECT_NEAR(r[0], 2e6, 1e-6) << to_string(pol);
    EXPECT_NEAR(r[1], 6e6, 1e-6) << to_string(pol);
    p.backfill(cap, flows, r);
    EXPECT_NEAR(r[0], 2e6, 1e-6) << to_string(pol);
  }
}

TEST(CoflowPlanner, BackfillIsMaxMinFair) {
  // f0 crosses both links; link 1 is the small one.
  const std::vector<double> cap{10e6, 4e6};
  const std::vector<CoflowFlow> flows{flow(1, kMB, {0, 1}), flow(2, kMB, {0}), flow(3, kMB, {1})};
  CoflowPlanner p;
  std::vector<double> r(3, 0.0);
  p.backfill(cap, flows, r);
  EXPECT_NEAR(r[0], 2e6, 1e-6);
  EXPECT_NEAR(r[2], 2e6, 1e-6);
  EXPECT_NEAR(r[1], 8e6, 1e-6);
}

TEST(CoflowPlanner, RandomInstancesNeverOverfillALinkAndLeaveNoFlowUnderserved) {
  std::mt19937 rng(5);
  const auto draw = [&](std::uint32_t n) { return static_cast<std::uint32_t>(rng() % n); };
  for (int trial = 0; trial < 200; ++trial) {
    const std::uint32_t nl = 2 + draw(12);
    std::vector<double> cap(nl);
    for (double& c : cap) c = 1e6 * (1 + draw(100));
    std::vector<CoflowFlow> flows;
    const int nf = 1 + static_cast<int>(draw(40));
    for (int i = 0; i < nf; ++i) {
      CoflowFlow f;
      f.coflow = draw(6);
      f.remaining_bytes = draw(10) == 0 ? std::numeric_limits<double>::infinity()
                                        : 1e3 * (1 + draw(10000));
      if (draw(4) == 0) f.max_bps = 1e5 * (1 + draw(300));
      const LinkId a = draw(nl), b = draw(nl);
      f.path.push(a);
      if (b != a) f.path.push(b);
      flows.push_back(f);
    }
    for (auto pol : {CoflowPolicy::kNone, CoflowPolicy::kStf, CoflowPolicy::kSebf,
                     CoflowPolicy::kBssi}) {
      CoflowPlanner p;
      std::vector<double> r;
      const double share = trial % 2 ? 1.0 : 0.8;
      p.plan(config(pol, share), cap, flows, r);
      // Both ways of filling give the same rates.
      for (auto way : {CoflowPlanner::Fill::kScan, CoflowPlanner::Fill::kHeap}) {
        CoflowPlanner q;
        q.set_fill(way);
        std::vector<double> s;
        q.plan(config(pol, share), cap, flows, s);
        std::vector<double> rb = r, sb = s;
        p.backfill(cap, flows, rb);
        q.backfill(cap, flows, sb);
        for (int i = 0; i < nf; ++i) {
          ASSERT_NEAR(s[i], r[i], 1e-6 * (1 + r[i])) << "trial " << trial << " flow " << i;
          ASSERT_NEAR(sb[i], rb[i], 1e-6 * (1 + rb[i])) << "trial " << trial << " flow " << i;
        }
      }
      std::vector<double> used(nl, 0.0);
      for (int i = 0; i < nf; ++i) {
        for (LinkId l : flows[i].path) used[l] += r[i];
      }
      for (std::uint32_t l = 0; l < nl; ++l) ASSERT_LE(used[l], cap[l] * share * (1 + 1e-9));
      p.backfill(cap, flows, r);
      used.assign(nl, 0.0);
      for (int i = 0; i < nf; ++i) {
        ASSERT_GE(r[i], 0);
        for (LinkId l : flows[i].path) used[l] += r[i];
      }
      for (std::uint32_t l = 0; l < nl; ++l) ASSERT_LE(used[l], cap[l] * (1 + 1e-9));
      // Work-conserving: every flow is at its cap or crosses a link that is full.
      for (int i = 0; i < nf; ++i) {
        ASSERT_LE(r[i], flows[i].max_bps * (1 + 1e-9));
        bool full = r[i] >= flows[i].max_bps * (1 - 1e-6);
        for (LinkId l : flows[i].path) full = full || used[l] >= cap[l] * (1 - 1e-6);
        ASSERT_TRUE(full) << "trial " << trial << " policy " << to_string(pol) << " flow " << i;
      }
    }
  }
}

// BSSI builds the order from the back. One link: the largest coflow goes
// last, weights shrink, and the result is smallest first. Two links (8
// Mbit/s, 1 MB/s): X has 1 MB on each, Y 1.5 MB on link 0, Z 1.4 MB on
// link 1. Link 0 is the busiest (2.5 s): Y has the most work there per
// weight (1.5 > 1) and goes last; X's weight shrinks to 1 - 1/1.5 = 1/3.
// Then link 1 (2.4 s): X has 1 s / (1/3) = 3 against Z's 1.4, so X goes
// last of the two: Z, X, Y. (SEBF serves X first: its bottleneck is 1 s.)
TEST(CoflowPlanner, BssiPlacesTheHeaviestLastOnTheBusiestLinkAndScalesWeights) {
  CoflowPlanner p;
  std::vector<double> r;
  const std::vector<double> one{8e6};
  p.plan(config(CoflowPolicy::kBssi), one,
         std::vector<CoflowFlow>{flow(1, 3 * kMB, {0}), flow(2, 1 * kMB, {0}), flow(3, 2 * kMB, {0})},
         r);
  EXPECT_EQ(p.order(), (std::vector<std::uint64_t>{2, 3, 1}));
  EXPECT_DOUBLE_EQ(r[1], 8e6);  // the first coflow's flows fill what they can
  const std::vector<double> two{8e6, 8e6};
  const std::vector<CoflowFlow> flows{flow(10, kMB, {0}), flow(10, kMB, {1}),
                                      flow(20, 1.5 * kMB, {0}), flow(30, 1.4 * kMB, {1})};
  p.plan(config(CoflowPolicy::kBssi), two, flows, r);
  EXPECT_EQ(p.order(), (std::vector<std::uint64_t>{30, 10, 20}));
  // Z fills link 1; X's flow on link 0 takes it (Y is after X); nothing is left.
  EXPECT_DOUBLE_EQ(r[3], 8e6);
  EXPECT_DOUBLE_EQ(r[0], 8e6);
  EXPECT_DOUBLE_EQ(r[1], 0);
  EXPECT_DOUBLE_EQ(r[2], 0);
  p.plan(config(CoflowPolicy::kSebf), two, flows, r);
  EXPECT_EQ(p.order().front(), 10u);
}

// A link with nothing left to give (guarantees filled it) still ranks its
// coflows, and once they are placed it no longer counts as the busiest:
// the coflows elsewhere are ordered by their own work, smallest first.
// The order does not depend on the order of the flows.
TEST(CoflowPlanner, BssiIgnoresADeadLinkOnceItsCoflowsArePlacedAndFlowOrder) {
  const std::vector<double> cap{0, 8e6};
  std::vector<CoflowFlow> flows{flow(1, 500 * kMB, {0}), flow(2, 900 * kMB, {0})};
  for (std::uint64_t id = 10; id < 15; ++id) flows.push_back(flow(id, static_cast<double>(25 - id) * kMB, {1}));
  CoflowPlanner p;
  std::vector<double> r;
  p.plan(config(CoflowPolicy::kBssi), cap, flows, r);
  EXPECT_EQ(p.order(), (std::vector<std::uint64_t>{14, 13, 12, 11, 10, 1, 2}));
  // X spans links 0 and 1 with equal work, Y and Z one each: a tie between
  // the links, broken by link, not by which of X's flows comes first.
  const std::vector<double> two{8e6, 8e6};
  std::vector<CoflowFlow> tie{flow(1, kMB, {0}), flow(1, kMB, {1}), flow(2, kMB, {0}),
                              flow(3, kMB, {1})};
  p.plan(config(CoflowPolicy::kBssi), two, tie, r);
  const auto order = p.order();
  std::swap(tie[0], tie[1]);
  p.plan(config(CoflowPolicy::kBssi), two, tie, r);
  EXPECT_EQ(p.order(), order);
}

// Past kMaxBssiCoflows sized coflows a plan orders by SEBF's key: the same
// order sebf gives.
TEST(CoflowPlanner, BssiPastItsLimitOrdersAsSebf) {
  const std::vector<double> cap{8e6, 8e6};
  std::vector<CoflowFlow> flows;
  for (std::uint64_t id = 1; id <= kMaxBssiCoflows + 1; ++id) {
    flows.push_back(flow(id, static_cast<double>((id * 7919) % 1000 + 1) * 1e3, {id % 2 == 0 ? 0u : 1u}));
  }
  CoflowPlanner p, q;
  std::vector<double> r, s2;
  p.plan(config(CoflowPolicy::kBssi), cap, flows, r);
  q.plan(config(CoflowPolicy::kSebf), cap, flows, s2);
  EXPECT_EQ(p.order(), q.order());
}

// Aging: a coflow that has waited long enough goes before a newcomer with a
// smaller key, under every policy, and only once it has waited that long.
TEST(CoflowPlanner, AgingPutsACoflowThatHasWaitedBeforeASmallerNewcomer) {
  // One 8 Mbit/s link: A is 10 MB (10 s alone) and has waited 100 s; B is
  // 1 MB (1 s) and new. With aging 10 s A's weight is 11: its key 10/11
  // is under B's 1, under STF (bytes), SEBF (seconds) and BSSI (weights).
  const std::vector<double> cap{8e6};
  std::vector<CoflowFlow> flows{flow(1, 10 * kMB, {0}), flow(2, kMB, {0})};
  flows[0].waited_s = 100;
  CoflowPlanner p;
  std::vector<double> r;
  for (CoflowPolicy policy : {CoflowPolicy::kStf, CoflowPolicy::kSebf, CoflowPolicy::kBssi}) {
    SCOPED_TRACE(to_string(policy));
    CoflowConfig c = config(policy);
    p.plan(c, cap, flows, r);  // off: the smaller first
    EXPECT_EQ(p.order(), (std::vector<std::uint64_t>{2, 1}));
    c.aging_s = 10;
    p.plan(c, cap, flows, r);
    EXPECT_EQ(p.order(), (std::vector<std::uint64_t>{1, 2}));
    EXPECT_DOUBLE_EQ(r[0], 8e6);
    EXPECT_DOUBLE_EQ(r[1], 0);
    // Aging 100 s: weight 2, key 5 against 1: not yet.
    c.aging_s = 100;
    p.plan(c, cap, flows, r);
    EXPECT_EQ(p.order(), (std::vector<std::uint64_t>{2, 1}));
  }
}

TEST(CoflowPlanner, ACoflowAgesAsItsOldestFlow) {
  // A's second flow is new, its first has waited 100 s: A's weight is 11,
  // whichever of its flows comes first. The newcomer B has waited nothing.
  const std::vector<double> cap{8e6, 8e6};
  std::vector<CoflowFlow> flows{flow(1, 5 * kMB, {0}), flow(2, kMB, {0}), flow(1, 5 * kMB, {1})};
  flows[0].waited_s = 100;
  CoflowConfig c = config(CoflowPolicy::kSebf);
  c.aging_s = 10;
  CoflowPlanner p;
  std::vector<double> r;
  p.plan(c, cap, flows, r);
  EXPECT_EQ(p.order(), (std::vector<std::uint64_t>{1, 2}));
  std::swap(flows[0].waited_s, flows[2].waited_s);
  p.plan(c, cap, flows, r);
  EXPECT_EQ(p.order(), (std::vector<std::uint64_t>{1, 2}));
  // Waits that say nothing (negative, NaN) count as none.
  flows[2].waited_s = -5;
  flows[1].waited_s = std::nan("");
  p.plan(c, cap, flows, r);
  EXPECT_EQ(p.order(), (std::vector<std::uint64_t>{2, 1}));
}

TEST(CoflowPlanner, PoliciesParseByNameAndBadSharesAreRefused) {
  CoflowPolicy p = CoflowPolicy::kNone;
  EXPECT_TRUE(parse_coflow_policy("sebf", p));
  EXPECT_EQ(p, CoflowPolicy::kSebf);
  EXPECT_TRUE(parse_coflow_policy("stf", p));
  EXPECT_EQ(p, CoflowPolicy::kStf);
  EXPECT_TRUE(parse_coflow_policy("bssi", p));
  EXPECT_EQ(p, CoflowPolicy::kBssi);
  EXPECT_FALSE(parse_coflow_policy("fifo", p));
  EXPECT_EQ(check(config(CoflowPolicy::kStf, 0)), "ordered share must be within (0, 1]");
  EXPECT_EQ(check(config(CoflowPolicy::kStf, 0.5)), "");
  CoflowConfig c = config(CoflowPolicy::kSebf);
  for (double bad : {-1.0, std::nan(""), kMaxAgingS, std::numeric_limits<double>::infinity()}) {
    c.aging_s = bad;
    EXPECT_EQ(check(c), "aging must be within [0, 1e9) s") << bad;
  }
  c.aging_s = 30;
  EXPECT_EQ(check(c), "");
}

}  // namespace
}  // namespace flowtune::alloc
