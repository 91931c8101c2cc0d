#include "flowtune/alloc/parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>
#include <tbb/task_arena.h>

#include "flowtune/alloc/engine_driver.h"
#include "worker_team.h"

namespace flowtune::alloc {

const char* to_string(Schedule s) {
  switch (s) {
    case Schedule::kTbb: return "tbb";
    case Schedule::kPersistent: return "persistent";
    case Schedule::kTeam: return "team";
  }
  return "?";
}

namespace {

// Chooses between running an iteration on the team and on the calling
// thread alone, by timing both at the start, again every period
// iterations, and when the engine's flow count has halved or doubled since
// (the crossover is a matter of size) and is at least kMinFlows, at most
// once per kMinGap iterations (a few churning flows must not keep it
// trying). The period starts at kPeriod and doubles, up to kMaxPeriod,
// each time a trial confirms the choice before it. A trial alternates runs
// of kRun iterations each way, kRuns times: alternating so both ways see
// the same machine state (it drifts on a shared host), in runs because the
// first kSkip iterations after a switch pay for it and are not counted: the
// switch re-partitions the engine on the calling thread, so the helpers'
// blocks start in the wrong core's cache, and helpers wake.
// Each way is judged by the median of its counted iterations (a preempted
// one does not decide). Trials cost at most kRun·kRuns / kPeriod of the
// iterations run the slower way (less once the choice holds), kRun·kRuns /
// kMinGap while the size swings.
class SoloOrTeam {
 public:
  static constexpr std::size_t kRun = 6;
  static constexpr std::size_t kSkip = 2;
  static constexpr std::size_t kRuns = 2;
  static constexpr std::uint64_t kPeriod = 1024;
  static constexpr std::uint64_t kMaxPeriod = 16 * kPeriod;
  static constexpr std::uint64_t kMinGap = 256;
  static constexpr std::size_t kMinFlows = 256;
  static_assert(kRun > kSkip && kRuns >= 1, "every trial must time each way at least once");

  // Whether the next iteration runs solo.
  bool next_solo(std::size_t flows) {
    const bool resized = std::max(flows, flows_) >= kMinFlows &&
                         (flows > 2 * flows_ || 2 * flows < flows_) && since_ >= kMinGap;
    if (!trying_ && (since_ >= period_ || resized)) {
      if (resized) period_ = kPeriod;
      trying_ = true;
      team_.clear();
      solo_.clear();
    }
    if (!trying_) return chose_solo_;
    return (step_ / kRun) % 2 == 1;
  }
  // Records how long the iteration next_solo() chose took.
  void ran(bool solo, double seconds, std::size_t flows) {
    ++since_;
    if (!trying_) return;
    if (step_ % kRun >= kSkip) (solo ? solo_ : team_).push_back(seconds);
    if (++step_ < 2 * kRun * kRuns) return;
    const bool solo_wins = median(solo_) < median(team_);
    period_ = decided_ && solo_wins == chose_solo_ ? std::min(2 * period_, kMaxPeriod) : kPeriod;
    chose_solo_ = solo_wins;
    decided_ = true;
    trying_ = false;
    step_ = 0;
    since_ = 0;
    flows_ = flows;
  }

 private:
  static double median(std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    const std::size_t mid = v.size() / 2;
    return v.size() % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
  }

  bool trying_ = true;
  bool chose_solo_ = false;
  bool decided_ = false;            // a trial has ended
  std::uint64_t period_ = kPeriod;  // iterations between trials
  std::size_t step_ = 0;     // iterations into the current trial
  std::uint64_t since_ = 0;  // iterations since the last decision
  std::size_t flows_ = 0;    // the engine's flows when it was made
  std::vector<double> team_, solo_;
};

}  // namespace

struct ParallelDriver::Impl {
  Impl(unsigned n, Schedule s, bool one) : threads(n), schedule(s), one_block_solo(one) {
    if (s == Schedule::kTbb) {
      arena = std::make_unique<tbb::task_arena>(static_cast<int>(n));
    } else {
      team = std::make_unique<detail::WorkerTeam>(n);
      partials.resize(n);
    }
  }
  unsigned threads;
  Schedule schedule;
  bool one_block_solo;
  std::unique_ptr<tbb::task_arena> arena;
  std::unique_ptr<detail::WorkerTeam> team;
  // One link-step result per thread, a cache line each (written by its
  // thread, read by thread 0 after the barrier).
  struct alignas(64) Partial {
    double max_residual, max_raw_utilization, max_ratio;
  };
  std::vector<Partial> partials;
  SoloOrTeam chooser;
  std::uint64_t solo_iterations = 0;
};

ParallelDriver::ParallelDriver(unsigned threads, Schedule schedule, bool one_block_solo) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  impl_ = std::make_unique<Impl>(threads, schedule, one_block_solo);
}

ParallelDriver::~ParallelDriver() = default;

unsigned ParallelDriver::threads() const { return impl_->threads; }

Schedule ParallelDriver::schedule() const { return impl_->schedule; }

std::uint64_t ParallelDriver::solo_iterations() const { return impl_->solo_iterations; }

std::uint32_t ParallelDriver::blocks_for_threads(unsigned threads) {
  auto b = static_cast<std::uint32_t>(std::ceil(std::sqrt(static_cast<double>(threads))));
  return std::max(1u, b);
}

template <typename Real>
void ParallelDriver::iterate(BasicEngine<Real>& e) {
  if (impl_->schedule == Schedule::kTbb) {
    iterate_tbb(e);
  } else {
    iterate_persistent(e);
  }
}

template <typename Real>
void ParallelDriver::iterate_tbb(BasicEngine<Real>& e) {
  using View = DriverView<BasicEngine<Real>>;
  using Partial = typename View::LinkPartial;
  const View d(e);
  d.prepare();
  impl_->arena->execute([&] {
    const std::size_t nb = e.num_blocks();
    tbb::parallel_for(
        tbb::blocked_range<std::size_t>(0, nb, 1),
        [&](const tbb::blocked_range<std::size_t>& r) {
          for (std::size_t b = r.begin(); b != r.end(); ++b) d.rate_pass(b);
        },
        tbb::simple_partitioner());
    // Links are few next to flows; a coarse grain keeps scheduling overhead low.
    const std::size_t nl = e.num_links();
    const std::size_t grain = std::max<std::size_t>(1024, nl / (4 * impl_->threads) + 1);
    Partial all = tbb::parallel_reduce(
        tbb::blocked_range<std::size_t>(0, nl, grain), Partial{},
        [&](const tbb::blocked_range<std::size_t>& r, Partial acc) {
          return View::combine(acc, d.update_links(r.begin(), r.end()));
        },
        [](const Partial& a, const Partial& b) { return View::combine(a, b); });
    d.finish_links(all);
    tbb::parallel_for(
        tbb::blocked_range<std::size_t>(0, nb, 1),
        [&](const tbb::blocked_range<std::size_t>& r) {
          for (std::size_t b = r.begin(); b != r.end(); ++b) d.normalize_pass(b);
        },
        tbb::simple_partitioner());
  });
}

template <typename Real>
void ParallelDriver::iterate_persistent(BasicEngine<Real>& e) {
  if (impl_->threads == 1) {
    e.iterate();
    ++impl_->solo_iterations;
    return;
  }
  if (impl_->schedule == Schedule::kTeam) {
    iterate_team(e);
    return;
  }
  SoloOrTeam& chooser = impl_->chooser;
  const std::size_t flows = e.num_flows();
  const bool solo = chooser.next_solo(flows);
  const auto t0 = std::chrono::steady_clock::now();
  if (solo) {
    // Refused only where one block could not hold every link: then alone on
    // the team's layout.
    if (impl_->one_block_solo) e.set_blocks(1);
    e.iterate();
    ++impl_->solo_iterations;
  } else {
    if (e.blocks_per_side() != e.config().blocks) e.set_blocks(e.config().blocks);
    iterate_team(e);
  }
  const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  chooser.ran(solo, dt.count(), flows);
}

// Thread t takes blocks t, t + T, ... and the t-th of T equal link ranges.
// Thread 0 combines the link partials in thread order (a fixed order, so
// the statistics do not depend on timing) and publishes them before any
// block is normalized (U-NORM reads the global ratio).
template <typename Real>
void ParallelDriver::iterate_team(BasicEngine<Real>& e) {
  using View = DriverView<BasicEngine<Real>>;
  using Partial = typename View::LinkPartial;
  const View d(e);
  d.prepare();
  detail::WorkerTeam& team = *impl_->team;
  auto& partials = impl_->partials;
  const unsigned nt = team.threads();
  const std::size_t nb = e.num_blocks();
  const std::size_t nl = e.num_links();
  auto job = [&](unsigned t) {
    for (std::size_t b = t; b < nb; b += nt) d.rate_pass(b);
    team.barrier();
    const Partial p = d.update_links(nl * t / nt, nl * (t + 1) / nt);
    partials[t] = {p.max_residual, p.max_raw_utilization, p.max_ratio};
    team.barrier();
    if (t == 0) {
      Partial all;
      for (const auto& q : partials) {
        all = View::combine(all, {q.max_residual, q.max_raw_utilization, q.max_ratio});
      }
      d.finish_links(all);
    }
    team.barrier();
    for (std::size_t b = t; b < nb; b += nt) d.normalize_pass(b);
  };
  team.run(job);
}

template <typename Real>
std::uint64_t ParallelDriver::solve(BasicEngine<Real>& e, std::uint64_t max_iterations) {
  return iterate_until_converged(e, max_iterations, [this](BasicEngine<Real>& x) { iterate(x); });
}

template void ParallelDriver::iterate(BasicEngine<float>&);
template void ParallelDriver::iterate(BasicEngine<double>&);
template std::uint64_t ParallelDriver::solve(BasicEngine<float>&, std::uint64_t);
template std::uint64_t ParallelDriver::solve(BasicEngine<double>&, std::uint64_t);

}  // namespace flowtune::alloc
