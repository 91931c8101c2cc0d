#include "worker_team.h"

#include <chrono>
#include <climits>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace flowtune::alloc::detail {
namespace {

// How long a waiting thread spins before it sleeps: longer than one step of
// an iteration at the sizes where threads pay off (tens of microseconds), so
// back-to-back iterations never sleep, and short enough that an idle
// allocator's helpers are asleep almost at once.
constexpr auto kSpinFor = std::chrono::microseconds(50);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

void futex_wait(const std::atomic<std::uint32_t>* word, std::uint32_t seen) {
  // EAGAIN (the word changed) and EINTR both mean: look again.
  syscall(SYS_futex, reinterpret_cast<const std::uint32_t*>(word), FUTEX_WAIT_PRIVATE, seen,
          nullptr, nullptr, 0);
}

void futex_wake_all(std::atomic<std::uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}

}  // namespace

WorkerTeam::WorkerTeam(unsigned threads) : threads_(threads < 1 ? 1 : threads) {
  helpers_.reserve(threads_ - 1);
  try {
    for (unsigned t = 1; t < threads_; ++t) helpers_.emplace_back([this, t] { helper(t); });
  } catch (...) {
    // The helpers started wait at the first barrier for a team that will
    // never be whole: release them one by one (each needs no partner) and
    // say why. Done by hand: the barrier counts to threads_.
    stop_ = true;
    for (;;) {
      const std::uint32_t waiting = arrived_.load(std::memory_order_acquire);
      if (waiting == helpers_.size()) break;
      std::this_thread::yield();
    }
    arrived_.store(0, std::memory_order_relaxed);
    publish(round_);
    for (auto& h : helpers_) h.join();
    throw;
  }
}

WorkerTeam::~WorkerTeam() {
  stop_ = true;
  if (!helpers_.empty()) barrier();  // releases helpers waiting for a job
  for (auto& h : helpers_) h.join();
}

void WorkerTeam::wait_change(const std::atomic<std::uint32_t>& word, std::uint32_t seen) {
  const auto until = std::chrono::steady_clock::now() + kSpinFor;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (word.load(std::memory_order_acquire) != seen) return;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= until) break;
  }
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  while (word.load(std::memory_order_seq_cst) == seen) futex_wait(&word, seen);
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
}

void WorkerTeam::publish(std::atomic<std::uint32_t>& word) {
  word.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake_all(&word);
}

void WorkerTeam::barrier() {
  if (threads_ == 1) return;
  // The round cannot end before this thread arrives, so reading it first
  // cannot miss the bump.
  const std::uint32_t round = round_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == threads_) {
    arrived_.store(0, std::memory_order_relaxed);  // ordered before the bump
    publish(round_);
    return;
  }
  wait_change(round_, round);
}

void WorkerTeam::run_erased(void* job, Fn fn) {
  job_ = job;
  fn_ = fn;
  barrier();  // start: helpers wait here between jobs
  fn(job, 0);
  barrier();  // finish
}

void WorkerTeam::helper(unsigned t) {
  for (;;) {
    barrier();
    if (stop_) return;
    fn_(job_, t);
    barrier();
  }
}

}  // namespace flowtune::alloc::detail
