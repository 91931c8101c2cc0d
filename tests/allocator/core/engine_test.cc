// Correctness of the rate engine (paper §2-§4) against independent oracles:
// closed forms (single bottleneck, weights, parking lot, rate caps, α-fair),
// KKT conditions, the Lagrangian dual bound and a naive reference solver
// (oracles.h) on random topologies, the normalizers' invariants (eq. 5-6),
// convergence speed of NED against Gradient, the online add/remove API, input
// validation and numeric guards.
//
// Units: the API speaks bits/s; link prices are per Gbit/s (the engine's
// internal unit), so a link of c bits/s shared by flows of total weight W has
// price W / (c / 1e9) at the weighted-log optimum.
#include "flowtune/alloc/engine.h"
#include "flowtune/alloc/engine_driver.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "oracles.h"

namespace flowtune::alloc {
namespace {

using oracle::kBpsPerGbps;
using oracle::kInf;
using oracle::Problem;
using oracle::RandomProblemSpec;
using oracle::RefFlow;
using oracle::Rng;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Generous iteration limit for runs that must converge; hitting it fails.
constexpr std::uint64_t kMaxIterations = 200000;

// ---- Building engines from problems ----

template <typename Real>
struct Built {
  std::unique_ptr<BasicEngine<Real>> engine;
  std::vector<FlowId> ids;  // ids[s] is problem flow s
};

template <typename Real = double>
Built<Real> build(const Problem& pb, const EngineConfig& cfg) {
  Built<Real> b;
  b.engine = std::make_unique<BasicEngine<Real>>(pb.capacity_bps(), 1, cfg);
  for (std::size_t s = 0; s < pb.flows.size(); ++s) {
    FlowSpec f = pb.spec(s);
    EXPECT_EQ(b.engine->check_flow(f), FlowError::kOk) << "flow " << s;
    b.ids.push_back(b.engine->add_flow(f));
  }
  return b;
}

EngineConfig config(Algorithm a, double tolerance, Normalizer n = Normalizer::kFNorm) {
  EngineConfig c;
  c.algorithm = a;
  c.tolerance = tolerance;
  c.normalizer = n;
  return c;
}

// Runs solve() and fails the test unless the engine reports convergence.
template <typename Real>
std::uint64_t solve_converged(BasicEngine<Real>& e, std::uint64_t max_iterations = kMaxIterations) {
  const std::uint64_t n = e.solve(max_iterations);
  EXPECT_TRUE(e.stats().converged)
      << "not converged after " << n << " iterations, residual " << e.stats().max_residual;
  return n;
}

template <typename Real>
std::vector<double> raw_gbps(const Built<Real>& b) {
  std::vector<double> x;
  for (FlowId id : b.ids) x.push_back(b.engine->raw_rate_bps(id) / kBpsPerGbps);
  return x;
}

template <typename Real>
std::vector<double> rates_gbps(const Built<Real>& b) {
  std::vector<double> x;
  for (FlowId id : b.ids) x.push_back(b.engine->rate_bps(id) / kBpsPerGbps);
  return x;
}

template <typename Real>
std::vector<double> prices(const BasicEngine<Real>& e) {
  std::vector<double> p;
  for (std::size_t l = 0; l < e.num_links(); ++l) p.push_back(e.price(static_cast<LinkId>(l)));
  return p;
}

// Both the optimizer's rate and the normalized rate are within rel of want.
template <typename Real>
void expect_rates(const Built<Real>& b, const std::vector<double>& want_gbps, double rel) {
  ASSERT_EQ(b.ids.size(), want_gbps.size());
  for (std::size_t s = 0; s < want_gbps.size(); ++s) {
    const double want = want_gbps[s] * kBpsPerGbps;
    EXPECT_NEAR(b.engine->raw_rate_bps(b.ids[s]), want, rel * want) << "raw rate of flow " << s;
    EXPECT_NEAR(b.engine->rate_bps(b.ids[s]), want, rel * want) << "rate of flow " << s;
  }
}

Problem single_link(double c_gbps, const std::vector<double>& weights,
                    const std::vector<double>& caps_gbps = {}) {
  Problem pb;
  pb.capacity = {c_gbps};
  for (std::size_t i = 0; i < weights.size(); ++i) {
    RefFlow f;
    f.links = {0};
    f.weight = weights[i];
    if (i < caps_gbps.size() && caps_gbps[i] > 0) f.cap = caps_gbps[i];
    pb.flows.push_back(f);
  }
  return pb;
}

// Parking lot: links 0..n-1 of capacity c; flow 0 crosses all of them, flow
// i+1 crosses link i only.
Problem parking_lot(int n, double c_gbps) {
  EXPECT_LE(n, kMaxPathLinks);
  Problem pb;
  pb.capacity.assign(n, c_gbps);
  RefFlow lng;
  for (int l = 0; l < n; ++l) lng.links.push_back(static_cast<LinkId>(l));
  pb.flows.push_back(lng);
  for (int l = 0; l < n; ++l) {
    RefFlow s;
    s.links = {static_cast<LinkId>(l)};
    pb.flows.push_back(s);
  }
  return pb;
}

// ---- Closed forms: weighted log utility ----

void check_single_bottleneck(Algorithm a, double c_gbps, int n) {
  SCOPED_TRACE(std::string(to_string(a)) + " c=" + std::to_string(c_gbps) +
               "G n=" + std::to_string(n));
  Built<double> b = build(single_link(c_gbps, std::vector<double>(n, 1.0)), config(a, 1e-10));
  solve_converged(*b.engine);
  expect_rates(b, std::vector<double>(n, c_gbps / n), 1e-7);
  // Price: w / x = n / c per Gbit/s. (A lone flow is held at the link's
  // capacity by its own floor, so any price in [0, 1/c] is optimal for n = 1.)
  if (n >= 2) {
    EXPECT_NEAR(b.engine->price(0), n / c_gbps, 1e-7 * n / c_gbps);
  } else {
    EXPECT_LE(b.engine->price(0), (1 + 1e-9) / c_gbps);
  }
  EXPECT_NEAR(b.engine->link_allocation_bps()[0], c_gbps * kBpsPerGbps,
              1e-7 * c_gbps * kBpsPerGbps);
}

TEST(Ned, SingleBottleneckSplitsEvenly) {
  for (double c : {1.0, 10.0, 40.0, 100.0}) {
    for (int n : {1, 2, 3, 5, 8, 16, 100}) check_single_bottleneck(Algorithm::kNed, c, n);
  }
}

TEST(Gradient, SingleBottleneckSplitsEvenly) {
  // The default Gradient step is stable for 10 Gbit/s links (EngineConfig).
  for (int n : {1, 2, 3, 5, 8}) check_single_bottleneck(Algorithm::kGradient, 10.0, n);
}

void check_weighted(Algorithm a, double c_gbps) {
  const std::vector<double> w = {0.5, 1, 2, 4.5, 0.25};
  double wsum = 0;
  for (double v : w) wsum += v;
  Built<double> b = build(single_link(c_gbps, w), config(a, 1e-10));
  solve_converged(*b.engine);
  std::vector<double> want;
  for (double v : w) want.push_back(c_gbps * v / wsum);
  expect_rates(b, want, 1e-7);
}

TEST(Ned, WeightedFlowsShareInProportionToWeight) {
  for (double c : {1.0, 10.0, 100.0}) check_weighted(Algorithm::kNed, c);
}

TEST(Gradient, WeightedFlowsShareInProportionToWeight) { check_weighted(Algorithm::kGradient, 10); }

// n = 1..4: a path has at most kMaxPathLinks = 4 links.
void check_parking_lot(Algorithm a, double c_gbps) {
  for (int n = 1; n <= kMaxPathLinks; ++n) {
    SCOPED_TRACE(std::string(to_string(a)) + " parking lot n=" + std::to_string(n));
    Built<double> b = build(parking_lot(n, c_gbps), config(a, 1e-10));
    solve_converged(*b.engine);
    std::vector<double> want(n + 1, c_gbps * n / (n + 1));
    want[0] = c_gbps / (n + 1);
    expect_rates(b, want, 1e-6);
  }
}

TEST(Ned, ParkingLotGivesLongFlowOneOverNPlusOne) {
  check_parking_lot(Algorithm::kNed, 10);
  check_parking_lot(Algorithm::kNed, 100);
}

TEST(Gradient, ParkingLotGivesLongFlowOneOverNPlusOne) {
  check_parking_lot(Algorithm::kGradient, 10);
}

// ---- One iteration, by the equations ----

// What one iteration must do, from the paper with the test's own arithmetic:
// eq. 3, x_s = U'^-1(P_s) = (w_s / P_s)^(1/α); then for each link the load
// y_l = Σ x_s, G_l = y_l - c_l and H_l = Σ -dx_s/dP = Σ x_s / (α P_s), and
// eq. 4, p_l <- max(0, p_l + γ G_l / H_l) for NED, or
// p_l <- max(0, p_l + step G_l) for Gradient. Links without flows keep their
// price. The instances keep every path price above the flow's rate floor,
// so no cap is involved (caps are tested separately).
struct OneStep {
  std::vector<double> x;
  std::vector<double> price;
  double max_residual = 0;
  double max_util = 0;
  int clamped = 0;
};

OneStep one_step(const Problem& pb, const std::vector<double>& p, const EngineConfig& cfg) {
  OneStep r;
  const std::vector<double> P = oracle::path_prices(pb, p);
  std::vector<double> H(pb.capacity.size(), 0);
  for (std::size_t s = 0; s < pb.flows.size(); ++s) {
    const double w = pb.flows[s].weight;
    const double floor = w * std::pow(pb.effective_cap(s), -cfg.alpha);  // U'(cap)
    EXPECT_GT(P[s], floor) << "test premise: flow " << s << " is not at its cap";
    const double x = std::pow(w / P[s], 1 / cfg.alpha);
    r.x.push_back(x);
    for (LinkId l : pb.flows[s].links) H[l] += x / (cfg.alpha * P[s]);
  }
  const std::vector<double> y = oracle::link_loads(pb, r.x);
  r.price = p;
  for (std::size_t l = 0; l < pb.capacity.size(); ++l) {
    if (H[l] == 0) continue;
    const double c = pb.capacity[l];
    const double g = y[l] - c;
    r.max_residual = std::max(r.max_residual, (p[l] > 0 ? std::abs(g) : std::max(g, 0.0)) / c);
    r.max_util = std::max(r.max_util, y[l] / c);
    const double next = cfg.algorithm == Algorithm::kNed ? p[l] + cfg.gamma * g / H[l]
                                                         : p[l] + cfg.gradient_step * g;
    r.clamped += next < 0;
    r.price[l] = std::max(next, 0.0);
  }
  return r;
}

// Runs one iteration from random prices on random instances and compares
// with one_step(); returns how many link prices the max(0, .) clamped.
int check_one_step(Algorithm a, double alpha, double min_price, double max_price) {
  int clamped = 0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("alpha=" + std::to_string(alpha) + " seed " + std::to_string(seed));
    RandomProblemSpec spec;
    spec.min_capacity = 10;
    spec.min_weight = 0.1;
    spec.max_weight = 1;
    Problem pb = oracle::random_problem(seed, spec);
    EngineConfig cfg = config(a, 1e-4);
    cfg.alpha = alpha;
    cfg.gamma = 0.3;
    cfg.gradient_step = 0.01;
    Built<double> b = build(pb, cfg);
    Rng rng(seed * 1009);
    std::vector<double> p;
    for (std::size_t l = 0; l < pb.capacity.size(); ++l) {
      p.push_back(rng.log_uniform(min_price, max_price));
      b.engine->set_price(static_cast<LinkId>(l), p.back());
    }
    const OneStep want = one_step(pb, p, cfg);
    clamped += want.clamped;
    b.engine->iterate();
    const std::vector<double> x = raw_gbps(b);
    for (std::size_t s = 0; s < x.size(); ++s) {
      EXPECT_NEAR(x[s], want.x[s], 1e-12 * want.x[s]) << "flow " << s;
    }
    for (std::size_t l = 0; l < p.size(); ++l) {
      const double got = b.engine->price(static_cast<LinkId>(l));
      EXPECT_NEAR(got, want.price[l], 1e-12 * p[l]) << "link " << l;
    }
    EXPECT_NEAR(b.engine->stats().max_residual, want.max_residual, 1e-12 * want.max_residual);
    EXPECT_NEAR(b.engine->stats().max_raw_utilization, want.max_util, 1e-12 * want.max_util);
    EXPECT_EQ(b.engine->iterations(), 1u);
  }
  return clamped;
}

TEST(Ned, OneIterationFollowsEquationsThreeAndFour) {
  // Weights <= 1 and capacities >= 10 keep rate floors (U'(cap)) below the
  // smallest path price drawn here.
  int clamped = 0;
  clamped += check_one_step(Algorithm::kNed, 1.0, 0.2, 5);
  clamped += check_one_step(Algorithm::kNed, 2.0, 0.2, 5);
  clamped += check_one_step(Algorithm::kNed, 0.5, 0.5, 5);
  // The projection onto p >= 0 was exercised, not just the Newton step.
  EXPECT_GT(clamped, 20);
}

TEST(Gradient, OneIterationTakesAGradientStep) {
  int clamped = 0;
  clamped += check_one_step(Algorithm::kGradient, 1.0, 0.05, 1);
  clamped += check_one_step(Algorithm::kGradient, 2.0, 0.2, 5);
  EXPECT_GT(clamped, 10);
}

// ---- Rate caps (FlowSpec::max_bps) ----

void check_caps(Algorithm a, double c_gbps, const std::vector<double>& w,
                const std::vector<double>& caps) {
  SCOPED_TRACE(to_string(a));
  Built<double> b = build(single_link(c_gbps, w, caps), config(a, 1e-10));
  solve_converged(*b.engine);
  std::vector<double> inf_caps;
  for (std::size_t i = 0; i < w.size(); ++i) {
    inf_caps.push_back(i < caps.size() && caps[i] > 0 ? caps[i] : kInf);
  }
  expect_rates(b, oracle::single_link_optimum(c_gbps, w, inf_caps), 1e-6);
}

TEST(Ned, CappedFlowGetsItsCapAndOthersShareTheRest) {
  // 10 Gbit/s, four flows, one capped at 1 Gbit/s: 1, then 3 each.
  Built<double> b = build(single_link(10, {1, 1, 1, 1}, {1}), config(Algorithm::kNed, 1e-10));
  solve_converged(*b.engine);
  expect_rates(b, {1, 3, 3, 3}, 1e-7);
}

TEST(Ned, CapAboveFairShareChangesNothing) {
  Built<double> b = build(single_link(10, {1, 1, 1, 1}, {4}), config(Algorithm::kNed, 1e-10));
  solve_converged(*b.engine);
  expect_rates(b, {2.5, 2.5, 2.5, 2.5}, 1e-7);
}

TEST(Ned, CapsCombineWithWeights) {
  // Two caps below fair share: 1 and 2, the other two share 7.
  check_caps(Algorithm::kNed, 10, {1, 1, 1, 1}, {1, 2});
  // Weights 1, 1, 2 with the heavy flow capped at 3: 3.5, 3.5, 3.
  Built<double> b = build(single_link(10, {1, 1, 2}, {0, 0, 3}), config(Algorithm::kNed, 1e-10));
  solve_converged(*b.engine);
  expect_rates(b, {3.5, 3.5, 3}, 1e-7);
}

TEST(Ned, CapAboveLinkCapacityIsTheLinkCapacity) {
  Built<double> b = build(single_link(10, {1}, {100}), config(Algorithm::kNed, 1e-10));
  solve_converged(*b.engine);
  expect_rates(b, {10}, 1e-9);
}

TEST(Ned, CappedLongFlowInParkingLotLeavesTheRestToShortFlows) {
  Problem pb = parking_lot(3, 10);
  pb.flows[0].cap = 1;
  Built<double> b = build(pb, config(Algorithm::kNed, 1e-10));
  solve_converged(*b.engine);
  expect_rates(b, {1, 9, 9, 9}, 1e-7);
}

TEST(Ned, RandomCapsOnOneLinkMatchWaterFilling) {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    const double c = rng.uniform(1, 100);
    std::vector<double> w;
    std::vector<double> caps;
    const auto n = static_cast<int>(2 + rng.below(20));
    for (int i = 0; i < n; ++i) {
      w.push_back(rng.log_uniform(0.1, 10));
      caps.push_back(rng.chance(0.4) ? rng.log_uniform(0.01, 2 * c / n) : 0);
    }
    check_caps(Algorithm::kNed, c, w, caps);
  }
}

TEST(Gradient, CappedFlowGetsItsCapAndOthersShareTheRest) {
  check_caps(Algorithm::kGradient, 10, {1, 1, 1, 1}, {1});
  check_caps(Algorithm::kGradient, 10, {1, 1, 2}, {0, 0, 3});
}

// ---- α-fair utilities ----

// In a parking lot every link carries the long flow and one short flow, so by
// symmetry all n links have the same price p: x_long = (1/(n p))^(1/α),
// x_short = (1/p)^(1/α), hence x_long = c / (1 + n^(1/α)).
void check_alpha_parking_lot(double alpha, int n, double c) {
  SCOPED_TRACE("alpha=" + std::to_string(alpha) + " n=" + std::to_string(n));
  EngineConfig cfg = config(Algorithm::kNed, 1e-10);
  cfg.alpha = alpha;
  Built<double> b = build(parking_lot(n, c), cfg);
  solve_converged(*b.engine);
  const double x_long = c / (1 + std::pow(n, 1 / alpha));
  std::vector<double> want(n + 1, c - x_long);
  want[0] = x_long;
  expect_rates(b, want, 1e-6);
}

TEST(Ned, AlphaFairParkingLotMatchesClosedForm) {
  for (double alpha : {0.5, 2.0, 4.0, 8.0}) {
    for (int n = 1; n <= 4; ++n) check_alpha_parking_lot(alpha, n, 10);
  }
}

TEST(Ned, AlphaTwoParkingLotGivesLongFlowCOverOnePlusSqrtN) {
  // The α = 2 case spelled out: n = 4 gives c / 3 to the long flow.
  EngineConfig cfg = config(Algorithm::kNed, 1e-10);
  cfg.alpha = 2;
  Built<double> b = build(parking_lot(4, 12), cfg);
  solve_converged(*b.engine);
  expect_rates(b, {4, 8, 8, 8, 8}, 1e-6);
}

TEST(Ned, LargeAlphaApproachesMaxMinFairness) {
  // Link 0 (10 Gbit/s): flows 0, 1, 2. Link 1 (4 Gbit/s): flows 2, 3. Link 2
  // (10 Gbit/s): flows 1, 4. Max-min by progressive filling: 2, 2 on link 1,
  // then 4, 4 on link 0, then 6 for flow 4.
  Problem pb;
  pb.capacity = {10, 4, 10};
  auto add = [&](std::vector<LinkId> links) {
    RefFlow f;
    f.links = std::move(links);
    pb.flows.push_back(f);
  };
  add({0});
  add({0, 2});
  add({0, 1});
  add({1});
  add({2});
  const std::vector<double> mm = oracle::max_min_rates(pb);
  ASSERT_EQ(mm, (std::vector<double>{4, 4, 2, 2, 6}));

  double prev_err = kInf;
  for (double alpha : {1.0, 2.0, 4.0, 8.0}) {
    SCOPED_TRACE("alpha=" + std::to_string(alpha));
    EngineConfig cfg = config(Algorithm::kNed, 1e-10);
    cfg.alpha = alpha;
    Built<double> b = build(pb, cfg);
    solve_converged(*b.engine);
    std::vector<double> x = rates_gbps(b);
    double err = 0;
    for (std::size_t s = 0; s < x.size(); ++s) err = std::max(err, std::abs(x[s] - mm[s]) / mm[s]);
    // Moving towards max-min as α grows, and within 10% of it at α = 8.
    EXPECT_LT(err, prev_err);
    prev_err = err;
    if (alpha == 8.0) {
      EXPECT_LT(err, 0.10);
    }
  }
  // The parking lot's max-min answer is c/2 for everyone; α = 8 is within 5%.
  Problem lot = parking_lot(2, 10);
  EXPECT_EQ(oracle::max_min_rates(lot), (std::vector<double>{5, 5, 5}));
  EngineConfig cfg = config(Algorithm::kNed, 1e-10);
  cfg.alpha = 8;
  Built<double> b = build(lot, cfg);
  solve_converged(*b.engine);
  for (double x : rates_gbps(b)) EXPECT_NEAR(x, 5, 0.05 * 5);
}

// ---- Optimality on random topologies ----

// KKT conditions of max Σ w log x s.t. Ax <= c, x <= cap, checked from the
// engine's raw rates and prices with the test's own arithmetic:
//   primal feasibility: Σ_{s∋l} x_s <= c_l (1 + tol);
//   complementary slackness: a link with a positive price is saturated;
//   stationarity: x_s = min(cap_s, w_s / Σ_{l∈s} p_l).
void expect_kkt(const Problem& pb, const Built<double>& b, double tol) {
  const std::vector<double> x = raw_gbps(b);
  const std::vector<double> p = prices(*b.engine);
  const std::vector<double> y = oracle::link_loads(pb, x);
  const std::vector<double> P = oracle::path_prices(pb, p);
  for (std::size_t l = 0; l < pb.capacity.size(); ++l) {
    EXPECT_GE(p[l], 0) << "link " << l;
    if (y[l] == 0) continue;
    EXPECT_LE(y[l], pb.capacity[l] * (1 + tol)) << "link " << l << " over capacity";
    if (p[l] > 0) {
      EXPECT_NEAR(y[l], pb.capacity[l], tol * pb.capacity[l])
          << "link " << l << " has price " << p[l] << " but is not saturated";
    }
  }
  for (std::size_t s = 0; s < pb.flows.size(); ++s) {
    const double want = oracle::best_response(pb.flows[s].weight, P[s], pb.effective_cap(s));
    EXPECT_NEAR(x[s], want, 10 * tol * want) << "flow " << s << " is not on its demand curve";
  }
}

TEST(Ned, RandomTopologiesSatisfyKktConditions) {
  // Tolerance: the engine stops at a KKT residual of 1e-9 (|Σx - c| / c on
  // priced links); the checks allow 1e-8 for rounding and for raw rates being
  // computed from the prices one update before the final ones.
  constexpr double kTol = 1e-8;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RandomProblemSpec spec;
    spec.capped_fraction = seed % 2 == 0 ? 0.3 : 0;
    Problem pb = oracle::random_problem(seed, spec);
    Built<double> b = build(pb, config(Algorithm::kNed, 1e-9));
    solve_converged(*b.engine, 20000);
    expect_kkt(pb, b, kTol);
  }
}

TEST(Ned, RandomTopologiesReachTheDualBound) {
  // Weak duality: for any prices p >= 0, the dual D(p) bounds the optimal
  // utility from above, and the normalized rates are feasible, so their
  // utility bounds it from below. Converged, the gap must be tiny:
  // relative to Σ w (the utility of a 1/e relative change in every rate),
  // below 1e-6.
  for (std::uint64_t seed = 100; seed < 140; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RandomProblemSpec spec;
    spec.capped_fraction = seed % 2 == 0 ? 0.3 : 0;
    Problem pb = oracle::random_problem(seed, spec);
    Built<double> b = build(pb, config(Algorithm::kNed, 1e-9));
    solve_converged(*b.engine, 20000);
    const std::vector<double> xn = rates_gbps(b);
    // Feasibility of what endpoints are told, by our own sums.
    const std::vector<double> y = oracle::link_loads(pb, xn);
    for (std::size_t l = 0; l < y.size(); ++l) EXPECT_LE(y[l], pb.capacity[l] * (1 + 1e-12));
    double wsum = 0;
    for (const auto& f : pb.flows) wsum += f.weight;
    const double primal = oracle::log_utility(pb, xn);
    // A link without flows keeps whatever price it had (1 here); its optimal
    // price is 0, and any p >= 0 gives a valid bound, so use 0 there.
    std::vector<double> p = prices(*b.engine);
    const std::vector<double> ones(pb.flows.size(), 1.0);
    const std::vector<double> used = oracle::link_loads(pb, ones);
    for (std::size_t l = 0; l < p.size(); ++l) {
      if (used[l] == 0) p[l] = 0;
    }
    const double dual = oracle::dual_bound(pb, p);
    EXPECT_GE(dual - primal, -1e-9 * wsum);  // sanity of the oracle itself
    EXPECT_LE(dual - primal, 1e-6 * wsum) << "primal " << primal << " dual " << dual;
  }
}

TEST(Ned, RandomTopologiesMatchNaiveReferenceSolver) {
  // The reference solver (coordinate descent on the dual, oracles.h) shares
  // nothing with the engine. Both stop within 1e-10 of feasibility and
  // saturation; rates must then agree to 1e-6 relative and total utility to
  // 1e-7 of Σ w.
  for (std::uint64_t seed = 200; seed < 215; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RandomProblemSpec spec;
    spec.max_links = 25;
    spec.max_flows = 80;
    spec.capped_fraction = seed % 3 == 0 ? 0.3 : 0;
    Problem pb = oracle::random_problem(seed, spec);
    oracle::Reference ref = oracle::reference_solve(pb, 1e-10, 200000);
    ASSERT_TRUE(ref.converged) << "reference solver did not converge";
    Built<double> b = build(pb, config(Algorithm::kNed, 1e-10));
    solve_converged(*b.engine, 20000);
    const std::vector<double> x = raw_gbps(b);
    double wsum = 0;
    for (std::size_t s = 0; s < x.size(); ++s) {
      EXPECT_NEAR(x[s], ref.rate[s], 1e-6 * ref.rate[s]) << "flow " << s;
      wsum += pb.flows[s].weight;
    }
    EXPECT_NEAR(oracle::log_utility(pb, rates_gbps(b)), oracle::log_utility(pb, ref.rate),
                1e-7 * wsum);
  }
}

TEST(Gradient, RandomTopologySatisfiesKktConditions) {
  // Gradient needs a step matched to the instance: stable when
  // step * Σ_{s∋l} x_s / P_s < 2 on every link. 1e-3 suits these prices.
  RandomProblemSpec spec;
  spec.max_links = 15;
  spec.max_flows = 40;
  spec.min_capacity = 5;
  spec.max_capacity = 20;
  for (std::uint64_t seed = 300; seed < 303; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Problem pb = oracle::random_problem(seed, spec);
    EngineConfig cfg = config(Algorithm::kGradient, 1e-8);
    cfg.gradient_step = 1e-3;
    Built<double> b = build(pb, cfg);
    solve_converged(*b.engine);
    expect_kkt(pb, b, 1e-7);
  }
}

// ---- Normalizers (§3, eq. 5-6) ----

// What F-NORM and U-NORM must output for given raw rates, computed here:
// F-NORM divides each flow by the largest load ratio on its path, U-NORM by
// the largest load ratio anywhere; neither exceeds the flow's cap.
std::vector<double> expected_fnorm(const Problem& pb, const std::vector<double>& x) {
  std::vector<double> y = oracle::link_loads(pb, x);
  std::vector<double> out;
  for (std::size_t s = 0; s < x.size(); ++s) {
    double m = 0;
    for (LinkId l : pb.flows[s].links) m = std::max(m, y[l] / pb.capacity[l]);
    out.push_back(std::min(x[s] / m, pb.effective_cap(s)));
  }
  return out;
}

std::vector<double> expected_unorm(const Problem& pb, const std::vector<double>& x) {
  std::vector<double> y = oracle::link_loads(pb, x);
  double r = 0;
  for (std::size_t l = 0; l < y.size(); ++l) r = std::max(r, y[l] / pb.capacity[l]);
  std::vector<double> out;
  for (std::size_t s = 0; s < x.size(); ++s) out.push_back(std::min(x[s] / r, pb.effective_cap(s)));
  return out;
}

struct NormalizerRun {
  std::vector<double> rates;
  std::vector<double> raw;
  std::vector<double> alloc;  // Gbit/s per link, from link_allocation_bps()
};

// Given arbitrary prices, one iteration, with the given normalizer.
NormalizerRun run_at_prices(const Problem& pb, const std::vector<double>& p, Normalizer n) {
  Built<double> b = build(pb, config(Algorithm::kNed, 1e-4, n));
  for (std::size_t l = 0; l < p.size(); ++l) b.engine->set_price(static_cast<LinkId>(l), p[l]);
  b.engine->iterate();
  NormalizerRun r{rates_gbps(b), raw_gbps(b), {}};
  for (double a : b.engine->link_allocation_bps()) r.alloc.push_back(a / kBpsPerGbps);
  return r;
}

void expect_within_capacity_and_caps(const Problem& pb, const NormalizerRun& r) {
  for (std::size_t l = 0; l < pb.capacity.size(); ++l) {
    EXPECT_LE(r.alloc[l], pb.capacity[l] * (1 + 1e-9)) << "link " << l;
  }
  // link_allocation_bps() is the sum of the normalized rates.
  const std::vector<double> y = oracle::link_loads(pb, r.rates);
  for (std::size_t l = 0; l < y.size(); ++l) EXPECT_NEAR(r.alloc[l], y[l], 1e-12 * pb.capacity[l]);
  for (std::size_t s = 0; s < pb.flows.size(); ++s) {
    EXPECT_GT(r.rates[s], 0) << "flow " << s;
    EXPECT_LE(r.rates[s], pb.effective_cap(s) * (1 + 1e-12)) << "flow " << s;
  }
}

TEST(FNorm, NoLinkExceedsCapacityAtArbitraryPrices) {
  int over_allocated = 0;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RandomProblemSpec spec;
    spec.capped_fraction = 0.3;
    Problem pb = oracle::random_problem(seed, spec);
    Rng rng(seed * 7919);
    std::vector<double> p;
    for (std::size_t l = 0; l < pb.capacity.size(); ++l) {
      p.push_back(rng.chance(0.1) ? 0.0 : rng.log_uniform(1e-3, 1e2));
    }
    NormalizerRun f = run_at_prices(pb, p, Normalizer::kFNorm);
    expect_within_capacity_and_caps(pb, f);
    const std::vector<double> want = expected_fnorm(pb, f.raw);
    for (std::size_t s = 0; s < want.size(); ++s) {
      EXPECT_NEAR(f.rates[s], want[s], 1e-12 * want[s]) << "flow " << s;
    }
    const std::vector<double> y = oracle::link_loads(pb, f.raw);
    for (std::size_t l = 0; l < y.size(); ++l) over_allocated += y[l] > 1.01 * pb.capacity[l];
  }
  // The property is only meaningful if the raw rates over-allocated links.
  EXPECT_GT(over_allocated, 100);
}

TEST(UNorm, NoLinkExceedsCapacityAndMostCongestedLinkIsFull) {
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RandomProblemSpec spec;
    spec.capped_fraction = seed % 2 == 0 ? 0.3 : 0;
    Problem pb = oracle::random_problem(seed, spec);
    Rng rng(seed * 104729);
    std::vector<double> p;
    for (std::size_t l = 0; l < pb.capacity.size(); ++l) p.push_back(rng.log_uniform(1e-3, 1e2));
    NormalizerRun u = run_at_prices(pb, p, Normalizer::kUNorm);
    expect_within_capacity_and_caps(pb, u);
    const std::vector<double> want = expected_unorm(pb, u.raw);
    for (std::size_t s = 0; s < want.size(); ++s) {
      EXPECT_NEAR(u.rates[s], want[s], 1e-12 * want[s]) << "flow " << s;
    }
    if (spec.capped_fraction == 0) {
      double top = 0;
      for (std::size_t l = 0; l < pb.capacity.size(); ++l)
        top = std::max(top, u.alloc[l] / pb.capacity[l]);
      EXPECT_NEAR(top, 1.0, 1e-12);
    }
  }
}

TEST(FNorm, GivesEveryFlowAtLeastItsUNormRate) {
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RandomProblemSpec spec;
    spec.capped_fraction = 0.2;
    Problem pb = oracle::random_problem(seed, spec);
    Rng rng(seed * 31337);
    std::vector<double> p;
    for (std::size_t l = 0; l < pb.capacity.size(); ++l) p.push_back(rng.log_uniform(1e-3, 1e2));
    NormalizerRun f = run_at_prices(pb, p, Normalizer::kFNorm);
    NormalizerRun u = run_at_prices(pb, p, Normalizer::kUNorm);
    double total_f = 0;
    double total_u = 0;
    for (std::size_t s = 0; s < pb.flows.size(); ++s) {
      EXPECT_EQ(f.raw[s], u.raw[s]);
      EXPECT_GE(f.rates[s], u.rates[s] * (1 - 1e-12)) << "flow " << s;
      total_f += f.rates[s];
      total_u += u.rates[s];
    }
    EXPECT_GE(total_f, total_u);
  }
}

TEST(FNorm, KeepsLinksWithinCapacityDuringTheFirstIterationsFromABadStart) {
  // A fresh engine starts every price at 1 (Algorithm 1): on these instances
  // the first raw rates over-allocate. After each of the first three
  // iterations, F-NORM and U-NORM outputs must still fit, and F-NORM's total
  // must be at least U-NORM's.
  int over_allocated_iterations = 0;
  for (std::uint64_t seed = 400; seed < 430; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RandomProblemSpec spec;
    spec.capped_fraction = 0.25;
    spec.min_weight = 1;
    spec.max_weight = 100;  // heavy flows: big first rates at price 1
    Problem pb = oracle::random_problem(seed, spec);
    Built<double> f = build(pb, config(Algorithm::kNed, 1e-4, Normalizer::kFNorm));
    Built<double> u = build(pb, config(Algorithm::kNed, 1e-4, Normalizer::kUNorm));
    for (int it = 1; it <= 3; ++it) {
      f.engine->iterate();
      u.engine->iterate();
      over_allocated_iterations += f.engine->stats().max_raw_utilization > 1.01;
      NormalizerRun rf{rates_gbps(f), raw_gbps(f), {}};
      NormalizerRun ru{rates_gbps(u), raw_gbps(u), {}};
      for (double a : f.engine->link_allocation_bps()) rf.alloc.push_back(a / kBpsPerGbps);
      for (double a : u.engine->link_allocation_bps()) ru.alloc.push_back(a / kBpsPerGbps);
      expect_within_capacity_and_caps(pb, rf);
      expect_within_capacity_and_caps(pb, ru);
      double tf = 0;
      double tu = 0;
      for (std::size_t s = 0; s < pb.flows.size(); ++s) {
        tf += rf.rates[s];
        tu += ru.rates[s];
      }
      EXPECT_GE(tf, tu) << "iteration " << it;
    }
  }
  EXPECT_GT(over_allocated_iterations, 45);
}

TEST(Normalizer, NoneReportsRawRates) {
  Problem pb = oracle::random_problem(5);
  Built<double> b = build(pb, config(Algorithm::kNed, 1e-4, Normalizer::kNone));
  b.engine->iterate();
  b.engine->iterate();
  EXPECT_EQ(rates_gbps(b), raw_gbps(b));
}

// ---- Convergence speed: NED vs Gradient ----

struct IterationCounts {
  std::uint64_t ned = 0;
  std::uint64_t gradient = 0;  // with the best step from a sweep
  double gradient_step = 0;
};

// NED with the default γ against Gradient with every step of a sweep, keeping
// Gradient's best: the comparison is as kind to Gradient as we can make it.
// A Gradient run is cut off once it needs more iterations than the best so
// far (or kGradientLimit), which changes no result but saves time.
constexpr std::uint64_t kGradientLimit = 20000;

IterationCounts count_iterations(const Problem& pb, double tolerance) {
  IterationCounts c;
  Built<double> ned = build(pb, config(Algorithm::kNed, tolerance));
  c.ned = solve_converged(*ned.engine, 100000);
  c.gradient = kGradientLimit + 1;  // "did not converge within the limit"
  for (double step : {1e-4, 3e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1, 0.2, 0.5}) {
    EngineConfig cfg = config(Algorithm::kGradient, tolerance);
    cfg.gradient_step = step;
    Built<double> g = build(pb, cfg);
    const std::uint64_t n = g.engine->solve(std::min(c.gradient, kGradientLimit));
    if (g.engine->stats().converged && n < c.gradient) {
      c.gradient = n;
      c.gradient_step = step;
    }
  }
  return c;
}

void report(const char* name, const IterationCounts& c) {
  std::cout << "[ NED vs Gradient ] " << name << ": NED " << c.ned << " iterations, Gradient "
            << c.gradient << " iterations (best step " << c.gradient_step << ")\n";
  ::testing::Test::RecordProperty(std::string(name) + "_ned_iterations", std::to_string(c.ned));
  ::testing::Test::RecordProperty(std::string(name) + "_gradient_iterations",
                                  std::to_string(c.gradient));
}

TEST(Ned, ConvergesInFarFewerIterationsThanGradientOnParkingLot) {
  // A parking lot with unequal links (10, 25, 40 Gbit/s) and a long flow of
  // weight 2. (With equal links every price moves alike from 1, and some
  // Gradient step of the sweep lands on the optimum in one lucky step.)
  Problem pb = parking_lot(3, 10);
  pb.capacity = {10, 25, 40};
  pb.flows[0].weight = 2;
  IterationCounts c = count_iterations(pb, 1e-6);
  report("parking_lot_3", c);
  EXPECT_LT(c.ned * 5, c.gradient);
}

TEST(Ned, ConvergesInFarFewerIterationsThanGradientOnRandomTopology) {
  // 12 links, 22 flows.
  RandomProblemSpec spec;
  spec.max_links = 15;
  spec.max_flows = 40;
  IterationCounts c = count_iterations(oracle::random_problem(12, spec), 1e-6);
  report("random_seed12", c);
  EXPECT_LT(c.ned * 5, c.gradient);
}

// ---- Online operation ----

TEST(Online, NewFlowStartsFromPersistedPrices) {
  // Given two flows solved on a 10 Gbit/s link (price 2 / 10 = 0.2),
  Engine e({10e9}, 1, config(Algorithm::kNed, 1e-10));
  FlowSpec f;
  f.path.push(0);
  const FlowId a = e.add_flow(f);
  const FlowId b = e.add_flow(f);
  solve_converged(e);
  ASSERT_NEAR(e.price(0), 0.2, 1e-9);
  // When a third flow arrives,
  const FlowId c = e.add_flow(f);
  // Expect: prices are untouched, the newcomer has no rate until an
  // iteration sees it, and its first rate is w / p at the old price (5
  // Gbit/s), not what a reset price of 1 would give (1 Gbit/s).
  EXPECT_NEAR(e.price(0), 0.2, 1e-9);
  EXPECT_EQ(e.rate_bps(c), 0);
  EXPECT_EQ(e.raw_rate_bps(c), 0);
  e.iterate();
  EXPECT_NEAR(e.raw_rate_bps(c), 5e9, 1e-6 * 5e9);
  // The F-NORM'd rates still fit the link while the price moves.
  EXPECT_LE(e.link_allocation_bps()[0], 10e9 * (1 + 1e-12));
  solve_converged(e);
  for (FlowId id : {a, b, c}) EXPECT_NEAR(e.rate_bps(id), 10e9 / 3, 1e-7 * 10e9 / 3);
}

// ---- A newcomer's rate before the next iteration (estimate_rate_bps) ----

TEST(Estimate, IsWhatTheNextIterationGivesTheNewcomerOnOneLink) {
  // Given two flows solved on a 10 Gbit/s link (price 0.2, load ratio 1),
  Engine e({10e9}, 1, config(Algorithm::kNed, 1e-10));
  FlowSpec f;
  f.path.push(0);
  e.add_flow(f);
  e.add_flow(f);
  solve_converged(e);
  // When a third arrives, expect its guess to be w / p = 5 Gbit/s scaled by
  // the link's load with it, (10 + 5) / 10: 10/3 Gbit/s, which is also what
  // the next iteration gives it at the unmoved price.
  const FlowId c = e.add_flow(f);
  EXPECT_NEAR(e.estimate_rate_bps(c), 10e9 / 3, 1e-6 * 10e9);
  e.iterate();
  EXPECT_NEAR(e.rate_bps(c), 10e9 / 3, 1e-6 * 10e9);
}

TEST(Estimate, ALoneFlowIsGivenItsSmallestLink) {
  // Given an idle engine (prices at their start, no load), expect F-NORM's
  // answer for a lone flow, its smallest link, and with a cap, the cap.
  Engine e({10e9, 4e9, 25e9}, 1, config(Algorithm::kNed, 1e-10));
  FlowSpec f;
  f.path.push(0);
  f.path.push(1);
  f.path.push(2);
  const FlowId a = e.add_flow(f);
  EXPECT_NEAR(e.estimate_rate_bps(a), 4e9, 1e-9 * 4e9);
  f.max_bps = 1e9;
  Engine g({10e9, 4e9, 25e9}, 1, config(Algorithm::kNed, 1e-10));
  const FlowId b = g.add_flow(f);
  EXPECT_NEAR(g.estimate_rate_bps(b), 1e9, 1e-9 * 1e9);
  // Without a normalizer the guess is the raw rate at the price (1 per
  // Gbit/s on three links: 1/3 Gbit/s), as the iteration would report.
  Engine raw({10e9, 4e9, 25e9}, 1, config(Algorithm::kNed, 1e-10, Normalizer::kNone));
  f.max_bps = 0;
  const FlowId r = raw.add_flow(f);
  EXPECT_NEAR(raw.estimate_rate_bps(r), 1e9 / 3, 1e-9 * 1e9);
  raw.iterate();
  EXPECT_NEAR(raw.rate_bps(r), 1e9 / 3, 1e-9 * 1e9);
}

template <typename Real>
void check_estimates_on_random_topologies(double tolerance, double rel) {
  // Given random topologies solved to a tight tolerance (some flows capped),
  // when a random newcomer arrives, expect its guess to be what the next
  // iteration gives it: within `rel`, since prices settled to `tolerance`
  // barely move in one step. With F-NORM and U-NORM alike.
  for (Normalizer n : {Normalizer::kFNorm, Normalizer::kUNorm}) {
    for (std::uint64_t seed = 300; seed < 330; ++seed) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " " + to_string(n));
      RandomProblemSpec spec;
      spec.capped_fraction = seed % 2 == 0 ? 0.3 : 0;
      Problem pb = oracle::random_problem(seed, spec);
      Built<Real> b = build<Real>(pb, config(Algorithm::kNed, tolerance, n));
      solve_converged(*b.engine, 20000);
      Problem one = oracle::random_problem(seed + 1000, spec);
      FlowSpec f = one.spec(0);
      for (int j = 0; j < f.path.size; ++j) {
        f.path.links[j] = static_cast<LinkId>(f.path.links[j] % pb.capacity.size());
      }
      if (b.engine->check_flow(f) != FlowError::kOk) continue;  // a repeated link
      const FlowId id = b.engine->add_flow(f);
      const double guess = b.engine->estimate_rate_bps(id);
      ASSERT_TRUE(std::isfinite(guess));
      ASSERT_GT(guess, 0);
      b.engine->iterate();
      const double got = b.engine->rate_bps(id);
      EXPECT_NEAR(guess, got, rel * got) << "guess " << guess << " iteration " << got;
    }
  }
}

TEST(Estimate, IsTheNextIterationsRateOnRandomTopologiesDouble) {
  check_estimates_on_random_topologies<double>(1e-9, 1e-6);
}

TEST(Estimate, IsTheNextIterationsRateOnRandomTopologiesFloat) {
  check_estimates_on_random_topologies<float>(1e-5, 1e-3);
}

TEST(Estimate, AddsTheFloorToTheShareOfWhatFloorsLeave) {
  // Given eight flows settled on a 10 Gbit/s link (price 0.8, load ratio 1),
  Engine e({10e9}, 1, config(Algorithm::kNed, 1e-10));
  FlowSpec f;
  f.path.push(0);
  for (int i = 0; i < 8; ++i) e.add_flow(f);
  solve_converged(e);
  // When a newcomer capped at 2 Gbit/s arrives with a 1 Gbit/s floor (so 1
  // Gbit/s of cap above it, and the link 9 Gbit/s for the optimizer),
  f.max_bps = 2e9;
  const FlowId c = e.add_flow(f);
  ASSERT_TRUE(e.set_floor(c, 1e9));
  // Expect: its price is floored at U'(1) = 1 (0.8 would ask for more than
  // its cap), so x = 1 Gbit/s, scaled by (1 + 1/9) and the floor added:
  // 1 + 0.9 Gbit/s, within its 2 Gbit/s cap.
  EXPECT_NEAR(e.estimate_rate_bps(c), 1.9e9, 1e-6 * 1.9e9);
}

TEST(Online, RemovingAFlowAndResolvingGivesTheClosedFormForTheRest) {
  Problem pb = parking_lot(3, 10);
  Built<double> b = build(pb, config(Algorithm::kNed, 1e-10));
  solve_converged(*b.engine);
  expect_rates(b, {2.5, 7.5, 7.5, 7.5}, 1e-7);
  // Without the long flow the short flows own their links.
  b.engine->remove_flow(b.ids[0]);
  EXPECT_FALSE(b.engine->has_flow(b.ids[0]));
  EXPECT_EQ(b.engine->num_flows(), 3u);
  solve_converged(*b.engine);
  for (int i = 1; i <= 3; ++i) EXPECT_NEAR(b.engine->rate_bps(b.ids[i]), 10e9, 1e-7 * 10e9);
  // A new long flow brings back the parking lot answer.
  FlowSpec lng = pb.spec(0);
  const FlowId again = b.engine->add_flow(lng);
  solve_converged(*b.engine);
  EXPECT_NEAR(b.engine->rate_bps(again), 2.5e9, 1e-7 * 2.5e9);
  for (int i = 1; i <= 3; ++i) EXPECT_NEAR(b.engine->rate_bps(b.ids[i]), 7.5e9, 1e-7 * 7.5e9);
}

TEST(Online, FlowIdsStayValidAfterOtherFlowsAreRemoved) {
  // Given five flows with distinct weights on one link (ids name flows, and
  // removal moves the block's last flow into the freed slot),
  Engine e({12e9}, 1, config(Algorithm::kNed, 1e-10));
  const std::vector<double> w = {1, 2, 3, 4, 5};
  std::vector<FlowId> ids;
  for (double v : w) {
    FlowSpec f;
    f.path.push(0);
    f.weight = v;
    ids.push_back(e.add_flow(f));
  }
  solve_converged(e);
  // When flows 1 and 0 leave,
  e.remove_flow(ids[1]);
  e.remove_flow(ids[0]);
  solve_converged(e);
  // Expect: the remaining ids still name weights 3, 4, 5 (12 * w / 12).
  EXPECT_FALSE(e.has_flow(ids[0]));
  EXPECT_FALSE(e.has_flow(ids[1]));
  for (int i = 2; i < 5; ++i) {
    ASSERT_TRUE(e.has_flow(ids[i]));
    EXPECT_NEAR(e.rate_bps(ids[i]), w[i] * 1e9, 1e-7 * w[i] * 1e9) << "flow " << i;
  }
  // A newcomer may reuse a freed id but never a live one.
  FlowSpec f;
  f.path.push(0);
  f.weight = 6;
  const FlowId n = e.add_flow(f);
  for (int i = 2; i < 5; ++i) EXPECT_NE(n, ids[i]);
  solve_converged(e);
  // 12 Gbit/s over weights 3+4+5+6 = 18.
  EXPECT_NEAR(e.rate_bps(n), 12e9 * 6 / 18, 1e-7 * 4e9);
  EXPECT_NEAR(e.rate_bps(ids[4]), 12e9 * 5 / 18, 1e-7 * 4e9);
}

TEST(Online, RandomAddRemoveKeepsIdsConsistentWithAMapModel) {
  // 10^5 random adds and removes over 3x3 FlowBlocks, checked against a
  // std::map from id to flow. Every 1000 operations the engine iterates, and
  // every live id's raw rate must be w / P (P its path price before the
  // iteration, floored at w / cap), which pins each id to its own flow even
  // after swap-removals moved it inside a block.
  constexpr int kOps = 100000;
  constexpr std::uint32_t kSites = 5;
  constexpr LinkId kLinks = 24;
  EngineConfig cfg = config(Algorithm::kNed, 1e-6);
  cfg.blocks = 3;
  Rng rng(2024);
  std::vector<double> caps_bps;
  for (LinkId l = 0; l < kLinks; ++l) caps_bps.push_back(rng.uniform(1, 40) * 1e9);
  Engine e(caps_bps, kSites, cfg);
  std::map<FlowId, FlowSpec> model;
  std::vector<FlowId> live;  // same ids as model, for O(1) random choice
  FlowId max_id = 0;
  int checked_rates = 0;
  for (int op = 0; op < kOps; ++op) {
    const bool add = live.empty() || (live.size() < 400 && rng.chance(0.55));
    if (add) {
      FlowSpec f;
      const auto len = 1 + rng.below(4);
      while (f.path.size < len) {
        auto l = static_cast<LinkId>(rng.below(kLinks));
        if (std::find(f.path.begin(), f.path.end(), l) == f.path.end()) f.path.push(l);
      }
      f.weight = rng.log_uniform(0.1, 10);
      f.max_bps = rng.chance(0.2) ? rng.uniform(0.1, 10) * 1e9 : 0;
      f.src_site = static_cast<std::uint32_t>(rng.below(kSites));
      f.dst_site = static_cast<std::uint32_t>(rng.below(kSites));
      ASSERT_EQ(e.check_flow(f), FlowError::kOk);
      const FlowId id = e.add_flow(f);
      ASSERT_EQ(model.count(id), 0u) << "op " << op << ": id " << id << " handed out twice";
      model[id] = f;
      live.push_back(id);
      max_id = std::max(max_id, id);
    } else {
      const std::size_t k = rng.below(live.size());
      const FlowId id = live[k];
      e.remove_flow(id);
      model.erase(id);
      live[k] = live.back();
      live.pop_back();
      ASSERT_FALSE(e.has_flow(id)) << "op " << op;
    }
    ASSERT_EQ(e.num_flows(), model.size()) << "op " << op;
    if (op % 1000 == 999) {
      for (FlowId id = 0; id <= max_id; ++id) {
        ASSERT_EQ(e.has_flow(id), model.count(id) == 1) << "op " << op << " id " << id;
      }
      std::vector<double> p;
      for (LinkId l = 0; l < kLinks; ++l) p.push_back(e.price(l));
      e.iterate();
      for (const auto& [id, f] : model) {
        double P = 0;
        double cap = kInf;
        for (LinkId l : f.path) {
          P += p[l];
          cap = std::min(cap, caps_bps[l] / 1e9);
        }
        if (f.max_bps > 0) cap = std::min(cap, f.max_bps / 1e9);
        const double want = oracle::best_response(f.weight, P, cap) * 1e9;
        ASSERT_NEAR(e.raw_rate_bps(id), want, 1e-12 * want) << "op " << op << " id " << id;
        ++checked_rates;
      }
    }
  }
  EXPECT_GT(checked_rates, 10000);
}

// ---- Guards ----

TEST(Guards, ZeroPathPriceGivesTheSmallestLinkCapacity) {
  Problem pb;
  pb.capacity = {10, 2.5, 40};
  RefFlow f;
  f.links = {0, 1, 2};
  pb.flows.push_back(f);
  f.links = {2};
  f.weight = 1e-3;
  pb.flows.push_back(f);
  f.links = {0, 2};
  f.weight = 50;
  f.cap = 4;  // capped below its smallest link
  pb.flows.push_back(f);
  for (double alpha : {1.0, 2.0, 0.5}) {
    SCOPED_TRACE("alpha=" + std::to_string(alpha));
    EngineConfig cfg = config(Algorithm::kNed, 1e-4);
    cfg.alpha = alpha;
    Built<double> b = build(pb, cfg);
    for (LinkId l = 0; l < 3; ++l) b.engine->set_price(l, 0);
    b.engine->iterate();
    const std::vector<double> want = {2.5, 40, 4};
    for (std::size_t s = 0; s < 3; ++s) {
      const double raw = b.engine->raw_rate_bps(b.ids[s]);
      const double rate = b.engine->rate_bps(b.ids[s]);
      EXPECT_TRUE(std::isfinite(raw) && std::isfinite(rate)) << "flow " << s;
      EXPECT_NEAR(raw, want[s] * 1e9, 1e-9 * want[s] * 1e9) << "flow " << s;
      EXPECT_LE(rate, want[s] * 1e9 * (1 + 1e-12)) << "flow " << s;
      EXPECT_GT(rate, 0) << "flow " << s;
    }
  }
}

TEST(Guards, LinkWithoutFlowsKeepsItsPrice) {
  Engine e({10e9, 10e9, 10e9}, 1, config(Algorithm::kNed, 1e-10));
  e.set_price(2, 3.25);  // never carries a flow
  FlowSpec f;
  f.path.push(0);
  e.add_flow(f);
  f.path = {};
  f.path.push(1);
  const FlowId on1a = e.add_flow(f);
  f.weight = 3;
  const FlowId on1b = e.add_flow(f);
  solve_converged(e);
  EXPECT_EQ(e.price(2), 3.25);
  // Link 1 loses both its flows: its price stays where the optimum put it,
  // (1 + 3) / 10 per Gbit/s.
  const double p1 = e.price(1);
  EXPECT_NEAR(p1, 0.4, 1e-9);
  e.remove_flow(on1a);
  e.remove_flow(on1b);
  for (int i = 0; i < 10; ++i) e.iterate();
  EXPECT_EQ(e.price(1), p1);
  EXPECT_EQ(e.price(2), 3.25);
  EXPECT_EQ(e.link_allocation_bps()[1], 0);
}

// check_flow()'s contract: a flow it accepts can be added and iterated. A
// weight it accepts must therefore never turn rates or prices into NaN or
// infinity, however far outside a sensible range it is: it must either be
// rejected (kBadWeight) or be harmless. The odd flow shares link 0 with a
// normal flow, which shares link 1 with another, so poison would spread.
template <typename Real>
void check_accepted_weight_is_harmless(double weight) {
  SCOPED_TRACE(::testing::Message() << "weight " << weight);
  BasicEngine<Real> e({10e9, 10e9}, 1, EngineConfig{});
  FlowSpec odd;
  odd.path.push(0);
  odd.weight = weight;
  if (e.check_flow(odd) != FlowError::kOk) return;  // rejected: fine
  FlowSpec two;
  two.path.push(0);
  two.path.push(1);
  FlowSpec one;
  one.path.push(1);
  const std::vector<FlowId> ids = {e.add_flow(odd), e.add_flow(two), e.add_flow(one)};
  for (int it = 0; it < 20; ++it) {
    e.iterate();
    for (std::size_t k = 0; k < ids.size(); ++k) {
      ASSERT_TRUE(std::isfinite(e.raw_rate_bps(ids[k])) && std::isfinite(e.rate_bps(ids[k])))
          << "iteration " << it << ": flow " << k << " raw " << e.raw_rate_bps(ids[k]) << " rate "
          << e.rate_bps(ids[k]);
    }
    for (LinkId l = 0; l < 2; ++l) {
      ASSERT_TRUE(std::isfinite(e.price(l)))
          << "iteration " << it << ": link " << l << " price " << e.price(l);
    }
  }
}

TEST(Guards, AcceptedSubnormalWeightNeverYieldsNaN) {
  // 1e-310 is a positive finite double, so check_flow() accepts it. Its rate
  // floor U'(cap) = w / cap is subnormal, and 1 / P overflows once the path
  // price falls to that floor.
  check_accepted_weight_is_harmless<double>(1e-310);
  check_accepted_weight_is_harmless<double>(1e-320);
  // Tiny but normal weights are fine.
  check_accepted_weight_is_harmless<double>(1e-300);
  check_accepted_weight_is_harmless<double>(1e300);
}

TEST(FloatEngine, AcceptedWeightOutsideFloatRangeNeverYieldsNaN) {
  // check_flow() validates the double; the float engine stores
  // static_cast<float>(weight): 1e39 becomes +inf and 1e-46 becomes 0.
  check_accepted_weight_is_harmless<float>(1e39);
  check_accepted_weight_is_harmless<float>(1e-46);
  check_accepted_weight_is_harmless<float>(1e30);
  check_accepted_weight_is_harmless<float>(1e-30);
}

TEST(FloatEngine, CapacityOutsideFloatRangeIsRejected) {
  // The constructor promises std::invalid_argument for a capacity that is not
  // a positive finite number; in a float engine 1e50 bits/s (1e41 Gbit/s)
  // becomes +inf and 1e-40 bits/s becomes 0 internally.
  for (double c : {1e50, 1e-40}) {
    try {
      BasicEngine<float> e({c}, 1, EngineConfig{});
      const double stored = e.capacity_bps(0);
      EXPECT_TRUE(std::isfinite(stored) && stored > 0)
          << "capacity " << c << " bits/s accepted and stored as " << stored;
    } catch (const std::invalid_argument&) {
      // Rejected: fine.
    }
  }
}

template <typename Real>
void check_extremes(Algorithm a, Normalizer norm, double alpha, double rel_fit) {
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    SCOPED_TRACE(std::string(to_string(a)) + "/" + to_string(norm) +
                 " alpha=" + std::to_string(alpha) + " seed " + std::to_string(seed));
    RandomProblemSpec spec;
    spec.min_links = 5;
    spec.max_links = 15;
    spec.min_flows = 10;
    spec.max_flows = 40;
    spec.capped_fraction = 0.2;
    spec.min_cap = 1e-3;
    spec.max_cap = 1e3;
    spec.min_weight = 1e-6;
    spec.max_weight = 1e6;
    Problem pb = oracle::random_problem(seed, spec);
    Rng rng(seed + 77);
    for (double& c : pb.capacity) c = rng.log_uniform(1e-3, 1e3);  // 1e6..1e12 bits/s
    EngineConfig cfg = config(a, 1e-6, norm);
    cfg.alpha = alpha;
    Built<Real> b = build<Real>(pb, cfg);
    for (int it = 0; it < 300; ++it) {
      b.engine->iterate();
      if (it % 50 != 49) continue;
      const auto& st = b.engine->stats();
      ASSERT_TRUE(std::isfinite(st.max_residual) && std::isfinite(st.max_raw_utilization))
          << "iteration " << it;
      for (LinkId l = 0; l < pb.capacity.size(); ++l) {
        const double p = b.engine->price(l);
        ASSERT_TRUE(std::isfinite(p) && p >= 0)
            << "iteration " << it << " link " << l << " price " << p;
      }
      const std::vector<double> alloc = b.engine->link_allocation_bps();
      for (LinkId l = 0; l < pb.capacity.size(); ++l) {
        ASSERT_TRUE(std::isfinite(alloc[l])) << "link " << l;
        if (norm != Normalizer::kNone) {
          EXPECT_LE(alloc[l], pb.capacity[l] * 1e9 * (1 + rel_fit)) << "link " << l;
        }
      }
      for (std::size_t s = 0; s < pb.flows.size(); ++s) {
        const double raw = b.engine->raw_rate_bps(b.ids[s]);
        const double rate = b.engine->rate_bps(b.ids[s]);
        ASSERT_TRUE(std::isfinite(raw) && raw >= 0) << "flow " << s << " raw " << raw;
        ASSERT_TRUE(std::isfinite(rate) && rate >= 0) << "flow " << s << " rate " << rate;
        EXPECT_LE(rate, pb.effective_cap(s) * 1e9 * (1 + rel_fit)) << "flow " << s;
      }
    }
  }
}

TEST(Guards, ExtremeWeightsAndCapacitiesStayFiniteInDouble) {
  for (Algorithm a : {Algorithm::kNed, Algorithm::kGradient}) {
    for (Normalizer n : {Normalizer::kFNorm, Normalizer::kUNorm, Normalizer::kNone}) {
      check_extremes<double>(a, n, 1.0, 1e-9);
    }
    check_extremes<double>(a, Normalizer::kFNorm, 2.0, 1e-9);
  }
}

TEST(Guards, ExtremeWeightsAndCapacitiesStayFiniteInFloat) {
  // float: 24-bit mantissa, so fits are checked to 1e-5 relative.
  for (Algorithm a : {Algorithm::kNed, Algorithm::kGradient}) {
    for (Normalizer n : {Normalizer::kFNorm, Normalizer::kUNorm}) {
      check_extremes<float>(a, n, 1.0, 1e-5);
    }
    check_extremes<float>(a, Normalizer::kFNorm, 2.0, 1e-5);
  }
}

// ---- Input validation ----

TEST(CheckFlow, RejectsEachKindOfBadFlow) {
  Engine e({10e9, 10e9, 10e9, 10e9, 10e9, 10e9}, 3, EngineConfig{});
  auto with_path = [](std::vector<LinkId> links) {
    FlowSpec f;
    for (LinkId l : links) f.path.push(l);
    return f;
  };
  EXPECT_EQ(e.check_flow(with_path({0, 1, 2, 3})), FlowError::kOk);
  EXPECT_EQ(e.check_flow(FlowSpec{}), FlowError::kEmptyPath);
  FlowSpec five = with_path({0, 1, 2, 3});
  five.path.size = 5;
  EXPECT_EQ(e.check_flow(five), FlowError::kPathTooLong);
  EXPECT_EQ(e.check_flow(with_path({0, 6})), FlowError::kUnknownLink);
  EXPECT_EQ(e.check_flow(with_path({0xffffffffu})), FlowError::kUnknownLink);
  EXPECT_EQ(e.check_flow(with_path({1, 2, 1})), FlowError::kRepeatedLink);
  EXPECT_EQ(e.check_flow(with_path({3, 3})), FlowError::kRepeatedLink);
  for (double w : {0.0, -1.0, kNaN, kInf}) {
    FlowSpec f = with_path({0});
    f.weight = w;
    EXPECT_EQ(e.check_flow(f), FlowError::kBadWeight) << "weight " << w;
  }
  for (double m : {-1.0, -1e-300, kNaN, kInf}) {
    FlowSpec f = with_path({0});
    f.max_bps = m;
    EXPECT_EQ(e.check_flow(f), FlowError::kBadMaxRate) << "max_bps " << m;
  }
  FlowSpec capped = with_path({0});
  capped.max_bps = 1e9;
  EXPECT_EQ(e.check_flow(capped), FlowError::kOk);
  FlowSpec site = with_path({0});
  site.src_site = 3;
  EXPECT_EQ(e.check_flow(site), FlowError::kBadSite);
  site.src_site = 2;
  site.dst_site = 3;
  EXPECT_EQ(e.check_flow(site), FlowError::kBadSite);
  site.dst_site = 2;
  EXPECT_EQ(e.check_flow(site), FlowError::kOk);
  // Each error has its own message.
  EXPECT_STRNE(to_string(FlowError::kEmptyPath), to_string(FlowError::kUnknownLink));
  EXPECT_STREQ(to_string(FlowError::kOk), "ok");
}

TEST(CheckFlow, RejectsABlockThatWouldTouchMoreLinksThanLocalIdsCanName) {
  // One FlowBlock has 16-bit local link ids: at most 65,519 distinct links.
  constexpr LinkId kLinks = 65521;
  Engine e(std::vector<double>(kLinks, 1e9), 1, EngineConfig{});
  auto over = [](std::vector<LinkId> links) {
    FlowSpec f;
    for (LinkId l : links) f.path.push(l);
    return f;
  };
  // Given flows over links 0..65517 (65,518 distinct links),
  for (LinkId l = 0; l < 65518; l += 2) {
    ASSERT_EQ(e.check_flow(over({l, l + 1})), FlowError::kOk) << "link " << l;
    e.add_flow(over({l, l + 1}));
  }
  // Expect: two new links would be one too many, one new link fits,
  EXPECT_EQ(e.check_flow(over({65518, 65519})), FlowError::kBlockFull);
  ASSERT_EQ(e.check_flow(over({65518})), FlowError::kOk);
  e.add_flow(over({65518}));
  // and then the block is full, but flows over links it has are still fine.
  EXPECT_EQ(e.check_flow(over({65519})), FlowError::kBlockFull);
  EXPECT_EQ(e.check_flow(over({0, 65518})), FlowError::kOk);
}

TEST(Engine, InvalidConstructorArgumentsThrow) {
  const EngineConfig ok;
  EXPECT_THROW(Engine({10e9, 0}, 1, ok), std::invalid_argument);
  EXPECT_THROW(Engine({-1}, 1, ok), std::invalid_argument);
  EXPECT_THROW(Engine({kNaN}, 1, ok), std::invalid_argument);
  EXPECT_THROW(Engine({kInf}, 1, ok), std::invalid_argument);
  EXPECT_THROW(Engine({1e9}, 0, ok), std::invalid_argument);
  auto with = [](auto mutate) {
    EngineConfig c;
    mutate(c);
    return c;
  };
  EXPECT_THROW(Engine({1e9}, 1, with([](EngineConfig& c) { c.blocks = 0; })),
               std::invalid_argument);
  EXPECT_THROW(Engine({1e9}, 1, with([](EngineConfig& c) { c.blocks = 65; })),
               std::invalid_argument);
  EXPECT_THROW(Engine({1e9}, 1, with([](EngineConfig& c) { c.gamma = 0; })), std::invalid_argument);
  EXPECT_THROW(Engine({1e9}, 1, with([](EngineConfig& c) { c.gamma = 1.2; })), std::invalid_argument);
  EXPECT_NO_THROW(Engine({1e9}, 1, with([](EngineConfig& c) { c.gamma = 1; })));
  EXPECT_THROW(Engine({1e9}, 1, with([](EngineConfig& c) { c.gamma = kNaN; })),
               std::invalid_argument);
  EXPECT_THROW(Engine({1e9}, 1, with([](EngineConfig& c) { c.gradient_step = -1; })),
               std::invalid_argument);
  EXPECT_THROW(Engine({1e9}, 1, with([](EngineConfig& c) { c.alpha = 0; })), std::invalid_argument);
  EXPECT_THROW(Engine({1e9}, 1, with([](EngineConfig& c) { c.alpha = kInf; })),
               std::invalid_argument);
  EXPECT_THROW(Engine({1e9}, 1, with([](EngineConfig& c) { c.alpha = 0.05; })),
               std::invalid_argument);
  EXPECT_THROW(Engine({1e9}, 1, with([](EngineConfig& c) { c.alpha = 10.5; })),
               std::invalid_argument);
  EXPECT_NO_THROW(Engine({1e9}, 1, with([](EngineConfig& c) { c.alpha = 10; })));
  EXPECT_THROW(Engine({1e9}, 1, with([](EngineConfig& c) { c.tolerance = 0; })),
               std::invalid_argument);
  EXPECT_THROW(Engine({1e9}, 1, with([](EngineConfig& c) { c.tolerance = kNaN; })),
               std::invalid_argument);
  EXPECT_NO_THROW(Engine({1e9}, 1, with([](EngineConfig& c) { c.blocks = 64; })));
}

TEST(Engine, IteratingWithoutFlowsAllocatesNothingAndKeepsPrices) {
  Engine e({10e9, 40e9}, 1, EngineConfig{});
  e.set_price(1, 0.75);
  const std::uint64_t n = e.solve(7);
  EXPECT_GE(n, 1u);
  EXPECT_LE(n, 7u);
  EXPECT_EQ(e.iterations(), n);
  EXPECT_EQ(e.num_flows(), 0u);
  EXPECT_EQ(e.price(0), 1.0);
  EXPECT_EQ(e.price(1), 0.75);
  EXPECT_EQ(e.link_allocation_bps(), (std::vector<double>{0, 0}));
  EXPECT_EQ(e.stats().max_raw_utilization, 0);
}

// ---- float vs double ----

TEST(FloatEngine, AgreesWithDoubleEngineOnRandomTopologies) {
  // The double engine solves to a KKT residual of 1e-10; the float engine to
  // 1e-6 (its rounding floor is near 1e-7: 24-bit mantissas in prices, rates
  // and link sums). Stated tolerance: every normalized and raw rate within
  // 1e-4 relative of the double engine's (the worst seen on these instances
  // is 1.7e-5). Individual link prices are not compared: on links whose flows
  // also cross pricier links they are poorly conditioned, and only path
  // prices decide rates.
  constexpr double kRel = 1e-4;
  for (std::uint64_t seed = 500; seed < 540; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RandomProblemSpec spec;
    spec.capped_fraction = seed % 2 == 0 ? 0.3 : 0;
    Problem pb = oracle::random_problem(seed, spec);
    Built<double> d = build<double>(pb, config(Algorithm::kNed, 1e-10));
    Built<float> f = build<float>(pb, config(Algorithm::kNed, 1e-6));
    solve_converged(*d.engine, 20000);
    solve_converged(*f.engine, 20000);
    const std::vector<double> xd = rates_gbps(d);
    const std::vector<double> xf = rates_gbps(f);
    const std::vector<double> rd = raw_gbps(d);
    const std::vector<double> rf = raw_gbps(f);
    for (std::size_t s = 0; s < xd.size(); ++s) {
      EXPECT_NEAR(xf[s], xd[s], kRel * xd[s]) << "flow " << s;
      EXPECT_NEAR(rf[s], rd[s], kRel * rd[s]) << "flow " << s;
    }
  }
}

}  // namespace
}  // namespace flowtune::alloc

namespace flowtune::alloc {
namespace {

// The AVX-512 kernels (where the CPU runs them) and the x86-64 baseline ones
// compute the same operations in the same order, so every iteration must give
// identical bits. On a CPU without AVX-512 both engines run the baseline and
// the test still checks that portable_kernels selects a working path.
template <typename Real>
void expect_kernel_variants_identical() {
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RandomProblemSpec spec;
    spec.capped_fraction = 0.2;
    Problem pb = oracle::random_problem(seed, spec);
    for (Normalizer n : {Normalizer::kFNorm, Normalizer::kUNorm}) {
      EngineConfig fast = config(Algorithm::kNed, 1e-6, n);
      EngineConfig portable = fast;
      portable.portable_kernels = true;
      Built<Real> a = build<Real>(pb, fast);
      Built<Real> b = build<Real>(pb, portable);
      EXPECT_STREQ(b.engine->kernel_name(), "generic");
      for (int it = 0; it < 30; ++it) {
        a.engine->iterate();
        b.engine->iterate();
      }
      EXPECT_EQ(raw_gbps(a), raw_gbps(b));
      EXPECT_EQ(rates_gbps(a), rates_gbps(b));
      EXPECT_EQ(prices(*a.engine), prices(*b.engine));
    }
  }
}

TEST(Kernels, VectorAndPortableVariantsGiveIdenticalBitsDouble) {
  std::cout << "engine kernels on this CPU: "
            << BasicEngine<double>({1e9}, 1, EngineConfig{}).kernel_name() << '\n';
  expect_kernel_variants_identical<double>();
}

TEST(Kernels, VectorAndPortableVariantsGiveIdenticalBitsFloat) {
  expect_kernel_variants_identical<float>();
}

}  // namespace
}  // namespace flowtune::alloc

namespace flowtune::alloc {
namespace {

// α = 10 on the float engine with the widest accepted capacities: the rate
// floor U'(cap) = w·cap^-10 underflows float, and no rate or price may turn
// into inf or NaN because of it.
TEST(FloatEngine, LargeAlphaWithHugeCapacityStaysFinite) {
  EngineConfig cfg;
  cfg.alpha = 10;
  BasicEngine<float> e({kMaxRateBps, kMaxRateBps}, 1, cfg);
  FlowSpec a;
  a.path.push(0);
  a.weight = kMinWeight;
  FlowSpec b;
  b.path.push(0);
  b.path.push(1);
  const FlowId ia = e.add_flow(a), ib = e.add_flow(b);
  for (LinkId l = 0; l < 2; ++l) e.set_price(l, 0);  // every path price at zero
  for (int it = 0; it < 50; ++it) {
    e.iterate();
    for (FlowId id : {ia, ib}) {
      ASSERT_TRUE(std::isfinite(e.raw_rate_bps(id))) << "iteration " << it;
      ASSERT_LE(e.rate_bps(id), kMaxRateBps * (1 + 1e-6)) << "iteration " << it;
    }
    for (LinkId l = 0; l < 2; ++l) ASSERT_TRUE(std::isfinite(e.price(l))) << "iteration " << it;
  }
}

}  // namespace
}  // namespace flowtune::alloc

namespace flowtune::alloc {
namespace {

// A big network carrying few flows: the price update visits only the links
// in use (sparse_links), and must give the bits a sweep over every link
// gives, through arrivals, departures, classes, compaction and re-blocking,
// as the links in use cross the sparse/sweep threshold both ways.
template <typename Real>
void expect_sparse_links_identical(std::uint64_t seed) {
  constexpr std::uint32_t kHosts = 500;  // 1,000 links: uplinks, then downlinks
  EngineConfig sparse;
  sparse.blocks = 2;
  EngineConfig dense = sparse;
  dense.sparse_links = false;
  std::vector<double> caps(2 * kHosts, 10e9);
  BasicEngine<Real> a(caps, kHosts, sparse), b(caps, kHosts, dense);
  oracle::Rng rng(seed);
  std::vector<FlowId> live;
  for (int round = 0; round < 120; ++round) {
    // Bursts of arrivals to about 1,200 flows (nine links in ten in use),
    // then mostly departures back to a handful.
    const bool grow = (round / 30) % 2 == 0;
    const int changes = 1 + static_cast<int>(rng.below(grow ? 80 : 100));
    for (int c = 0; c < changes; ++c) {
      if (grow || live.empty() || rng.chance(0.2)) {
        FlowSpec f;
        f.src_site = static_cast<std::uint32_t>(rng.below(kHosts));
        f.dst_site = static_cast<std::uint32_t>(rng.below(kHosts));
        f.path.push(static_cast<LinkId>(f.src_site));
        f.path.push(static_cast<LinkId>(kHosts + f.dst_site));
        f.weight = rng.log_uniform(0.5, 4);
        f.priority = static_cast<std::uint8_t>(3 + rng.below(3));
        const FlowId id = a.add_flow(f);
        ASSERT_EQ(b.add_flow(f), id);
        live.push_back(id);
      } else {
        const std::size_t i = rng.below(live.size());
        a.remove_flow(live[i]);
        b.remove_flow(live[i]);
        live[i] = live.back();
        live.pop_back();
      }
    }
    if (round % 17 == 16) {
      a.compact();
      b.compact();
    }
    if (round % 29 == 28) {
      const std::uint32_t k = 1 + static_cast<std::uint32_t>(rng.below(3));
      ASSERT_EQ(a.set_blocks(k), b.set_blocks(k));
    }
    a.iterate();
    b.iterate();
    const DriverView da(a), db(b);
    ASSERT_EQ(da.num_layers(), db.num_layers());
    for (FlowId id : live) {
      ASSERT_EQ(a.rate_bps(id), b.rate_bps(id)) << "round " << round << " flow " << id;
      ASSERT_EQ(a.raw_rate_bps(id), b.raw_rate_bps(id)) << "round " << round << " flow " << id;
    }
    // Every link of every layer: price and F-NORM ratio.
    std::vector<std::uint32_t> all(da.num_layers() * a.num_links());
    for (std::uint32_t v = 0; v < all.size(); ++v) all[v] = v;
    std::vector<Real> sa(2 * all.size()), sb(2 * all.size());
    da.save_links(all.data(), all.size(), sa.data());
    db.save_links(all.data(), all.size(), sb.data());
    for (std::size_t i = 0; i < sa.size(); ++i) {
      ASSERT_EQ(sa[i], sb[i]) << "round " << round << ": virtual link " << i / 2
                              << (i % 2 == 0 ? " price" : " ratio");
    }
  }
}

TEST(SparseLinks, VisitingOnlyLinksInUseGivesTheBitsOfASweepDouble) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    expect_sparse_links_identical<double>(seed);
  }
}

TEST(SparseLinks, VisitingOnlyLinksInUseGivesTheBitsOfASweepFloat) {
  expect_sparse_links_identical<float>(4);
}

}  // namespace
}  // namespace flowtune::alloc
