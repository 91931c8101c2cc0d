// The simulator's workload: flow-size CDFs (both file formats, both sampling
// rules, bad files), the generator and Poisson arrivals.
#include "workload.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "sim_cli.h"

namespace flowtune::sim {
namespace {

double sample_mean(const FlowSizeCdf& d, std::uint64_t seed, int n) {
  Rng rng(seed);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += d.sample(rng);
  return sum / n;
}

TEST(FlowSizeCdf, FacebookWorkloadsSampleToTheirStatedMeans) {
  // The files state their mean on line 1; sampling must reproduce it.
  for (const char* name : {"web", "cache", "hadoop"}) {
    FlowSizeCdf d = load_workload(name);
    ASSERT_EQ(d.sampling(), FlowSizeCdf::Sampling::kStep) << name;
    ASSERT_GT(d.stated_mean(), 0) << name;
    EXPECT_NEAR(d.mean(), d.stated_mean(), 0.005 * d.stated_mean()) << name;
    EXPECT_NEAR(sample_mean(d, 7, 400000), d.stated_mean(), 0.02 * d.stated_mean()) << name;
  }
}

TEST(FlowSizeCdf, InterpolatedWorkloadsSampleToTheirAnalyticMean) {
  FlowSizeCdf d = load_workload("websearch");
  ASSERT_EQ(d.sampling(), FlowSizeCdf::Sampling::kLinear);
  EXPECT_EQ(d.stated_mean(), 0);
  EXPECT_NEAR(d.mean(), 1.71e6, 0.02e6);  // SOURCES.md: about 1.71 MB interpolated
  EXPECT_NEAR(sample_mean(d, 3, 400000), d.mean(), 0.02 * d.mean());
  EXPECT_NEAR(load_workload("datamining").mean(), 12.7e6, 0.2e6);
}

TEST(FlowSizeCdf, StepAndLinearRules) {
  FlowSizeCdf step({100, 200, 400}, {0.5, 0.75, 1}, FlowSizeCdf::Sampling::kStep);
  EXPECT_EQ(step.quantile(0.3), 100);
  EXPECT_EQ(step.quantile(0.5), 100);  // the smallest size whose CDF reaches u
  EXPECT_EQ(step.quantile(0.6), 200);
  EXPECT_EQ(step.quantile(0.99), 400);
  EXPECT_DOUBLE_EQ(step.mean(), 0.5 * 100 + 0.25 * 200 + 0.25 * 400);

  FlowSizeCdf linear({0, 1000, 3000}, {0, 0.5, 1}, FlowSizeCdf::Sampling::kLinear);
  EXPECT_EQ(linear.quantile(0.25), 500);
  EXPECT_EQ(linear.quantile(0.75), 2000);
  EXPECT_EQ(linear.quantile(0), 1);  // never an empty flowlet
  EXPECT_DOUBLE_EQ(linear.mean(), 0.5 * 500 + 0.5 * 2000);
}

TEST(FlowSizeCdf, ReadsPercentAndSkipsComments) {
  std::string f = write_temp("pct.cdf", "# size percent\n10 0\n20 50\n\n40 100\n");
  FlowSizeCdf d = FlowSizeCdf::load(f);
  EXPECT_EQ(d.quantile(0.25), 15);
  EXPECT_DOUBLE_EQ(d.mean(), 0.5 * 15 + 0.5 * 30);
  std::remove(f.c_str());
}

void expect_bad(const std::string& text, const std::string& needle) {
  std::string f = write_temp("bad.cdf", text);
  try {
    FlowSizeCdf::load(f);
    ADD_FAILURE() << "accepted: " << text;
  } catch (const WorkloadError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << "names the file: " << e.what();
  }
  std::remove(f.c_str());
}

TEST(FlowSizeCdf, BadFilesAreRefusedWithTheReason) {
  expect_bad("10 0.5\n5 1\n", "sizes must ascend");
  expect_bad("10 0.5\n20 0.4\n30 1\n", "must not decrease");
  expect_bad("10 0.5\n20 0.9\n", "must end at 1");
  expect_bad("10 0.5\n20 x\n", ":2: not a number");
  expect_bad("10 0.5 7\n", "expected 'size cdf'");
  expect_bad("", "no 'size cdf' rows");
  expect_bad("-5\n10 1\n", "mean size must be positive");
  EXPECT_THROW(FlowSizeCdf::load("/nonexistent/flowtune.cdf"), WorkloadError);
}

TEST(FlowSizeCdf, UnknownNamesListTheBuiltIns) {
  try {
    load_workload("no-such-workload");
    ADD_FAILURE();
  } catch (const WorkloadError& e) {
    std::string m = e.what();
    for (const auto& n : workload_names()) EXPECT_NE(m.find(n), std::string::npos) << m;
  }
}

TEST(Rng, SameSeedSameStreamAndRanges) {
  Rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 1000; ++i) {
    std::uint64_t x = a.next();
    EXPECT_EQ(x, b.next());
    differs |= x != c.next();
  }
  EXPECT_TRUE(differs);
  std::set<std::uint32_t> seen;
  for (int i = 0; i < 10000; ++i) {
    double u = a.uniform();
    ASSERT_GE(u, 0);
    ASSERT_LT(u, 1);
    std::uint32_t k = a.below(7);
    ASSERT_LT(k, 7u);
    seen.insert(k);
  }
  EXPECT_EQ(seen.size(), 7u);
}

TEST(PoissonArrivals, RateFollowsLoadAndGapsAreExponential) {
  // 100% load on 10 hosts of 1 Gbit/s with 125 kB flowlets: 10,000 per second.
  PoissonArrivals p(1.0, 10, 1e9, 125000);
  EXPECT_DOUBLE_EQ(p.rate_per_s(), 10000);
  PoissonArrivals half(0.5, 10, 1e9, 125000);
  EXPECT_DOUBLE_EQ(half.rate_per_s(), 5000);

  Rng rng(11);
  const int n = 200000;
  double prev = 0, sum = 0, sum2 = 0;
  std::vector<int> per_ms;
  for (int i = 0; i < n; ++i) {
    double t = p.next(rng);
    double gap = t - prev;
    ASSERT_GT(gap, 0);
    sum += gap;
    sum2 += gap * gap;
    prev = t;
    std::size_t bin = static_cast<std::size_t>(t * 1000);
    if (bin >= per_ms.size()) per_ms.resize(bin + 1);
    ++per_ms[bin];
  }
  double mean = sum / n, var = sum2 / n - mean * mean;
  EXPECT_NEAR(mean, 1e-4, 1e-6);
  EXPECT_NEAR(std::sqrt(var) / mean, 1.0, 0.02);  // exponential: CV = 1
  // Counts per 1 ms window (mean 10) are Poisson: variance = mean.
  per_ms.pop_back();  // the last window is partial
  double c = 0, c2 = 0;
  for (int k : per_ms) {
    c += k;
    c2 += static_cast<double>(k) * k;
  }
  const double bins = static_cast<double>(per_ms.size());
  double cm = c / bins, cv = c2 / bins - cm * cm;
  EXPECT_NEAR(cm, 10, 0.2);
  EXPECT_NEAR(cv / cm, 1.0, 0.1);

  EXPECT_THROW(PoissonArrivals(0, 10, 1e9, 1000), WorkloadError);
  EXPECT_THROW(PoissonArrivals(0.5, 0, 1e9, 1000), WorkloadError);
}

}  // namespace
}  // namespace flowtune::sim
