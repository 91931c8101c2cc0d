// A fixed team of threads that runs one job at a time, with a barrier the
// job's phases synchronize on. The engine's iteration is three short
// parallel steps; forking and joining a task pool for each costs more than a
// step itself at small sizes on this machine (the runs, by size:
// docs/results/engine-threads.md), so the team keeps its threads and hands
// phases over through two shared words.
//
// Waiting spins on the word for a bounded time (a step's length), then
// sleeps in the kernel (futex). A thread announces that it sleeps before it
// rechecks the word, and a waker checks for sleepers after it changes the
// word, both sequentially consistent, so a wake-up cannot be lost and the
// common case (nobody asleep) makes no system call.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace flowtune::alloc::detail {

class WorkerTeam {
 public:
  // threads >= 1; threads - 1 helper threads are started (the caller of
  // run() is thread 0).
  explicit WorkerTeam(unsigned threads);
  ~WorkerTeam();
  WorkerTeam(const WorkerTeam&) = delete;
  WorkerTeam& operator=(const WorkerTeam&) = delete;

  unsigned threads() const { return threads_; }

  // Runs job(t) on every thread t of the team and returns when all returned.
  // One run at a time, from one caller thread. A job that throws ends the
  // process (noexcept): threads left between barriers could not be
  // brought back in step.
  template <typename Job>
  void run(Job& job) {
    run_erased(&job, [](void* j, unsigned t) noexcept { (*static_cast<Job*>(j))(t); });
  }

  // Inside a job: returns once every thread of the team has called it.
  void barrier();

 private:
  using Fn = void (*)(void*, unsigned) noexcept;
  void run_erased(void* job, Fn fn);
  void helper(unsigned t);
  // Waits until word no longer holds seen: spin, then futex.
  void wait_change(const std::atomic<std::uint32_t>& word, std::uint32_t seen);
  void publish(std::atomic<std::uint32_t>& word);

  const unsigned threads_;
  // Barrier state, each on its own cache line: arrivals in this round, and
  // the round number the last arrival bumps.
  alignas(64) std::atomic<std::uint32_t> arrived_{0};
  alignas(64) std::atomic<std::uint32_t> round_{0};
  alignas(64) std::atomic<std::uint32_t> sleepers_{0};
  void* job_ = nullptr;
  Fn fn_ = nullptr;
  bool stop_ = false;  // written before the barrier that releases helpers
  std::vector<std::thread> helpers_;
};

}  // namespace flowtune::alloc::detail
