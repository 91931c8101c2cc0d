// The Clos engine (clos_engine.h) against the general engine (engine.h), the
// reference: the same flows, churn and limits must give the same rates and
// prices after every iteration, up to the rounding of link sums taken in
// another order, on two-tier networks (full bisection and oversubscribed) and
// a big switch; paths the topology does not route are refused.
#include "flowtune/alloc/clos_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "flowtune/alloc/engine.h"
#include "flowtune/alloc/topology.h"

namespace flowtune::alloc {
namespace {

struct Net {
  std::string name;
  Topology topology;
};

std::vector<Net> nets() {
  TwoTierSpec full;
  full.racks = 5;
  full.hosts_per_rack = 4;
  full.spines = 3;
  full.host_link_bps = 10e9;
  TwoTierSpec thin = full;
  thin.racks = 7;
  thin.spines = 2;
  thin.spine_link_bps = 6e9;  // 4 hosts x 10 Gbit/s over 2 x 6: the spines bind
  return {{"two_tier_full", Topology::two_tier(full)},
          {"two_tier_oversubscribed", Topology::two_tier(thin)},
          {"big_switch", Topology::big_switch(12, 25e9)}};
}

class ClosVsEngine : public ::testing::TestWithParam<int> {};

FlowSpec random_flow(const Topology& t, std::mt19937_64& rng) {
  std::uniform_int_distribution<HostId> host(0, t.num_hosts() - 1);
  const HostId a = host(rng);
  HostId b = host(rng);
  while (b == a) b = host(rng);
  FlowSpec f = make_flow(t, a, b, rng(), std::uniform_real_distribution<double>(0.25, 4)(rng));
  // A quarter of the flows cannot go faster than a few Gbit/s.
  if (rng() % 4 == 0) f.max_bps = std::uniform_real_distribution<double>(0.2e9, 3e9)(rng);
  return f;
}

// Relative closeness with a floor, so rates near zero compare absolutely.
void expect_close(double a, double b, double floor, const std::string& what) {
  EXPECT_LE(std::abs(a - b), 1e-9 * std::max(std::abs(b), floor)) << what << ": " << a << " vs " << b;
}

TEST_P(ClosVsEngine, SameRatesAndPricesUnderChurn) {
  const Net net = nets()[static_cast<std::size_t>(GetParam())];
  const Topology& t = net.topology;
  EngineConfig cfg;
  BasicEngine<double> ref(t.capacities_bps(), t.num_sites(), cfg);
  ClosEngine clos(t, cfg);
  std::mt19937_64 rng(7 + static_cast<std::uint64_t>(GetParam()));
  // live[i] = (reference id, Clos id)
  std::vector<std::pair<FlowId, FlowId>> live;
  auto add = [&] {
    const FlowSpec f = random_flow(t, rng);
    ASSERT_EQ(clos.check_flow(f), FlowError::kOk);
    live.emplace_back(ref.add_flow(f), clos.add_flow(f));
  };
  for (int i = 0; i < 300; ++i) add();
  for (int round = 0; round < 30; ++round) {
    for (int it = 0; it < 10; ++it) {
      ref.iterate();
      clos.iterate();
    }
    const std::string where = net.name + " round " + std::to_string(round);
    for (const auto& [r, c] : live) {
      expect_close(clos.rate_bps(c), ref.rate_bps(r), 1e6, where + " rate");
      expect_close(clos.raw_rate_bps(c), ref.raw_rate_bps(r), 1e6, where + " raw rate");
    }
    for (LinkId l = 0; l < t.num_links(); ++l) {
      expect_close(clos.price(l), ref.price(l), 1e-6, where + " price of " + t.link_name(l));
    }
    EXPECT_NEAR(clos.stats().max_residual, ref.stats().max_residual, 1e-9) << where;
    // Churn: a tenth leave, as many arrive, a few change limits.
    for (int k = 0; k < 30 && !live.empty(); ++k) {
      const std::size_t i = rng() % live.size();
      ref.remove_flow(live[i].first);
      clos.remove_flow(live[i].second);
      live[i] = live.back();
      live.pop_back();
    }
    for (int k = 0; k < 30; ++k) add();
    for (int k = 0; k < 5; ++k) {
      const auto [r, c] = live[rng() % live.size()];
      const double w = std::uniform_real_distribution<double>(0.5, 2)(rng);
      const double cap = rng() % 2 ? 0.0 : 1e9;
      ASSERT_EQ(ref.set_limits(r, w, cap), FlowError::kOk);
      ASSERT_EQ(clos.set_limits(c, w, cap), FlowError::kOk);
    }
  }
  EXPECT_EQ(clos.num_flows(), ref.num_flows());
  // The churn appended and removed enough to sort again, more than once.
  EXPECT_GE(clos.sorts(), 2u) << net.name;
  // Without churn both reach the optimum together.
  for (int it = 0; it < 400; ++it) {
    ref.iterate();
    clos.iterate();
  }
  EXPECT_LT(ref.stats().max_residual, 1e-3) << net.name;
  for (const auto& [r, c] : live) expect_close(clos.rate_bps(c), ref.rate_bps(r), 1e6, net.name + " at the end");
}

INSTANTIATE_TEST_SUITE_P(Nets, ClosVsEngine, ::testing::Values(0, 1, 2),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return nets()[static_cast<std::size_t>(p.param)].name;
                         });

TEST(ClosEngine, SortingKeepsEveryFlowsRateAndTheNextIteration) {
  const Topology t = nets()[1].topology;
  EngineConfig cfg;
  ClosEngine sorted(t, cfg), unsorted(t, cfg);
  std::mt19937_64 rng(3);
  std::vector<FlowId> ids;
  for (int i = 0; i < 50; ++i) {  // under the sort threshold: appended runs only
    const FlowSpec f = random_flow(t, rng);
    ids.push_back(sorted.add_flow(f));
    ASSERT_EQ(unsorted.add_flow(f), ids.back());
  }
  sorted.remove_flow(ids[10]);
  unsorted.remove_flow(ids[10]);
  for (int i = 0; i < 20; ++i) {
    sorted.iterate();
    unsorted.iterate();
  }
  EXPECT_EQ(sorted.sorts(), 0u);
  std::vector<double> before;
  for (FlowId id : ids) before.push_back(id == ids[10] ? 0 : sorted.rate_bps(id));
  sorted.sort_flows();
  EXPECT_EQ(sorted.sorts(), 1u);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i == 10) {
      EXPECT_FALSE(sorted.has_flow(ids[i]));
      continue;
    }
    EXPECT_EQ(sorted.rate_bps(ids[i]), before[i]) << "a sort moves rates with their flows";
  }
  sorted.iterate();
  unsorted.iterate();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i != 10) expect_close(sorted.rate_bps(ids[i]), unsorted.rate_bps(ids[i]), 1e6, "after sort");
  }
}

TEST(ClosEngine, PortableAndBestKernelsAgree) {
  const Topology t = nets()[0].topology;
  EngineConfig portable;
  portable.portable_kernels = true;
  ClosEngine a(t, EngineConfig{}), b(t, portable);
  std::mt19937_64 rng(11);
  std::vector<FlowId> ids;
  for (int i = 0; i < 2000; ++i) {  // several 512-flow chunks
    const FlowSpec f = random_flow(t, rng);
    ids.push_back(a.add_flow(f));
    b.add_flow(f);
  }
  for (int i = 0; i < 50; ++i) {
    a.iterate();
    b.iterate();
  }
  std::cout << "kernels: " << a.kernel_name() << " against " << b.kernel_name() << "\n";
  for (FlowId id : ids) expect_close(a.rate_bps(id), b.rate_bps(id), 1e6, "kernels");
}

// F-NORM folded into the next rate pass (an option) against its own
// pass after every link step: the same bits in every rate read, and in the
// lagged rates each folded pass leaves (the separate engine's rates one
// iteration earlier), with arrivals, departures, limit changes and sorts
// between iterations while a folded F-NORM is pending.
template <typename Real>
void expect_fold_changes_no_bit() {
  for (const Net& net : nets()) {
    const Topology& t = net.topology;
    BasicClosEngine<Real> folded(t, EngineConfig{}), separate(t, EngineConfig{});
    EXPECT_FALSE(separate.fold_fnorm()) << "the default";
    folded.set_fold_fnorm(true);
    std::mt19937_64 rng(21);
    std::vector<FlowId> live;
    std::set<FlowId> added;  // since the separate engine's last rates
    auto add = [&] {
      const FlowSpec f = random_flow(t, rng);
      live.push_back(folded.add_flow(f));
      ASSERT_EQ(separate.add_flow(f), live.back());
      added.insert(live.back());
    };
    for (int i = 0; i < 600; ++i) add();
    std::map<FlowId, Real> before;  // the separate engine's last rates
    std::size_t lagged_checked = 0;
    for (int round = 0; round < 90; ++round) {
      folded.iterate();
      separate.iterate();
      // The folded pass normalized the previous iteration's rates.
      const auto lag = folded.lagged_rates();
      for (std::size_t s = 0; s < lag.size; ++s) {
        if (lag.ids[s] == folded.kNoFlow || added.count(lag.ids[s])) continue;
        const auto it = before.find(lag.ids[s]);
        if (it == before.end()) continue;  // the first iteration
        ASSERT_EQ(lag.rates[s], it->second) << net.name << " round " << round << " slot " << s;
        ++lagged_checked;
      }
      before.clear();
      added.clear();
      const auto b = separate.rates();
      for (std::size_t s = 0; s < b.size; ++s) {
        if (b.ids[s] != separate.kNoFlow) before[b.ids[s]] = b.rates[s];
      }
      // Churn while the folded engine's F-NORM is pending.
      for (int k = 0; k < 20; ++k) {
        const std::size_t i = rng() % live.size();
        folded.remove_flow(live[i]);
        separate.remove_flow(live[i]);
        live[i] = live.back();
        live.pop_back();
        add();
      }
      if (round % 4 == 1) {  // a cap low enough to bind, read at once below when round % 3 == 1
        const FlowId id = live[rng() % live.size()];
        const double cap = std::uniform_real_distribution<double>(0.01e9, 0.2e9)(rng);
        ASSERT_EQ(folded.set_limits(id, 1.5, cap), FlowError::kOk);
        ASSERT_EQ(separate.set_limits(id, 1.5, cap), FlowError::kOk);
      }
      if (round % 3 != 1) continue;  // read now and then
      const auto a = folded.rates();
      const auto c = separate.rates();
      ASSERT_EQ(a.size, c.size) << net.name;
      for (std::size_t s = 0; s < a.size; ++s) {
        ASSERT_EQ(a.ids[s], c.ids[s]) << net.name << " slot " << s;
        ASSERT_EQ(a.rates[s], c.rates[s]) << net.name << " round " << round << " slot " << s;
      }
      for (FlowId id : live) ASSERT_EQ(folded.rate_bps(id), separate.rate_bps(id)) << net.name;
    }
    EXPECT_GE(folded.sorts(), 2u) << net.name << ": the churn sorted, with F-NORM pending";
    EXPECT_EQ(folded.sorts(), separate.sorts());
    EXPECT_GT(lagged_checked, 40'000u) << net.name;
  }
}

TEST(ClosEngine, FoldedFNormGivesTheSeparatePassesBitsDouble) { expect_fold_changes_no_bit<double>(); }
TEST(ClosEngine, FoldedFNormGivesTheSeparatePassesBitsFloat) { expect_fold_changes_no_bit<float>(); }

TEST(ClosEngine, FloatFollowsDouble) {
  const Topology t = nets()[1].topology;
  BasicClosEngine<float> f32(t, EngineConfig{});
  ClosEngine f64(t, EngineConfig{});
  std::mt19937_64 rng(5);
  std::vector<FlowId> ids;
  for (int i = 0; i < 400; ++i) {
    const FlowSpec f = random_flow(t, rng);
    ids.push_back(f64.add_flow(f));
    f32.add_flow(f);
  }
  f64.solve(3000);
  f32.solve(3000);
  ASSERT_TRUE(f64.stats().converged) << f64.stats().max_residual;
  for (FlowId id : ids) {
    EXPECT_NEAR(f32.rate_bps(id), f64.rate_bps(id), 1e-3 * f64.rate_bps(id) + 1e3) << id;
  }
}

TEST(ClosEngine, RefusesWhatItDoesNotCompute) {
  TwoTierSpec s;
  s.racks = 3;
  s.hosts_per_rack = 2;
  s.spines = 2;
  const Topology t = Topology::two_tier(s);
  ClosEngine e(t, EngineConfig{});
  FlowSpec ok = make_flow(t, 0, 5, 1);
  EXPECT_EQ(e.check_flow(ok), FlowError::kOk);
  FlowSpec f = ok;
  f.path.links[1] = f.path.links[1] + 1;  // another spine up than down
  EXPECT_EQ(e.check_flow(f), FlowError::kUnknownLink);
  f = ok;
  std::swap(f.path.links[0], f.path.links[3]);  // backwards
  EXPECT_EQ(e.check_flow(f), FlowError::kUnknownLink);
  f = make_flow(t, 0, 1, 1);  // within rack 0: two hops
  EXPECT_EQ(e.check_flow(f), FlowError::kOk);
  f.path = t.path_via(0, 5, 0);
  f.path.size = 2;
  f.path.links[1] = t.host_downlink(5);  // leaves the rack without a spine
  EXPECT_EQ(e.check_flow(f), FlowError::kUnknownLink);
  f = ok;
  f.priority = 0;
  EXPECT_EQ(e.check_flow(f), FlowError::kBadClass);
  f = ok;
  f.weight = 0;
  EXPECT_EQ(e.check_flow(f), FlowError::kBadWeight);
  f = ok;
  f.path.size = 0;
  EXPECT_EQ(e.check_flow(f), FlowError::kEmptyPath);

  EXPECT_THROW(ClosEngine(Topology::explicit_links({1e9, 1e9}), EngineConfig{}), std::invalid_argument);
  EngineConfig alpha2;
  alpha2.alpha = 2;
  EXPECT_THROW(ClosEngine(t, alpha2), std::invalid_argument);
  EngineConfig unorm;
  unorm.normalizer = Normalizer::kUNorm;
  EXPECT_THROW(ClosEngine(t, unorm), std::invalid_argument);
}

}  // namespace
}  // namespace flowtune::alloc
