// Strict priority classes in the rate engine against independent oracles:
// closed forms on one link, the lexicographic optimum on random topologies
// (the naive reference solver of oracles.h run class by class on what the
// classes above left), and the properties strict priority promises: lower
// classes never move higher ones, no link is over-allocated in any
// iteration, and one class in use is the single-class engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flowtune/alloc/engine.h"
#include "oracles.h"

namespace flowtune::alloc {
namespace {

using oracle::kBpsPerGbps;
using oracle::Problem;
using oracle::RandomProblemSpec;
using oracle::Rng;

// A problem whose flows each carry a class.
struct Classed {
  Problem pb;
  std::vector<std::uint8_t> cls;
};

struct Built {
  std::unique_ptr<Engine> engine;
  std::vector<FlowId> ids;
};

// Exact strict priority, as the oracles compute it: the least reserve for
// lower classes (ReservesKeepAStarvedClassTrickling tests the default).
EngineConfig config(double tolerance, Normalizer n = Normalizer::kFNorm,
                    double reserve = kMinResidualShare) {
  EngineConfig c;
  c.tolerance = tolerance;
  c.normalizer = n;
  c.class_reserve = reserve;
  return c;
}

Built build(const Classed& c, const EngineConfig& cfg) {
  Built b;
  b.engine = std::make_unique<Engine>(c.pb.capacity_bps(), 1, cfg);
  for (std::size_t s = 0; s < c.pb.flows.size(); ++s) {
    FlowSpec f = c.pb.spec(s);
    f.priority = c.cls[s];
    EXPECT_EQ(b.engine->check_flow(f), FlowError::kOk) << "flow " << s;
    b.ids.push_back(b.engine->add_flow(f));
  }
  return b;
}

void solve_converged(Engine& e, std::uint64_t max_iterations = 200000) {
  e.solve(max_iterations);
  ASSERT_TRUE(e.stats().converged) << "residual " << e.stats().max_residual;
}

std::vector<double> rates_gbps(const Built& b) {
  std::vector<double> v;
  for (FlowId id : b.ids) v.push_back(b.engine->rate_bps(id) / kBpsPerGbps);
  return v;
}

std::vector<double> raw_gbps(const Built& b) {
  std::vector<double> v;
  for (FlowId id : b.ids) v.push_back(b.engine->raw_rate_bps(id) / kBpsPerGbps);
  return v;
}

// The lexicographic optimum, class by class: each class solves its own NUM
// (the reference solver) on the capacity the classes above it left. A flow
// crossing a link the classes above filled gets 0 (strict priority), and is
// left out of its class's problem.
struct Lexicographic {
  std::vector<double> rate;
  std::vector<bool> starved;
};

Lexicographic lexicographic_reference(const Classed& c) {
  const std::size_t nf = c.pb.flows.size();
  Lexicographic out{std::vector<double>(nf, 0), std::vector<bool>(nf, false)};
  std::vector<double> left = c.pb.capacity;
  for (std::uint32_t k = 0; k < kNumClasses; ++k) {
    Problem sub;
    sub.capacity = left;
    std::vector<std::size_t> members;
    for (std::size_t s = 0; s < nf; ++s) {
      if (c.cls[s] != k) continue;
      bool room = true;
      for (LinkId l : c.pb.flows[s].links) room = room && left[l] > 1e-9 * c.pb.capacity[l];
      if (!room) {
        out.starved[s] = true;
        continue;
      }
      members.push_back(s);
      sub.flows.push_back(c.pb.flows[s]);
    }
    if (members.empty()) continue;
    const oracle::Reference ref = oracle::reference_solve(sub, 1e-12, 400000);
    EXPECT_TRUE(ref.converged) << "reference solver, class " << k;
    for (std::size_t i = 0; i < members.size(); ++i) {
      out.rate[members[i]] = ref.rate[i];
      for (LinkId l : sub.flows[i].links) left[l] = std::max(0.0, left[l] - ref.rate[i]);
    }
  }
  return out;
}

// Random topology, each flow in one of `classes` classes; flows of classes
// above the lowest are capped (an unbounded log-utility flow would take its
// whole path from every class below it).
Classed random_classed(std::uint64_t seed, const std::vector<std::uint8_t>& classes) {
  RandomProblemSpec spec;
  spec.max_links = 25;
  spec.max_flows = 80;
  Classed c{oracle::random_problem(seed, spec), {}};
  Rng rng(seed ^ 0x5eed);
  const std::uint8_t lowest = *std::max_element(classes.begin(), classes.end());
  for (auto& f : c.pb.flows) {
    const std::uint8_t k = classes[rng.below(classes.size())];
    c.cls.push_back(k);
    if (k != lowest) f.cap = rng.log_uniform(0.05, 5);
  }
  return c;
}

TEST(Priority, AHigherClassTakesWhatItWantsAndTheLowerShareTheRest) {
  // One 10 Gbit/s link: two class-0 flows capped at 3 Gbit/s take 6; three
  // default-class flows share the remaining 4 by weight (1, 1, 2).
  Classed c;
  c.pb.capacity = {10};
  c.pb.flows = {{{0}, 1, 3}, {{0}, 1, 3}, {{0}, 1, oracle::kInf}, {{0}, 1, oracle::kInf},
                {{0}, 2, oracle::kInf}};
  c.cls = {0, 0, kDefaultClass, kDefaultClass, kDefaultClass};
  Built b = build(c, config(1e-10));
  solve_converged(*b.engine);
  const std::vector<double> want = {3, 3, 1, 1, 2};
  const std::vector<double> got = rates_gbps(b);
  for (std::size_t s = 0; s < want.size(); ++s) EXPECT_NEAR(got[s], want[s], 1e-6) << s;
  EXPECT_EQ(b.engine->classes(), (std::vector<std::uint8_t>{0, kDefaultClass}));
}

TEST(Priority, AnUncappedHigherClassLeavesLowerClassesNothingOnItsPath) {
  // Weighted log utility wants without bound: class 1 takes the link, the
  // default class is held to the reserve (here the least, kMinResidualShare).
  Classed c;
  c.pb.capacity = {10, 10};
  c.pb.flows = {{{0}, 1, oracle::kInf}, {{0}, 5, oracle::kInf}, {{1}, 1, oracle::kInf}};
  c.cls = {1, kDefaultClass, kDefaultClass};
  Built b = build(c, config(1e-10));
  solve_converged(*b.engine);
  const std::vector<double> got = rates_gbps(b);
  EXPECT_NEAR(got[0], 10, 1e-6);
  EXPECT_LE(got[1], 10 * 2 * kMinResidualShare);
  EXPECT_NEAR(got[2], 10, 1e-6);  // the default class alone on its own link
}

TEST(Priority, ReservesKeepAStarvedClassTricklingAndTheLinkWhole) {
  // Three classes on one 10 Gbit/s link, each wanting it all; a fourth flow
  // of the lowest class alone on a second link. With reserve f, the top
  // class gets c - 2f, each class below f, and the link stays whole.
  for (double f : {0.02, 0.05}) {
    SCOPED_TRACE("reserve " + std::to_string(f));
    Classed c;
    c.pb.capacity = {10, 10};
    c.pb.flows = {{{0}, 1, oracle::kInf}, {{0}, 1, oracle::kInf}, {{0}, 1, oracle::kInf},
                  {{0, 1}, 1, oracle::kInf}};
    c.cls = {0, 3, 6, 6};
    Built b = build(c, config(1e-10, Normalizer::kFNorm, f));
    solve_converged(*b.engine);
    const std::vector<double> got = rates_gbps(b);
    EXPECT_NEAR(got[0], 10 * (1 - 2 * f), 1e-6);
    EXPECT_NEAR(got[1], 10 * f, 1e-6);
    EXPECT_NEAR(got[2] + got[3], 10 * f, 1e-6);  // class 6 shares its reserve
    EXPECT_NEAR(got[2], got[3], 1e-6);
    EXPECT_LE(b.engine->link_allocation_bps()[0], 10 * kBpsPerGbps * (1 + 1e-9));
  }
  // Out of range: refused.
  EXPECT_THROW(build({}, config(1e-9, Normalizer::kFNorm, 0.2)), std::invalid_argument);
  EXPECT_THROW(build({}, config(1e-9, Normalizer::kFNorm, 0)), std::invalid_argument);
}

TEST(Priority, AClassThatLeftALinkKeepsNoReserveThere) {
  // Classes 0 and 6 on one 10 Gbit/s link: class 0 gets c - f while class 6
  // is there. Once class 6's flow is gone, class 0 takes the whole link:
  // the class-6 flow's block keeps its copy of the link, but no flow of
  // class 6 crosses it any more. Two sites, so with 2 blocks per side the
  // two flows sit in different blocks.
  for (std::uint32_t blocks : {1u, 2u}) {
    SCOPED_TRACE("blocks " + std::to_string(blocks));
    EngineConfig cfg = config(1e-10, Normalizer::kFNorm, 0.05);
    cfg.blocks = blocks;
    Engine e({10 * kBpsPerGbps}, 2, cfg);
    FlowSpec high, low;
    high.path.push(0);
    low.path.push(0);
    high.priority = 0;
    low.priority = 6;
    low.src_site = low.dst_site = 1;
    const FlowId h = e.add_flow(high);
    const FlowId l = e.add_flow(low);
    solve_converged(e);
    EXPECT_NEAR(e.rate_bps(h) / kBpsPerGbps, 10 * 0.95, 1e-6);
    e.remove_flow(l);
    solve_converged(e);
    EXPECT_NEAR(e.rate_bps(h) / kBpsPerGbps, 10, 1e-6);
  }
}

TEST(Priority, RandomTopologiesMatchTheLexicographicReference) {
  // Three classes over random topologies. Both solvers stop within 1e-10 of
  // feasibility; raw rates agree to 1e-5 relative (the classes below see the
  // classes above through their converged loads), and starved flows get at
  // most the floor share of their path.
  int starved = 0;
  for (std::uint64_t seed = 300; seed < 320; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Classed c = random_classed(seed, {0, 2, kDefaultClass});
    const Lexicographic ref = lexicographic_reference(c);
    Built b = build(c, config(1e-11));
    solve_converged(*b.engine);
    const std::vector<double> x = raw_gbps(b);
    for (std::size_t s = 0; s < x.size(); ++s) {
      if (ref.starved[s]) {
        ++starved;
        EXPECT_LE(x[s], 1e-6 * c.pb.effective_cap(s)) << "flow " << s;
        continue;
      }
      EXPECT_NEAR(x[s], ref.rate[s], 1e-5 * ref.rate[s] + 1e-9) << "flow " << s << " class "
                                                                 << int(c.cls[s]);
    }
  }
  std::printf("%d starved flows over 20 instances\n", starved);
}

TEST(Priority, AddingLowerClassFlowsNeverMovesHigherClassRates) {
  for (std::uint64_t seed = 400; seed < 410; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Classed c = random_classed(seed, {0, 3});
    Built b = build(c, config(1e-11));
    solve_converged(*b.engine);
    const std::vector<double> before = rates_gbps(b);
    // As many again in class 6, over random links, uncapped.
    Rng rng(seed);
    const std::size_t n = c.pb.flows.size();
    for (std::size_t i = 0; i < n; ++i) {
      FlowSpec f;
      const auto l = static_cast<LinkId>(rng.below(c.pb.capacity.size()));
      f.path.push(l);
      f.priority = 6;
      b.engine->add_flow(f);
    }
    solve_converged(*b.engine);
    const std::vector<double> after = rates_gbps(b);
    for (std::size_t s = 0; s < n; ++s) {
      EXPECT_NEAR(after[s], before[s], 1e-6 * before[s] + 1e-9) << "flow " << s;
    }
  }
}

TEST(Priority, NoLinkIsOverAllocatedInAnyIterationFromABadStart) {
  // F-NORM's promise across classes: whatever the prices, the normalized
  // rates of all classes together fit every link, with the least reserve
  // and the default one.
  for (const double reserve : {kMinResidualShare, EngineConfig{}.class_reserve}) {
  for (Normalizer n : {Normalizer::kFNorm, Normalizer::kUNorm}) {
    for (std::uint64_t seed = 500; seed < 510; ++seed) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " " + to_string(n) + " reserve " +
                   std::to_string(reserve));
      const Classed c = random_classed(seed, {0, 1, 5, 7});
      Built b = build(c, config(1e-9, n, reserve));
      Rng rng(seed);
      for (std::uint8_t k : b.engine->classes()) {
        for (LinkId l = 0; l < c.pb.capacity.size(); ++l) {
          b.engine->set_price(l, rng.log_uniform(1e-4, 1e3), k);
        }
      }
      for (int it = 0; it < 300; ++it) {
        b.engine->iterate();
        const std::vector<double> alloc = b.engine->link_allocation_bps();
        for (std::size_t l = 0; l < alloc.size(); ++l) {
          ASSERT_LE(alloc[l], c.pb.capacity[l] * kBpsPerGbps * (1 + 1e-9))
              << "link " << l << " iteration " << it;
        }
      }
    }
  }
}
}

TEST(Priority, OneClassInUseIsTheSingleClassEngine) {
  // The same flows all in class 2 (a second layer; the default one empty)
  // and all in the default class (the single-layer loops) get the same rates.
  for (std::uint64_t seed = 600; seed < 605; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Classed c = random_classed(seed, {kDefaultClass});
    Built single = build(c, config(1e-10));
    std::fill(c.cls.begin(), c.cls.end(), 2);
    Built layered = build(c, config(1e-10));
    for (int it = 0; it < 50; ++it) {
      single.engine->iterate();
      layered.engine->iterate();
    }
    const std::vector<double> a = rates_gbps(single), z = rates_gbps(layered);
    for (std::size_t s = 0; s < a.size(); ++s) EXPECT_NEAR(z[s], a[s], 1e-12 * a[s]) << s;
  }
}

TEST(Priority, ClassesOutsideTheRangeAreRefused) {
  Engine e({1e9}, 1, EngineConfig{});
  FlowSpec f;
  f.path.push(0);
  f.priority = kNumClasses;
  EXPECT_EQ(e.check_flow(f), FlowError::kBadClass);
  f.priority = kNumClasses - 1;
  EXPECT_EQ(e.check_flow(f), FlowError::kOk);
  EXPECT_EQ(e.price(0, 0), 0.0);  // a class never used has no prices
}

}  // namespace
}  // namespace flowtune::alloc
