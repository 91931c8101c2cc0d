// Measures iterations to convergence (KKT residual below 1e-4, then F-NORM)
// for NED and Gradient on the same instances: a parking lot, random explicit
// networks, and the paper's two-tier network (9 racks x 16 hosts, 4 spines,
// 10 Gbit/s) with random flows. Gradient's step is swept and its best
// converging step reported, so the comparison is against a tuned baseline.
// Prints one JSON object; iteration counts are deterministic (fixed seeds).
#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flowtune/alloc/engine.h"
#include "workload.h"

namespace {

using flowtune::alloc::Algorithm;
using flowtune::alloc::Engine;
using flowtune::alloc::EngineConfig;
using flowtune::alloc::FlowSpec;
using flowtune::alloc::Topology;

constexpr std::uint64_t kMaxIterations = 200000;

struct Instance {
  std::string name;
  std::vector<double> capacity_bps;
  std::uint32_t sites = 1;
  std::vector<FlowSpec> flows;
};

Instance parking_lot(int n) {
  Instance in{"parking_lot_" + std::to_string(n), std::vector<double>(n, 10e9), 1, {}};
  FlowSpec longf;
  for (int l = 0; l < n; ++l) longf.path.push(l);
  in.flows.push_back(longf);
  for (int l = 0; l < n; ++l) {
    FlowSpec f;
    f.path.push(l);
    in.flows.push_back(f);
  }
  return in;
}

Instance random_explicit(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> nl(10, 40), nf(20, 200), hops(1, 4);
  std::uniform_real_distribution<double> cap(1e9, 100e9), w(0.5, 4);
  Instance in{"random_explicit_" + std::to_string(seed), {}, 1, {}};
  int links = nl(rng);
  for (int l = 0; l < links; ++l) in.capacity_bps.push_back(cap(rng));
  int flows = nf(rng);
  std::uniform_int_distribution<int> link(0, links - 1);
  for (int i = 0; i < flows; ++i) {
    FlowSpec f;
    int h = hops(rng);
    while (f.path.size < h) {
      auto l = static_cast<std::uint32_t>(link(rng));
      if (std::find(f.path.begin(), f.path.end(), l) == f.path.end()) f.path.push(l);
    }
    f.weight = w(rng);
    in.flows.push_back(f);
  }
  return in;
}

Instance two_tier(int flows, std::uint64_t seed) {
  flowtune::alloc::TwoTierSpec s;
  Topology t = Topology::two_tier(s);
  Instance in{"two_tier_144_hosts_" + std::to_string(flows) + "_flows", t.capacities_bps(),
              t.num_sites(), {}};
  in.flows = flowtune::bench::random_host_pairs(t, static_cast<std::uint32_t>(flows), seed);
  return in;
}

// Iterations until converged, or kMaxIterations + 1 if it never did.
std::uint64_t iterations(const Instance& in, const EngineConfig& cfg) {
  Engine e(in.capacity_bps, in.sites, cfg);
  for (const auto& f : in.flows) e.add_flow(f);
  std::uint64_t n = e.solve(kMaxIterations);
  return e.stats().converged ? n : kMaxIterations + 1;
}

}  // namespace

int main() {
  std::vector<Instance> instances = {parking_lot(2), parking_lot(4), random_explicit(1),
                                     random_explicit(2), random_explicit(3), two_tier(500, 7),
                                     two_tier(2000, 8)};
  const std::vector<double> steps = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02};
  nlohmann::json out;
  out["benchmark"] = "iterations to KKT residual 1e-4";
  for (const auto& in : instances) {
    EngineConfig ned;
    nlohmann::json row;
    row["instance"] = in.name;
    row["flows"] = in.flows.size();
    row["ned_gamma_0.4"] = iterations(in, ned);
    ned.gamma = 1.0;
    row["ned_gamma_1.0"] = iterations(in, ned);
    EngineConfig gd;
    gd.algorithm = Algorithm::kGradient;
    row["gradient_default_step"] = iterations(in, gd);
    std::uint64_t best = kMaxIterations + 1;
    double best_step = 0;
    for (double st : steps) {
      EngineConfig g;
      g.algorithm = Algorithm::kGradient;
      g.gradient_step = st;
      std::uint64_t n = iterations(in, g);
      if (n < best) {
        best = n;
        best_step = st;
      }
    }
    row["gradient_best"] = best;
    row["gradient_best_step"] = best_step;
    row["ratio_gradient_over_ned"] =
        static_cast<double>(best) / static_cast<double>(row["ned_gamma_0.4"].get<std::uint64_t>());
    out["results"].push_back(row);
    std::fprintf(stderr, "%-32s NED %6llu  Gradient(best step %g) %7llu\n", in.name.c_str(),
                 static_cast<unsigned long long>(row["ned_gamma_0.4"].get<std::uint64_t>()),
                 best_step, static_cast<unsigned long long>(best));
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
