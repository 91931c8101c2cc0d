// Multi-core driver for the engine (paper §4). Each iteration runs three
// parallel steps over the engine's own step functions:
//   1. rate pass per FlowBlock (each writes only its private LinkBlock copies),
//   2. aggregation + price update over disjoint ranges of global links,
//   3. price/ratio redistribution + normalization per FlowBlock.
// On shared memory the paper's log-step diagonal aggregation (Fig. 5) reduces
// to step 2: every global link is summed by exactly one task, reading each
// block's copy once, in block order. Results are therefore bit-identical to
// BasicEngine::iterate() for the same block count.
//
// Two ways to run the steps (Schedule): on oneTBB, three fork-joins of its
// task pool per iteration; or on a persistent team of threads that meet at
// a spin-then-futex barrier between steps, each taking a fixed share of
// blocks and links (no task scheduling; docs/engine.md compares the two).
// Below some size the threads cost more in cache lines passed between cores
// than they save (the crossover depends on the machine: ~6-12k flows on 2
// cores here), so the persistent driver times both ways now and then and
// runs every step on the calling thread while that is faster. Alone, it
// runs the engine re-partitioned into one FlowBlock (BasicEngine::
// set_blocks), since the team's layout costs one thread ~6% in private link
// copies, and puts the engine's own layout back for the team: rates then
// match the serial engine's to rounding, not bit for bit. With
// one_block_solo off both ways keep the engine's layout and compute the
// same bits (blocks are summed in block order either way).
#pragma once

#include <cstdint>
#include <memory>

#include "flowtune/alloc/engine.h"

namespace flowtune::alloc {

// kPersistent: the team, or the caller alone while that measures faster;
// kTeam: the team on every iteration; kTbb: oneTBB's task pool.
enum class Schedule { kTbb, kPersistent, kTeam };
const char* to_string(Schedule s);

class ParallelDriver {
 public:
  // threads == 0: one per available core.
  explicit ParallelDriver(unsigned threads = 0, Schedule schedule = Schedule::kPersistent,
                          bool one_block_solo = true);
  ~ParallelDriver();
  ParallelDriver(const ParallelDriver&) = delete;
  ParallelDriver& operator=(const ParallelDriver&) = delete;

  unsigned threads() const;
  Schedule schedule() const;
  // Iterations the persistent driver ran on the calling thread alone.
  std::uint64_t solo_iterations() const;

  template <typename Real>
  void iterate(BasicEngine<Real>& engine);
  // iterate() until converged or max_iterations; returns iterations run.
  template <typename Real>
  std::uint64_t solve(BasicEngine<Real>& engine, std::uint64_t max_iterations);

  // Blocks per side that give every thread at least one FlowBlock.
  static std::uint32_t blocks_for_threads(unsigned threads);

 private:
  template <typename Real>
  void iterate_tbb(BasicEngine<Real>& engine);
  template <typename Real>
  void iterate_persistent(BasicEngine<Real>& engine);
  template <typename Real>
  void iterate_team(BasicEngine<Real>& engine);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

extern template void ParallelDriver::iterate(BasicEngine<float>&);
extern template void ParallelDriver::iterate(BasicEngine<double>&);
extern template std::uint64_t ParallelDriver::solve(BasicEngine<float>&, std::uint64_t);
extern template std::uint64_t ParallelDriver::solve(BasicEngine<double>&, std::uint64_t);

}  // namespace flowtune::alloc
