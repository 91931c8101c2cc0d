#include "flowtune/alloc/parallel.h"

#include <cmath>
#include <thread>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>
#include <tbb/task_arena.h>

namespace flowtune::alloc {

struct ParallelDriver::Impl {
  explicit Impl(unsigned n) : threads(n), arena(static_cast<int>(n)) {}
  unsigned threads;
  tbb::task_arena arena;
};

ParallelDriver::ParallelDriver(unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  impl_ = std::make_unique<Impl>(threads);
}

ParallelDriver::~ParallelDriver() = default;

unsigned ParallelDriver::threads() const { return impl_->threads; }

std::uint32_t ParallelDriver::blocks_for_threads(unsigned threads) {
  auto b = static_cast<std::uint32_t>(std::ceil(std::sqrt(static_cast<double>(threads))));
  return std::max(1u, b);
}

template <typename Real>
void ParallelDriver::iterate(BasicEngine<Real>& e) {
  using Partial = typename BasicEngine<Real>::LinkPartial;
  e.prepare();
  impl_->arena.execute([&] {
    const std::size_t nb = e.num_blocks();
    tbb::parallel_for(
        tbb::blocked_range<std::size_t>(0, nb, 1),
        [&](const tbb::blocked_range<std::size_t>& r) {
          for (std::size_t b = r.begin(); b != r.end(); ++b) e.rate_pass(b);
        },
        tbb::simple_partitioner());
    // Links are few next to flows; a coarse grain keeps scheduling overhead low.
    const std::size_t nl = e.num_links();
    const std::size_t grain = std::max<std::size_t>(1024, nl / (4 * impl_->threads) + 1);
    Partial all = tbb::parallel_reduce(
        tbb::blocked_range<std::size_t>(0, nl, grain), Partial{},
        [&](const tbb::blocked_range<std::size_t>& r, Partial acc) {
          return BasicEngine<Real>::combine(acc, e.update_links(r.begin(), r.end()));
        },
        [](const Partial& a, const Partial& b) { return BasicEngine<Real>::combine(a, b); });
    e.finish_links(all);
    tbb::parallel_for(
        tbb::blocked_range<std::size_t>(0, nb, 1),
        [&](const tbb::blocked_range<std::size_t>& r) {
          for (std::size_t b = r.begin(); b != r.end(); ++b) e.normalize_pass(b);
        },
        tbb::simple_partitioner());
  });
}

template <typename Real>
std::uint64_t ParallelDriver::solve(BasicEngine<Real>& e, std::uint64_t max_iterations) {
  std::uint64_t n = 0;
  while (n < max_iterations) {
    iterate(e);
    ++n;
    if (e.stats().converged) break;
  }
  return n;
}

template void ParallelDriver::iterate(BasicEngine<float>&);
template void ParallelDriver::iterate(BasicEngine<double>&);
template std::uint64_t ParallelDriver::solve(BasicEngine<float>&, std::uint64_t);
template std::uint64_t ParallelDriver::solve(BasicEngine<double>&, std::uint64_t);

}  // namespace flowtune::alloc
