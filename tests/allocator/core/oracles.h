// Independent oracles for the engine tests: random problem instances, a naive
// reference NUM solver, the Lagrangian dual bound (paper Appendix A, eq. 8),
// weighted water-filling on one link with rate caps, and max-min fairness by
// progressive filling. None of this code shares anything with the engine but
// the problem description; everything here works in Gbit/s.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "flowtune/alloc/engine.h"

namespace flowtune::alloc::oracle {

inline constexpr double kBpsPerGbps = 1e9;
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// Deterministic random numbers from std::mt19937_64 (whose output the standard
// fixes), mapped to doubles by hand so instances are the same on every
// standard library.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : gen_(seed) {}
  double uniform(double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(gen_() >> 11) * 0x1.0p-53;
  }
  double log_uniform(double lo, double hi) { return std::exp(uniform(std::log(lo), std::log(hi))); }
  // Integer in [0, n); modulo bias is irrelevant for test instances.
  std::uint64_t below(std::uint64_t n) { return gen_() % n; }
  bool chance(double p) { return uniform(0, 1) < p; }

 private:
  std::mt19937_64 gen_;
};

// One flow of a problem, in Gbit/s. cap is +inf when the flow has no max rate.
struct RefFlow {
  std::vector<LinkId> links;
  double weight = 1;
  double cap = kInf;
};

struct Problem {
  std::vector<double> capacity;  // Gbit/s
  std::vector<RefFlow> flows;

  std::vector<double> capacity_bps() const {
    std::vector<double> v;
    for (double c : capacity) v.push_back(c * kBpsPerGbps);
    return v;
  }
  FlowSpec spec(std::size_t s) const {
    FlowSpec f;
    for (LinkId l : flows[s].links) f.path.push(l);
    f.weight = flows[s].weight;
    f.max_bps = std::isinf(flows[s].cap) ? 0 : flows[s].cap * kBpsPerGbps;
    return f;
  }
  // A flow can never exceed its smallest link, so min(cap, smallest link) is
  // an implied box constraint that changes nothing about the optimum.
  double effective_cap(std::size_t s) const {
    double c = flows[s].cap;
    for (LinkId l : flows[s].links) c = std::min(c, capacity[l]);
    return c;
  }
};

struct RandomProblemSpec {
  int min_links = 10, max_links = 40;
  double min_capacity = 1, max_capacity = 100;  // Gbit/s, uniform
  int min_flows = 20, max_flows = 200;
  double min_weight = 0.1, max_weight = 10;  // log-uniform
  double capped_fraction = 0;                // flows with a max rate
  double min_cap = 0.1, max_cap = 20;        // Gbit/s, log-uniform
};

// Random explicit topology: random link capacities, flows over 1-4 distinct
// random links with random weights (and optionally random max rates).
inline Problem random_problem(std::uint64_t seed, const RandomProblemSpec& spec = {}) {
  Rng rng(seed);
  Problem p;
  const auto nl = static_cast<int>(spec.min_links + rng.below(spec.max_links - spec.min_links + 1));
  for (int l = 0; l < nl; ++l)
    p.capacity.push_back(rng.uniform(spec.min_capacity, spec.max_capacity));
  const auto nf = static_cast<int>(spec.min_flows + rng.below(spec.max_flows - spec.min_flows + 1));
  for (int s = 0; s < nf; ++s) {
    RefFlow f;
    const auto len = static_cast<int>(1 + rng.below(std::min(4, nl)));
    while (static_cast<int>(f.links.size()) < len) {
      auto l = static_cast<LinkId>(rng.below(nl));
      if (std::find(f.links.begin(), f.links.end(), l) == f.links.end()) f.links.push_back(l);
    }
    f.weight = rng.log_uniform(spec.min_weight, spec.max_weight);
    if (rng.chance(spec.capped_fraction)) f.cap = rng.log_uniform(spec.min_cap, spec.max_cap);
    p.flows.push_back(f);
  }
  return p;
}

// Path price of every flow under link prices p.
inline std::vector<double> path_prices(const Problem& pb, const std::vector<double>& p) {
  std::vector<double> P(pb.flows.size(), 0);
  for (std::size_t s = 0; s < pb.flows.size(); ++s) {
    for (LinkId l : pb.flows[s].links) P[s] += p[l];
  }
  return P;
}

// The rate that maximizes w log x - x P over 0 < x <= cap (log utility).
inline double best_response(double w, double P, double cap) {
  return P <= 0 ? cap : std::min(cap, w / P);
}

// Lagrangian dual D(p) = Σ_s max_{0<x<=cap_s} (w_s log x - x P_s) + Σ_l p_l c_l
// (eq. 8, with each flow's implied cap). For any p >= 0 it bounds the optimal
// total utility from above (weak duality).
inline double dual_bound(const Problem& pb, const std::vector<double>& p) {
  std::vector<double> P = path_prices(pb, p);
  double d = 0;
  for (std::size_t s = 0; s < pb.flows.size(); ++s) {
    const double w = pb.flows[s].weight;
    const double x = best_response(w, P[s], pb.effective_cap(s));
    d += w * std::log(x) - x * P[s];
  }
  for (std::size_t l = 0; l < pb.capacity.size(); ++l) d += p[l] * pb.capacity[l];
  return d;
}

inline double log_utility(const Problem& pb, const std::vector<double>& x) {
  double u = 0;
  for (std::size_t s = 0; s < pb.flows.size(); ++s) u += pb.flows[s].weight * std::log(x[s]);
  return u;
}

inline std::vector<double> link_loads(const Problem& pb, const std::vector<double>& x) {
  std::vector<double> y(pb.capacity.size(), 0);
  for (std::size_t s = 0; s < pb.flows.size(); ++s) {
    for (LinkId l : pb.flows[s].links) y[l] += x[s];
  }
  return y;
}

struct Reference {
  std::vector<double> price;  // per Gbit/s
  std::vector<double> rate;   // Gbit/s
  int sweeps = 0;
  bool converged = false;
};

// Naive reference solver for max Σ w_s log x_s s.t. Σ_{s∋l} x_s <= c_l,
// x_s <= cap_s: cyclic coordinate descent on the dual. Each step sets one
// link's price to the exact minimizer of D along that coordinate, i.e. the
// price at which the link's load equals its capacity (0 if the load is below
// capacity even at price 0), found by bisection with the other prices fixed.
// D is convex and differentiable here, so the sweeps converge; they stop when
// every link is within rel_tol of feasibility and every priced link within
// rel_tol of saturation.
inline Reference reference_solve(const Problem& pb, double rel_tol, int max_sweeps) {
  const std::size_t nl = pb.capacity.size();
  const std::size_t nf = pb.flows.size();
  std::vector<std::vector<std::size_t>> on_link(nl);
  for (std::size_t s = 0; s < nf; ++s) {
    for (LinkId l : pb.flows[s].links) on_link[l].push_back(s);
  }
  std::vector<double> cap(nf);
  for (std::size_t s = 0; s < nf; ++s) cap[s] = pb.effective_cap(s);
  Reference r;
  r.price.assign(nl, 1.0);
  std::vector<double> P = path_prices(pb, r.price);
  for (r.sweeps = 0; r.sweeps < max_sweeps; ++r.sweeps) {
    for (std::size_t l = 0; l < nl; ++l) {
      if (on_link[l].empty()) continue;
      const double old = r.price[l];
      auto load = [&](double q) {
        double y = 0;
        for (std::size_t s : on_link[l]) {
          y += best_response(pb.flows[s].weight, P[s] - old + q, cap[s]);
        }
        return y;
      };
      double next = 0;
      if (load(0) > pb.capacity[l]) {
        double lo = 0;
        double hi = std::max(old, 1e-300);
        while (load(hi) > pb.capacity[l]) {
          lo = hi;
          hi *= 2;
        }
        for (int i = 0; i < 200 && hi - lo > 1e-15 * hi; ++i) {
          const double mid = 0.5 * (lo + hi);
          (load(mid) > pb.capacity[l] ? lo : hi) = mid;
        }
        next = hi;
      }
      r.price[l] = next;
      for (std::size_t s : on_link[l]) P[s] += next - old;
    }
    r.rate.resize(nf);
    for (std::size_t s = 0; s < nf; ++s) {
      r.rate[s] = best_response(pb.flows[s].weight, P[s], cap[s]);
    }
    std::vector<double> y = link_loads(pb, r.rate);
    bool ok = true;
    for (std::size_t l = 0; l < nl && ok; ++l) {
      if (on_link[l].empty()) continue;
      const double excess = (y[l] - pb.capacity[l]) / pb.capacity[l];
      ok = excess <= rel_tol && (r.price[l] == 0 || excess >= -rel_tol);
    }
    if (ok) {
      r.converged = true;
      break;
    }
  }
  return r;
}

// Weighted water-filling on one link of capacity c with per-flow caps: the
// weighted-log optimum on a single link. Flows whose cap is below their
// weighted share are frozen at their cap, and the rest share what remains.
inline std::vector<double> single_link_optimum(double c, const std::vector<double>& weight,
                                               const std::vector<double>& cap) {
  const std::size_t n = weight.size();
  std::vector<double> x(n, 0);
  std::vector<bool> frozen(n, false);
  double remaining = c;
  for (;;) {
    double wsum = 0;
    for (std::size_t i = 0; i < n; ++i) wsum += frozen[i] ? 0 : weight[i];
    if (wsum == 0) break;
    const double per_weight = remaining / wsum;
    bool froze = false;
    for (std::size_t i = 0; i < n; ++i) {
      if (!frozen[i] && cap[i] < weight[i] * per_weight) {
        frozen[i] = true;
        x[i] = cap[i];
        remaining -= cap[i];
        froze = true;
      }
    }
    if (froze) continue;
    for (std::size_t i = 0; i < n; ++i) {
      if (!frozen[i]) x[i] = weight[i] * per_weight;
    }
    break;
  }
  return x;
}

// Max-min fair rates by progressive filling: raise every unfrozen flow's rate
// together until a link saturates, freeze the flows through it, repeat.
inline std::vector<double> max_min_rates(const Problem& pb) {
  const std::size_t nf = pb.flows.size();
  std::vector<double> x(nf, 0);
  std::vector<bool> frozen(nf, false);
  std::vector<double> left = pb.capacity;
  for (std::size_t round = 0; round < nf; ++round) {
    std::vector<int> active(pb.capacity.size(), 0);
    for (std::size_t s = 0; s < nf; ++s) {
      if (!frozen[s]) {
        for (LinkId l : pb.flows[s].links) ++active[l];
      }
    }
    double inc = kInf;
    for (std::size_t l = 0; l < pb.capacity.size(); ++l) {
      if (active[l] > 0) inc = std::min(inc, left[l] / active[l]);
    }
    if (std::isinf(inc)) break;
    for (std::size_t s = 0; s < nf; ++s) {
      if (frozen[s]) continue;
      x[s] += inc;
      for (LinkId l : pb.flows[s].links) left[l] -= inc;
    }
    for (std::size_t s = 0; s < nf; ++s) {
      for (LinkId l : pb.flows[s].links) {
        if (left[l] <= 1e-12 * pb.capacity[l]) frozen[s] = true;
      }
    }
  }
  return x;
}

}  // namespace flowtune::alloc::oracle
