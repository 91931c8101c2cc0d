// Workloads shared by the benchmarks: random host pairs on a host topology.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "flowtune/alloc/engine.h"

namespace flowtune::bench {

// n flows between uniformly random distinct hosts with random ECMP hashes;
// the same flows for a given seed.
inline std::vector<alloc::FlowSpec> random_host_pairs(const alloc::Topology& t, std::uint32_t n,
                                                      std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<alloc::HostId> host(0, t.num_hosts() - 1);
  std::vector<alloc::FlowSpec> out;
  out.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    alloc::HostId src = host(rng);
    alloc::HostId dst = host(rng);
    while (dst == src) dst = host(rng);
    out.push_back(alloc::make_flow(t, src, dst, rng()));
  }
  return out;
}

}  // namespace flowtune::bench
