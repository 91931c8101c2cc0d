// Multi-core driver for the engine (paper §4) on oneTBB. Each iteration runs
// three parallel steps over the engine's own step functions:
//   1. rate pass per FlowBlock (each writes only its private LinkBlock copies),
//   2. aggregation + price update over disjoint ranges of global links,
//   3. price/ratio redistribution + normalization per FlowBlock.
// On shared memory the paper's log-step diagonal aggregation (Fig. 5) reduces
// to step 2: every global link is summed by exactly one task, reading each
// block's copy once, in block order. Results are therefore bit-identical to
// BasicEngine::iterate() for the same block count.
#pragma once

#include <cstdint>
#include <memory>

#include "flowtune/alloc/engine.h"

namespace flowtune::alloc {

class ParallelDriver {
 public:
  // threads == 0: one per available core.
  explicit ParallelDriver(unsigned threads = 0);
  ~ParallelDriver();
  ParallelDriver(const ParallelDriver&) = delete;
  ParallelDriver& operator=(const ParallelDriver&) = delete;

  unsigned threads() const;

  template <typename Real>
  void iterate(BasicEngine<Real>& engine);
  // iterate() until converged or max_iterations; returns iterations run.
  template <typename Real>
  std::uint64_t solve(BasicEngine<Real>& engine, std::uint64_t max_iterations);

  // Blocks per side that give every thread at least one FlowBlock.
  static std::uint32_t blocks_for_threads(unsigned threads);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

extern template void ParallelDriver::iterate(BasicEngine<float>&);
extern template void ParallelDriver::iterate(BasicEngine<double>&);
extern template std::uint64_t ParallelDriver::solve(BasicEngine<float>&, std::uint64_t);
extern template std::uint64_t ParallelDriver::solve(BasicEngine<double>&, std::uint64_t);

}  // namespace flowtune::alloc
