// What the flow-level simulator feeds the engine: flowlet sizes drawn from a
// measured flow-size CDF, Poisson arrivals, and uniformly random host pairs.
// Everything draws from one seeded generator whose output is defined here
// (not by the standard library's distributions), so a seed names the same
// workload on every platform.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace flowtune::sim {

// A bad workload file or name; the message names the file and line.
class WorkloadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// SplitMix64: tiny, fast, passes BigCrush, and fully specified.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1), 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; the bias is
  // below 2^-40 for any n the simulator uses).
  std::uint32_t below(std::uint32_t n) {
    return static_cast<std::uint32_t>(((next() >> 32) * static_cast<std::uint64_t>(n)) >> 32);
  }
  // Exponential with the given mean.
  double exponential(double mean);

 private:
  std::uint64_t state_;
};

class FlowSizeCdf {
 public:
  enum class Sampling {
    kStep,    // the smallest size whose CDF reaches the draw
    kLinear,  // interpolate between neighbouring points
  };

  // Two formats (workloads/README.md): a first line holding one number (the
  // mean; rows then sampled as steps), or two-column `size cdf` rows sampled
  // linearly. A CDF ending at 100 is read as percent. Throws WorkloadError.
  static FlowSizeCdf load(const std::string& path);
  // Sizes must ascend, probabilities must not decrease and end at 1.
  FlowSizeCdf(std::vector<double> sizes, std::vector<double> cdf, Sampling sampling);

  double sample(Rng& rng) const { return quantile(rng.uniform()); }
  // The size at cumulative probability u in [0, 1).
  double quantile(double u) const;
  // The distribution's exact mean under its sampling rule.
  double mean() const { return mean_; }
  // The mean the file states on its first line, or 0 if none.
  double stated_mean() const { return stated_mean_; }
  Sampling sampling() const { return sampling_; }
  double max_size() const { return sizes_.back(); }

 private:
  std::vector<double> sizes_;
  std::vector<double> cdf_;
  Sampling sampling_;
  double mean_ = 0;
  double stated_mean_ = 0;
};

// The built-in workloads (allocator/sim/workloads/): web, cache, hadoop,
// websearch, datamining.
const std::vector<std::string>& workload_names();
// A built-in name or a path to a CDF file. Built-ins are looked up in
// $FLOWTUNE_WORKLOADS, then the installed share directory, then the source
// tree. Throws WorkloadError naming what was tried.
FlowSizeCdf load_workload(const std::string& name_or_path);

// Poisson arrivals of flowlets into a network of hosts, each host's link of
// host_link_bps loaded to `load` on average: 100% load is when flowlets enter
// at (total host capacity) / (mean size) per second (paper §5.3).
class PoissonArrivals {
 public:
  PoissonArrivals(double load, std::uint32_t hosts, double host_link_bps, double mean_bytes);
  double rate_per_s() const { return rate_; }
  // Time of the next arrival after the previous one (starts at 0).
  double next(Rng& rng) {
    now_ += rng.exponential(1.0 / rate_);
    return now_;
  }

 private:
  double rate_;
  double now_ = 0;
};

}  // namespace flowtune::sim
