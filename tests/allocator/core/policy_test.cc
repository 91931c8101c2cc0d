// Floors, tenants and deadlines (engine floors + PolicyBook) against
// independent oracles: closed forms on one link, the naive reference solver
// of oracles.h on what floors leave (random topologies), and the properties
// the policies promise: tenant shares do not depend on flow counts, no link
// is over-allocated, a feasible deadline set is met in a fluid model, and
// infeasible deadlines are reported in deadline order without taking from
// the feasible ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "flowtune/alloc/engine.h"
#include "flowtune/alloc/policy.h"
#include "oracles.h"

namespace flowtune::alloc {
namespace {

constexpr double kGbps = 1e9;

EngineConfig tight() {
  EngineConfig c;
  c.tolerance = 1e-9;
  return c;
}

FlowSpec on_links(std::initializer_list<LinkId> links, double weight = 1, double max_bps = 0) {
  FlowSpec f;
  for (LinkId l : links) f.path.push(l);
  f.weight = weight;
  f.max_bps = max_bps;
  return f;
}

double sum_rates(const Engine& e, const std::vector<FlowId>& ids) {
  double s = 0;
  for (FlowId id : ids) s += e.rate_bps(id);
  return s;
}

TEST(Floors, AFloorComesOnTopOfAShareOfWhatFloorsLeave) {
  Engine e({10 * kGbps}, 1, tight());
  const FlowId a = e.add_flow(on_links({0}));
  const FlowId b = e.add_flow(on_links({0}));
  ASSERT_TRUE(e.set_floor(a, 3 * kGbps));
  e.solve(10000);
  ASSERT_TRUE(e.stats().converged);
  // 7 left, split 1:1; a adds its floor.
  EXPECT_NEAR(e.rate_bps(a), 6.5 * kGbps, 1e-6 * kGbps);
  EXPECT_NEAR(e.rate_bps(b), 3.5 * kGbps, 1e-6 * kGbps);
  EXPECT_NEAR(e.raw_rate_bps(a), 3.5 * kGbps, 1e-6 * kGbps);
  EXPECT_DOUBLE_EQ(e.reserved_bps(0), 3 * kGbps);
  EXPECT_DOUBLE_EQ(e.capacity_bps(0), 10 * kGbps);
  // Removing the flow releases its reservation: b takes the link.
  e.remove_flow(a);
  EXPECT_EQ(e.reserved_bps(0), 0);
  e.solve(10000);
  EXPECT_NEAR(e.rate_bps(b), 10 * kGbps, 1e-6 * kGbps);
}

TEST(Floors, RefusedBeyondTheReservableShareOrTheFlowsCap) {
  EngineConfig cfg = tight();
  cfg.max_reserved_share = 0.5;
  Engine e({10 * kGbps, 2 * kGbps}, 1, cfg);
  const FlowId a = e.add_flow(on_links({0}));
  const FlowId b = e.add_flow(on_links({0}));
  const FlowId c = e.add_flow(on_links({0}, 1, 1 * kGbps));
  EXPECT_TRUE(e.set_floor(a, 4 * kGbps));
  EXPECT_FALSE(e.set_floor(b, 2 * kGbps));  // 6 > 5
  EXPECT_EQ(e.floor_bps(b), 0);
  EXPECT_TRUE(e.set_floor(b, 1 * kGbps));
  EXPECT_FALSE(e.set_floor(c, 1.5 * kGbps));  // above its own cap
  EXPECT_FALSE(e.set_floor(a, -1));
  EXPECT_FALSE(e.set_floor(a, std::nan("")));
  EXPECT_DOUBLE_EQ(e.reserved_bps(0), 5 * kGbps);
  // Lowering always works, and frees room for others.
  EXPECT_TRUE(e.set_floor(a, 1 * kGbps));
  EXPECT_TRUE(e.set_floor(b, 3 * kGbps));
  EXPECT_THROW(Engine({kGbps}, 1, [] {
                 EngineConfig bad;
                 bad.max_reserved_share = 1;
                 return bad;
               }()),
               std::invalid_argument);
}

TEST(Floors, RandomTopologiesMatchTheReferenceOnWhatFloorsLeave) {
  for (std::uint64_t seed = 1; seed <= 15; ++seed) {
    oracle::Problem pb = oracle::random_problem(seed, {.max_flows = 60});
    oracle::Rng rng(seed * 77);
    Engine e(pb.capacity_bps(), 1, tight());
    std::vector<FlowId> ids;
    for (std::size_t s = 0; s < pb.flows.size(); ++s) ids.push_back(e.add_flow(pb.spec(s)));
    // Floors on a third of the flows, up to a fifth of their smallest link,
    // admitted while the links hold them.
    std::vector<double> floor(pb.flows.size(), 0);
    for (std::size_t s = 0; s < pb.flows.size(); ++s) {
      if (!rng.chance(1.0 / 3)) continue;
      const double g = rng.uniform(0, pb.effective_cap(s) / 5);
      if (e.set_floor(ids[s], g * kGbps)) floor[s] = g;
    }
    oracle::Problem rest = pb;
    for (std::size_t s = 0; s < pb.flows.size(); ++s) {
      for (LinkId l : pb.flows[s].links) rest.capacity[l] -= floor[s];
    }
    for (std::size_t s = 0; s < pb.flows.size(); ++s) rest.flows[s].cap = pb.effective_cap(s) - floor[s];
    e.solve(100000);
    ASSERT_TRUE(e.stats().converged) << "seed " << seed;
    const oracle::Reference ref = oracle::reference_solve(rest, 1e-12, 400000);
    ASSERT_TRUE(ref.converged) << "seed " << seed;
    for (std::size_t s = 0; s < pb.flows.size(); ++s) {
      const double want = floor[s] + ref.rate[s];
      EXPECT_NEAR(e.rate_bps(ids[s]) / kGbps, want, 1e-5 * std::max(1.0, want))
          << "seed " << seed << " flow " << s;
    }
    const std::vector<double> alloc = e.link_allocation_bps();
    for (std::size_t l = 0; l < pb.capacity.size(); ++l) {
      EXPECT_LE(alloc[l] / kGbps, pb.capacity[l] * (1 + 1e-9)) << "seed " << seed << " link " << l;
    }
  }
}

TEST(Floors, NoLinkOverAllocatedInAnyIterationWithClassesAndFloors) {
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    oracle::Problem pb = oracle::random_problem(seed, {.max_flows = 80});
    oracle::Rng rng(seed * 31);
    Engine e(pb.capacity_bps(), 1, EngineConfig{});
    std::vector<FlowId> ids;
    for (std::size_t s = 0; s < pb.flows.size(); ++s) {
      FlowSpec f = pb.spec(s);
      f.priority = static_cast<std::uint8_t>(rng.below(3) + 3);
      ids.push_back(e.add_flow(f));
      if (rng.chance(0.3)) e.set_floor(ids.back(), rng.uniform(0, pb.effective_cap(s)) * kGbps);
    }
    for (int it = 0; it < 200; ++it) {
      e.iterate();
      const std::vector<double> alloc = e.link_allocation_bps();
      for (std::size_t l = 0; l < pb.capacity.size(); ++l) {
        ASSERT_LE(alloc[l] / kGbps, pb.capacity[l] * (1 + 1e-9))
            << "seed " << seed << " iteration " << it << " link " << l;
      }
    }
  }
}

TEST(Floors, SetLimitsReweighsAndRecapsALiveFlow) {
  Engine e({10 * kGbps}, 1, tight());
  const FlowId a = e.add_flow(on_links({0}));
  const FlowId b = e.add_flow(on_links({0}));
  EXPECT_EQ(e.set_limits(a, 3, 0), FlowError::kOk);
  e.solve(10000);
  EXPECT_NEAR(e.rate_bps(a), 7.5 * kGbps, 1e-6 * kGbps);
  EXPECT_EQ(e.set_limits(b, 1, 1 * kGbps), FlowError::kOk);
  e.solve(10000);
  EXPECT_NEAR(e.rate_bps(b), 1 * kGbps, 1e-6 * kGbps);
  EXPECT_NEAR(e.rate_bps(a), 9 * kGbps, 1e-6 * kGbps);
  EXPECT_EQ(e.set_limits(a, 0, 0), FlowError::kBadWeight);
  EXPECT_EQ(e.set_limits(a, 1, 5), FlowError::kBadMaxRate);
  // A lower cap takes a floor down with it.
  ASSERT_TRUE(e.set_floor(b, 0.5 * kGbps));
  EXPECT_EQ(e.set_limits(b, 1, 0.25 * kGbps), FlowError::kOk);
  EXPECT_DOUBLE_EQ(e.floor_bps(b), 0.25 * kGbps);
  EXPECT_DOUBLE_EQ(e.reserved_bps(0), 0.25 * kGbps);
}

// ---- Tenants ----

struct TenantRig {
  Engine engine;
  PolicyBook book;
  explicit TenantRig(std::vector<double> caps) : engine(std::move(caps), 1, tight()) {}
  FlowId add(FlowSpec f, TenantId t, std::uint64_t deadline_at_us = 0, std::uint64_t bytes = 0,
             std::uint64_t now_us = 0) {
    const FlowId id = engine.add_flow(f);
    book.add(id, {t, f.weight, f.max_bps, deadline_at_us, bytes, 0, f.path}, now_us);
    return id;
  }
  void settle(std::uint64_t now_us = 0) {
    book.apply(engine, now_us);
    engine.solve(20000);
    ASSERT_TRUE(engine.stats().converged);
  }
};

TEST(Tenants, ShareDoesNotDependOnHowManyConnectionsATenantOpens) {
  for (int n_b : {1, 2, 16, 100}) {
    TenantRig r({1 * kGbps});
    const TenantId ta = r.book.tenant("a"), tb = r.book.tenant("b");
    std::vector<FlowId> a{r.add(on_links({0}), ta)}, b;
    for (int i = 0; i < n_b; ++i) b.push_back(r.add(on_links({0}), tb));
    r.settle();
    EXPECT_NEAR(sum_rates(r.engine, a), 0.5 * kGbps, 1e-6 * kGbps) << n_b;
    EXPECT_NEAR(sum_rates(r.engine, b), 0.5 * kGbps, 1e-6 * kGbps) << n_b;
  }
}

TEST(Tenants, TenantWeightsSplitTheLinkAndFlowWeightsSplitTheTenant) {
  TenantRig r({9 * kGbps});
  const TenantId ta = r.book.tenant("a"), tb = r.book.tenant("b");
  r.book.set_spec(ta, {.weight = 2});
  const FlowId a1 = r.add(on_links({0}, 1), ta);
  const FlowId a2 = r.add(on_links({0}, 2), ta);
  std::vector<FlowId> b;
  for (int i = 0; i < 5; ++i) b.push_back(r.add(on_links({0}, 1 + i), tb));
  const FlowId lone = r.add(on_links({0}, 1), kNoTenant);  // its own tenant, weight 1
  r.settle();
  // Weights 2 : 1 : 1 over 9 Gbit/s.
  EXPECT_NEAR(r.engine.rate_bps(a1), 1.5 * kGbps, 1e-6 * kGbps);
  EXPECT_NEAR(r.engine.rate_bps(a2), 3 * kGbps, 1e-6 * kGbps);
  EXPECT_NEAR(sum_rates(r.engine, b), 2.25 * kGbps, 1e-6 * kGbps);
  EXPECT_NEAR(r.engine.rate_bps(lone), 2.25 * kGbps, 1e-6 * kGbps);
  // A member leaves: the tenant keeps its share.
  r.engine.remove_flow(a2);
  r.book.remove(a2);
  r.settle();
  EXPECT_NEAR(r.engine.rate_bps(a1), 4.5 * kGbps, 1e-6 * kGbps);
}

TEST(Tenants, RandomFlowCountsOverRandomLinksKeepTenantTotalsOnTheSharedBottleneck) {
  // Every flow crosses the shared link 0 (the bottleneck: the others are
  // larger) and one random other link: tenant totals on link 0 follow the
  // tenant weights whatever the counts.
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    oracle::Rng rng(seed);
    TenantRig r({1 * kGbps, 50 * kGbps, 50 * kGbps, 50 * kGbps});
    const int tenants = 2 + static_cast<int>(rng.below(4));
    std::vector<std::vector<FlowId>> flows(tenants);
    std::vector<double> weights;
    for (int t = 0; t < tenants; ++t) {
      const TenantId id = r.book.tenant("t" + std::to_string(t));
      weights.push_back(rng.log_uniform(0.5, 4));
      r.book.set_spec(id, {.weight = weights.back()});
      const int n = 1 + static_cast<int>(rng.below(20));
      for (int i = 0; i < n; ++i) {
        const auto other = static_cast<LinkId>(1 + rng.below(3));
        flows[t].push_back(r.add(on_links({0, other}, rng.log_uniform(0.1, 10)), id));
      }
    }
    r.settle();
    const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
    for (int t = 0; t < tenants; ++t) {
      EXPECT_NEAR(sum_rates(r.engine, flows[t]) / kGbps, weights[t] / total, 1e-6)
          << "seed " << seed << " tenant " << t;
    }
  }
}

TEST(Tenants, CapsBoundATenantAndTheRestGoesToOthers) {
  TenantRig r({10 * kGbps});
  const TenantId ta = r.book.tenant("a"), tb = r.book.tenant("b");
  r.book.set_spec(tb, {.weight = 1, .cap_bps = 2 * kGbps});
  std::vector<FlowId> a{r.add(on_links({0}), ta)}, b;
  for (int i = 0; i < 4; ++i) b.push_back(r.add(on_links({0}), tb));
  r.settle();
  EXPECT_NEAR(sum_rates(r.engine, b), 2 * kGbps, 1e-6 * kGbps);
  EXPECT_NEAR(sum_rates(r.engine, a), 8 * kGbps, 1e-6 * kGbps);
}

TEST(Tenants, GuaranteesComeFirstThenTheWeightedShareOfTheRest) {
  TenantRig r({10 * kGbps});
  const TenantId ta = r.book.tenant("a"), tb = r.book.tenant("b");
  r.book.set_spec(ta, {.weight = 1, .guarantee_bps = 6 * kGbps});
  std::vector<FlowId> a{r.add(on_links({0}), ta), r.add(on_links({0}), ta)}, b;
  for (int i = 0; i < 16; ++i) b.push_back(r.add(on_links({0}), tb));
  r.settle();
  EXPECT_NEAR(sum_rates(r.engine, a), 8 * kGbps, 1e-6 * kGbps);  // 6 + half of 4
  EXPECT_NEAR(sum_rates(r.engine, b), 2 * kGbps, 1e-6 * kGbps);
  EXPECT_EQ(r.book.counters().guarantees_refused, 0u);
  // A guarantee past what the links may reserve is refused, counted, and
  // the tenant still gets its share.
  r.book.set_spec(tb, {.weight = 1, .guarantee_bps = 8 * kGbps});
  r.settle();
  EXPECT_GT(r.book.counters().guarantees_refused, 0u);
  const std::vector<double> alloc = r.engine.link_allocation_bps();
  EXPECT_LE(alloc[0], 10 * kGbps * (1 + 1e-9));
  EXPECT_EQ(check(TenantSpec{.weight = 0}), "weight must be between 1e-6 and 1e6");
  EXPECT_NE(check(TenantSpec{.weight = 1, .guarantee_bps = 2e9, .cap_bps = 1e9}), "");
}

// ---- Deadlines ----

// A fluid model of one link: every millisecond the engine's rates move bytes;
// finished flows leave (engine and book), which is when floors are re-planned.
struct Fluid {
  struct F {
    FlowId id;
    double bytes, sent = 0;
    std::uint64_t deadline_at_us;  // 0: bulk (never finishes)
    std::uint64_t done_us = 0;
  };
  TenantRig rig;
  std::vector<F> flows;
  std::uint64_t now_us = 0;
  explicit Fluid(double link_bps) : rig({link_bps}) {}
  void add(double bytes, std::uint64_t deadline_at_us) {
    const FlowId id = rig.add(on_links({0}), kNoTenant, deadline_at_us,
                              deadline_at_us ? static_cast<std::uint64_t>(bytes) : 0, now_us);
    flows.push_back({id, bytes, 0, deadline_at_us});
  }
  void run(std::uint64_t until_us) {
    constexpr std::uint64_t kStepUs = 1000;
    rig.settle(now_us);
    while (now_us < until_us) {
      bool left = false;
      for (F& f : flows) {
        if (f.done_us || !f.deadline_at_us) continue;
        f.sent += rig.engine.rate_bps(f.id) / 8 * kStepUs * 1e-6;
        if (f.sent >= f.bytes) {
          f.done_us = now_us + kStepUs;
          rig.engine.remove_flow(f.id);
          rig.book.remove(f.id);
          left = true;
        }
      }
      now_us += kStepUs;
      if (left) rig.settle(now_us);
    }
  }
};

TEST(Deadlines, AFeasibleSetIsMetAmidBulkFlowsInTheFluidModel) {
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    oracle::Rng rng(seed);
    const double link = 1 * kGbps;
    Fluid m(link);
    for (int i = 0; i < 4; ++i) m.add(1e12, 0);  // bulk
    // Deadline flows whose needs together fit 80% of the link (the engine may
    // reserve 90%; the book adds a 5% margin).
    const int n = 2 + static_cast<int>(rng.below(10));
    std::vector<double> need(n);
    for (double& x : need) x = rng.uniform(0.1, 1);
    const double scale = 0.8 * link / std::accumulate(need.begin(), need.end(), 0.0);
    for (int i = 0; i < n; ++i) {
      const double d_s = rng.uniform(0.02, 0.5);
      m.add(need[i] * scale * d_s / 8, static_cast<std::uint64_t>(d_s * 1e6));
    }
    m.run(600'000);
    for (const Fluid::F& f : m.flows) {
      if (!f.deadline_at_us) continue;
      EXPECT_NE(f.done_us, 0u) << "seed " << seed;
      EXPECT_LE(f.done_us, f.deadline_at_us + 1000) << "seed " << seed;
    }
    EXPECT_EQ(m.rig.book.counters().deadlines_infeasible, 0u) << "seed " << seed;
    // Bulk flows were never starved: they share what floors left.
    for (const Fluid::F& f : m.flows) {
      if (!f.deadline_at_us) {
        EXPECT_GT(m.rig.engine.rate_bps(f.id), 0.2 * link) << "seed " << seed;
      }
    }
  }
}

TEST(Deadlines, WithoutTheBookTheSameSetMissesUnderFairSharing) {
  // The control for the test above: the same kind of set under plain
  // proportional fairness misses deadlines (so the floors are what meets them).
  const double link = 1 * kGbps;
  Fluid m(link);
  for (int i = 0; i < 4; ++i) m.add(1e12, 0);
  m.add(0.6 * link * 0.1 / 8, 100'000);  // needs 60% for 100 ms; fair share is 20%
  // Tell the book nothing about the deadline: drop it from the book at once.
  m.rig.book.remove(m.flows.back().id);
  m.run(300'000);
  EXPECT_GT(m.flows.back().done_us, m.flows.back().deadline_at_us);
}

TEST(Deadlines, InfeasibleOnesAreReportedLatestFirstAndLeaveTheOthersTheirFloors) {
  Fluid m(1 * kGbps);
  m.add(1e12, 0);
  // Each needs half the link (52.5% with the margin): together more than the
  // 90% a link may reserve. EDF admits the one due first.
  m.add(0.5e9 * 0.2 / 8, 200'000);
  m.add(0.5e9 * 0.1 / 8, 100'000);
  m.rig.settle(0);
  EXPECT_EQ(m.rig.book.deadline_state(m.flows[2].id), DeadlineState::kReserved);
  EXPECT_EQ(m.rig.book.deadline_state(m.flows[1].id), DeadlineState::kInfeasible);
  EXPECT_EQ(m.rig.book.counters().deadlines_infeasible, 1u);
  m.run(400'000);
  EXPECT_LE(m.flows[2].done_us, 100'000u + 1000);
  // Once the first is done, the second is re-planned and may yet make it.
  EXPECT_NE(m.flows[1].done_us, 0u);
  EXPECT_EQ(m.rig.book.counters().deadlines_infeasible, 1u);  // counted once
}

TEST(Deadlines, AReplanNeverLowersARunningFlowsFloor) {
  // The book estimates progress from the rates it gave, which run ahead of a
  // real sender's bytes; a later plan must not take back what the first one
  // reserved. a needs 30% of the link for 200 ms; halfway through, b (due
  // later, small) arrives and everything is re-planned.
  Fluid m(1 * kGbps);
  m.add(1e12, 0);
  m.add(0.3e9 * 0.2 / 8, 200'000);
  m.rig.settle(0);
  const double first = m.rig.engine.floor_bps(m.flows[1].id);
  EXPECT_NEAR(first, 0.3e9 * 1.05, 1e6);
  m.now_us = 100'000;
  m.add(1e6, 300'000);
  m.rig.settle(m.now_us);
  EXPECT_EQ(m.rig.book.deadline_state(m.flows[1].id), DeadlineState::kReserved);
  EXPECT_GE(m.rig.engine.floor_bps(m.flows[1].id), first * (1 - 1e-9));
  EXPECT_EQ(m.rig.book.deadline_state(m.flows[2].id), DeadlineState::kReserved);
}

TEST(Deadlines, AHeldFloorThatNoLongerFitsFallsBackToTheEstimate) {
  // a holds 31.5% of the link from its first plan (ten bulk flows keep its
  // rate near that, so halfway through it still needs about 24%); then c,
  // due first, takes 63%. The held floor no longer fits under the 90% a link
  // may reserve, but what a still needs by the estimate does: a keeps that.
  Fluid m(1 * kGbps);
  for (int i = 0; i < 10; ++i) m.add(1e12, 0);
  m.add(0.3e9 * 0.2 / 8, 200'000);
  m.rig.settle(0);
  const FlowId a = m.flows[10].id;
  EXPECT_NEAR(m.rig.engine.floor_bps(a), 0.315e9, 1e6);
  m.now_us = 100'000;
  m.add(0.6e9 * 0.05 / 8, 150'000);
  m.rig.settle(m.now_us);
  EXPECT_EQ(m.rig.book.deadline_state(m.flows[11].id), DeadlineState::kReserved);
  EXPECT_EQ(m.rig.book.deadline_state(a), DeadlineState::kReserved);
  EXPECT_GT(m.rig.engine.floor_bps(a), 0.1e9);
  EXPECT_LT(m.rig.engine.floor_bps(a), 0.3e9);
  EXPECT_EQ(m.rig.book.counters().deadlines_infeasible, 0u);
}

TEST(Deadlines, AnOverdueFlowLosesItsFloor) {
  Fluid m(1 * kGbps);
  m.add(1e12, 0);
  m.add(1e12, 0);
  m.add(1e9, 50'000);  // hopeless: 1 GB in 50 ms
  m.rig.settle(0);
  EXPECT_EQ(m.rig.book.deadline_state(m.flows[2].id), DeadlineState::kInfeasible);
  m.now_us = 60'000;  // past the deadline: the next apply re-plans by itself
  EXPECT_TRUE(m.rig.book.dirty(m.now_us));
  m.rig.settle(m.now_us);
  EXPECT_FALSE(m.rig.book.dirty(m.now_us + 1'000'000));
  EXPECT_EQ(m.rig.book.deadline_state(m.flows[2].id), DeadlineState::kOverdue);
  EXPECT_EQ(m.rig.engine.floor_bps(m.flows[2].id), 0);
}

// ---- Coflows ----

TEST(Coflows, TheEngineServesTheSmallerCoflowFirstAndSharesTheRestWithEveryFlow) {
  Engine e({10 * kGbps}, 1, tight());
  PolicyBook book;
  ASSERT_EQ(book.set_coflow(CoflowPolicy::kStf, 0.9), "");
  const auto add = [&](std::uint64_t coflow, std::uint64_t bytes, std::uint64_t deadline = 0) {
    const FlowSpec f = on_links({0});
    const FlowId id = e.add_flow(f);
    book.add(id, {kNoTenant, 1, 0, deadline, bytes, coflow, f.path}, 0);
    return id;
  };
  const FlowId small = add(1, 1'000'000);
  const FlowId big1 = add(2, 10'000'000), big2 = add(2, 10'000'000);
  const FlowId untagged = add(0, 0);  // no coflow, no size: last
  book.apply(e, 0);
  e.solve(20000);
  ASSERT_TRUE(e.stats().converged);
  // The small coflow holds 90% as its floor; the other 10% is shared by all four.
  EXPECT_NEAR(e.floor_bps(small), 9 * kGbps, 1e3);
  EXPECT_NEAR(e.rate_bps(small), 9.25 * kGbps, 1e-6 * kGbps);
  for (FlowId id : {big1, big2, untagged}) EXPECT_NEAR(e.rate_bps(id), 0.25 * kGbps, 1e-6 * kGbps);
  EXPECT_EQ(book.counters().coflows_ordered, 2u);  // the unsized flow is not ordered
  // The small coflow ends: the big one's flows split the order's 90%.
  book.remove(small);
  e.remove_flow(small);
  book.apply(e, 1000);
  e.solve(20000);
  EXPECT_NEAR(e.rate_bps(big1), (4.5 + 1.0 / 3) * kGbps, 1e-6 * kGbps);
  EXPECT_NEAR(e.rate_bps(untagged), kGbps / 3, 1e-6 * kGbps);
  double sum = 0;
  for (FlowId id : {big1, big2, untagged}) sum += e.rate_bps(id);
  EXPECT_LE(sum, 10 * kGbps * (1 + 1e-9));
  // A deadline's floor comes first: the order gets 90% less it.
  const FlowId urgent = add(0, 25'000'000, 101'000);  // 25 MB in 0.1 s: 2 Gbit/s
  book.apply(e, 1000);
  e.solve(20000);
  EXPECT_NEAR(e.floor_bps(urgent), 2 * 1.05 * kGbps, 1e-3 * kGbps);
  EXPECT_NEAR(e.floor_bps(big1) + e.floor_bps(big2), (9 - 2.1) * kGbps, 1e-3 * kGbps);
  // A flow both due and first in coflow order keeps the larger floor, not
  // their sum: 1 MB is the smallest coflow (id 5) and its deadline wants 2.1.
  const FlowId both = add(5, 1'000'000, 1'001'000);  // 1 MB in 1 s: 8.4 Mbit/s due
  book.apply(e, 1000);
  e.solve(20000);
  // The order hands out 90% less both deadlines' floors (8.4 Mbit/s is both's own).
  EXPECT_NEAR(e.floor_bps(both), 9 * kGbps - e.floor_bps(urgent) - 8.4e6, 1e-3 * kGbps);
  EXPECT_LE(e.floor_bps(both) + e.floor_bps(urgent), 9 * kGbps * (1 + 1e-9));
  EXPECT_GT(book.counters().coflow_plans, 1u);
}

TEST(Coflows, CapsAndFlowsTheEstimateCallsDoneAreNotOverReserved) {
  Engine e({10 * kGbps}, 1, tight());
  PolicyBook book;
  ASSERT_EQ(book.set_coflow(CoflowPolicy::kSebf, 0.9), "");
  const auto add = [&](std::uint64_t coflow, std::uint64_t bytes, double max_bps) {
    const FlowSpec f = on_links({0}, 1, max_bps);
    const FlowId id = e.add_flow(f);
    book.add(id, {kNoTenant, 1, max_bps, 0, bytes, coflow, f.path}, 0);
    return id;
  };
  const FlowId capped = add(1, 1'000'000, 1 * kGbps);  // first, but may take 1 Gbit/s only
  const FlowId other = add(2, 100'000'000'000, 0);
  book.apply(e, 0);
  e.solve(20000);
  EXPECT_NEAR(e.floor_bps(capped), 1 * kGbps, 1e-3 * kGbps);
  EXPECT_NEAR(e.floor_bps(other), 8 * kGbps, 1e-3 * kGbps);
  // 2 s later the estimate says the capped flow sent its 1 MB long ago: it
  // is no longer ordered (its floor goes) and the other takes the order's 90%.
  const FlowId third = add(3, 200'000'000'000, 0);  // a change, so the book plans again
  book.apply(e, 2'000'000);
  e.solve(20000);
  EXPECT_EQ(e.floor_bps(capped), 0);
  EXPECT_NEAR(e.floor_bps(other), 9 * kGbps, 1e-3 * kGbps);
  EXPECT_EQ(e.floor_bps(third), 0);
}

// Endpoints' progress reports: a flowlet that turned out larger than its
// start said loses its place in the order, and one whose estimate ran ahead
// of what it handed over keeps being ordered.
TEST(Coflows, ProgressReportsReorderAndCorrectTheEstimate) {
  Engine e({10 * kGbps}, 1, tight());
  PolicyBook book;
  ASSERT_EQ(book.set_coflow(CoflowPolicy::kStf, 0.9), "");
  const auto add = [&](std::uint64_t coflow, std::uint64_t bytes) {
    const FlowSpec f = on_links({0});
    const FlowId id = e.add_flow(f);
    book.add(id, {kNoTenant, 1, 0, 0, bytes, coflow, f.path}, 0);
    return id;
  };
  const FlowId grows = add(1, 1'000'000);   // the shim saw its first 1 MB write
  const FlowId mid = add(2, 50'000'000);
  book.apply(e, 0);
  e.solve(20000);
  EXPECT_NEAR(e.floor_bps(grows), 9 * kGbps, 1e-3 * kGbps);
  // It has written 400 MB by now: the 50 MB coflow goes first.
  book.progress(grows, 400'000'000, 2'000'000, 100);
  EXPECT_TRUE(book.dirty(100));
  book.apply(e, 100);
  e.solve(20000);
  EXPECT_NEAR(e.floor_bps(mid), 9 * kGbps, 1e-3 * kGbps);
  EXPECT_EQ(e.floor_bps(grows), 0);
  // 60 ms at 9 Gbit/s: the estimate says mid sent 67 MB, more than its 50;
  // its endpoint says 20 MB were handed over. It stays first, with 30 MB left.
  book.progress(mid, 50'000'000, 20'000'000, 60'100);
  book.apply(e, 60'100);
  e.solve(20000);
  EXPECT_NEAR(e.floor_bps(mid), 9 * kGbps, 1e-3 * kGbps);
  // Without the report the estimate would call it done and order the other.
  PolicyBook no_report;
  ASSERT_EQ(no_report.set_coflow(CoflowPolicy::kStf, 0.9), "");
  Engine e2({10 * kGbps}, 1, tight());
  const FlowSpec f = on_links({0});
  const FlowId only = e2.add_flow(f);
  no_report.add(only, {kNoTenant, 1, 0, 0, 50'000'000, 2, f.path}, 0);
  no_report.apply(e2, 0);
  e2.solve(20000);
  const FlowId later = e2.add_flow(f);  // a change, so the book plans again
  no_report.add(later, {kNoTenant, 1, 0, 0, 400'000'000, 1, f.path}, 60'100);
  no_report.apply(e2, 60'100);
  e2.solve(20000);
  EXPECT_EQ(e2.floor_bps(only), 0);
}

// Aging in the book: a coflow waits from its flow's start, so one that came
// long ago goes before a smaller newcomer once it has waited long enough.
TEST(Coflows, ACoflowThatHasWaitedGoesFirstWithAging) {
  for (const double aging_s : {0.0, 10.0, 1.0}) {
    SCOPED_TRACE(aging_s);
    Engine e({10 * kGbps}, 1, tight());
    PolicyBook book;
    ASSERT_EQ(book.set_coflow(CoflowPolicy::kStf, 0.9, aging_s), "");
    const FlowSpec f = on_links({0});
    // 200 GB at t = 0, alone at 10 Gbit/s for 100 s: 75 GB left by then.
    const FlowId old = e.add_flow(f);
    book.add(old, {kNoTenant, 1, 0, 0, 200'000'000'000, 1, f.path}, 0);
    book.apply(e, 0);
    e.solve(20000);
    // 1 GB at t = 100 s: first, unless the old one's weight divides its 75
    // GB below 1 (aging 1 s: weight 101; 10 s: 11, not enough).
    const FlowId young = e.add_flow(f);
    book.add(young, {kNoTenant, 1, 0, 0, 1'000'000'000, 2, f.path}, 100'000'000);
    book.apply(e, 100'000'000);
    e.solve(20000);
    const FlowId first = aging_s == 1.0 ? old : young, second = first == old ? young : old;
    EXPECT_NEAR(e.floor_bps(first), 9 * kGbps, 1e-3 * kGbps);
    EXPECT_EQ(e.floor_bps(second), 0);
  }
  PolicyBook book;
  EXPECT_EQ(book.set_coflow(CoflowPolicy::kSebf, 0.9, -1), "aging must be within [0, 1e9) s");
}

TEST(Coflows, ABadShareIsRefusedAndNoPolicyRecordsNothing) {
  PolicyBook book;
  EXPECT_EQ(book.set_coflow(CoflowPolicy::kSebf, 1.5), "ordered share must be within (0, 1]");
  EXPECT_EQ(book.coflow_policy(), CoflowPolicy::kNone);
  Engine e({10 * kGbps}, 1, tight());
  const FlowSpec f = on_links({0});
  const FlowId id = e.add_flow(f);
  book.add(id, {kNoTenant, 1, 0, 0, 1000, 7, f.path}, 0);
  EXPECT_FALSE(book.dirty(0));  // off: a coflow id alone costs nothing
}

}  // namespace
}  // namespace flowtune::alloc
