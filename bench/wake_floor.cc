// What waking a sleeping thread costs the thread that wakes it: the floor
// under any design in which a flowlet's start (on the application's thread)
// wakes the library's runtime thread with a system call (issue 16's goal:
// at most 2 µs added per start).
//
// A consumer thread blocks in epoll_wait on an eventfd and a signalfd, as
// the runtime blocks in its loop; every 2 ms the producer wakes it one way
// and times the call alone (steady_clock), then spins 15 µs (the rest of
// a send) and times that too, so wake-up preemption of the producer shows.
// Ways: an eventfd write, and tgkill of a real-time signal read from a
// signalfd (what libflowtune's runtime uses). Consumer policies: the
// default, SCHED_BATCH and SCHED_IDLE (the kernel then does not preempt the
// waker for it). Baseline, same run: the same eventfd write when the
// consumer is awake (spinning), so nothing is woken. Also reported: how
// long after the call the consumer ran (woken_*), which a start's way to
// the allocator pays.
//
// Then the other ways issue 16 names (futex, adaptive spinning, io_uring,
// no wake-up at all), at two gaps between starts (measure_other).
//
// Prints one JSON object. Usage: wake_floor [ROUNDS] (default 400)
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <linux/futex.h>
#include <liburing.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

const int kSignal = SIGRTMAX - 2;

void spin_us(int us) {
  const auto t = Clock::now();
  while (Clock::now() - t < std::chrono::microseconds(us)) {
  }
}

struct Result {
  double wake_p50_ns, wake_p90_ns, with_work_p50_ns, with_work_p90_ns, woken_p50_ns, woken_p90_ns;
};

double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}

// One configuration: `way` "eventfd" or "tgkill"; `policy` for the consumer;
// `asleep` false keeps the consumer spinning (nothing to wake).
Result measure(const std::string& way, int policy, bool asleep, int rounds) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, kSignal);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // inherited by the consumer
  const int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  const int sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  std::atomic<pid_t> tid{0};
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> woke_ns{0};  // when the consumer last returned from its wait
  std::thread consumer([&] {
    tid = static_cast<pid_t>(syscall(SYS_gettid));
    sched_param p{};
    if (policy != SCHED_OTHER) pthread_setschedparam(pthread_self(), policy, &p);
    const int ep = epoll_create1(EPOLL_CLOEXEC);
    for (const int fd : {efd, sfd}) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    }
    char buf[256];
    while (!stop.load()) {
      epoll_event out[2];
      const int n = asleep ? epoll_wait(ep, out, 2, 50) : 0;
      if (n > 0) woke_ns = Clock::now().time_since_epoch().count();
      for (int i = 0; i < n; ++i) (void)!read(out[i].data.fd, buf, sizeof buf);
      if (!asleep) {
        (void)!read(efd, buf, sizeof buf);
        spin_us(1);
      }
    }
    close(ep);
  });
  while (tid.load() == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  std::vector<double> wake, with_work, woken;
  for (int i = 0; i < rounds; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    woke_ns = 0;
    const auto t0 = Clock::now();
    if (way == "tgkill") {
      syscall(SYS_tgkill, getpid(), tid.load(), kSignal);
    } else {
      const std::uint64_t one = 1;
      (void)!write(efd, &one, sizeof one);
    }
    const auto t1 = Clock::now();
    spin_us(15);
    const auto t2 = Clock::now();
    wake.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
    with_work.push_back(std::chrono::duration<double, std::nano>(t2 - t0).count());
    if (asleep) {
      while (woke_ns.load() == 0 && Clock::now() - t0 < std::chrono::milliseconds(100)) {
        std::this_thread::yield();
      }
      woken.push_back(static_cast<double>(woke_ns.load() - t0.time_since_epoch().count()));
    }
  }
  if (woken.empty()) woken.push_back(0);
  stop = true;
  if (asleep) {
    const std::uint64_t one = 1;
    (void)!write(efd, &one, sizeof one);
  }
  consumer.join();
  close(efd);
  close(sfd);
  return {pct(wake, 0.5),      pct(wake, 0.9),  pct(with_work, 0.5),
          pct(with_work, 0.9), pct(woken, 0.5), pct(woken, 0.9)};
}

// The other ways issue 16 names, each with a consumer that does nothing but
// wait for the producer's wake-ups, `gap_us` apart:
//   futex        FUTEX_WAKE on a word the consumer waits on (FUTEX_WAIT), always;
//   spin-futex   the consumer spins `spin_us` after each wake-up before it
//                waits; the producer makes the FUTEX_WAKE call only when the
//                consumer said it is about to wait (adaptive spinning);
//   uring-msg    the consumer waits in io_uring_wait_cqe; the producer posts
//                to its ring with IORING_OP_MSG_RING from a ring of its own
//                (one io_uring_enter);
//   timer        no wake-up at all: the producer sets a flag and the consumer
//                looks every `spin_us` (a deferred start, found on a timer).
// Also reported: the consumer's CPU time per wake-up (what spinning costs).
struct Futex {
  std::atomic<std::uint32_t> word{0};
  std::atomic<bool> waiting{false};
};

long futex(std::atomic<std::uint32_t>* w, int op, std::uint32_t v, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(w), op, v, ts, nullptr, 0);
}

double thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

struct Other {
  Result r;
  double consumer_cpu_ns_per_wake;
};

// What measure_other's producer and consumer share.
struct OtherWay {
  std::string way;
  int spin_period_us = 0;  // the consumer's spin (spin-futex) or period (timer)
  bool uring = false;
  Futex f;
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> woke_ns{0};
  std::atomic<std::uint32_t> seen{0};
  std::atomic<double> consumer_cpu{0};
  io_uring consumer_ring{}, producer_ring{};

  void note(std::uint32_t v) {
    if (v != seen.load(std::memory_order_relaxed)) {
      seen = v;
      woke_ns = Clock::now().time_since_epoch().count();
    }
  }
};

// The consumer: waits for wake-ups the way `w.way` says until told to stop.
void consume(OtherWay& w) {
  Futex& f = w.f;
  const double cpu0 = thread_cpu_ns();
  while (!w.stop.load()) {
    if (w.way == "timer") {
      w.note(f.word.load());
      std::this_thread::sleep_for(std::chrono::microseconds(w.spin_period_us));
    } else if (w.uring) {
      io_uring_cqe* cqe = nullptr;
      if (io_uring_wait_cqe(&w.consumer_ring, &cqe) == 0) {
        w.note(static_cast<std::uint32_t>(cqe->user_data));
        io_uring_cqe_seen(&w.consumer_ring, cqe);
      }
    } else {
      if (w.way == "spin-futex") {  // spin a while for the next one
        const auto t = Clock::now();
        while (f.word.load() == w.seen.load() && !w.stop.load() &&
               Clock::now() - t < std::chrono::microseconds(w.spin_period_us)) {
        }
        w.note(f.word.load());
        if (f.word.load() != w.seen.load()) continue;
      }
      const std::uint32_t v = w.seen.load();
      f.waiting = true;
      // Waits only while the word is still what was seen: no lost wake-up.
      if (f.word.load() == v && !w.stop.load()) futex(&f.word, FUTEX_WAIT_PRIVATE, v, nullptr);
      f.waiting = false;
      w.note(f.word.load());
    }
  }
  w.consumer_cpu = thread_cpu_ns() - cpu0;
}

// The producer's wake-up for the word's new value v (none for the timer).
void wake_consumer(OtherWay& w, std::uint32_t v) {
  if (w.way == "futex" || (w.way == "spin-futex" && w.f.waiting.load())) {
    futex(&w.f.word, FUTEX_WAKE_PRIVATE, 1, nullptr);
  } else if (w.uring) {
    io_uring_sqe* sqe = io_uring_get_sqe(&w.producer_ring);
    io_uring_prep_msg_ring(sqe, w.consumer_ring.ring_fd, 0, v, 0);
    sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
    io_uring_submit(&w.producer_ring);
  }
}

// Tells the consumer to stop, wakes it whichever way it waits, joins it
// and frees the rings.
void stop_consumer(OtherWay& w, std::thread& consumer) {
  w.stop = true;
  w.f.word.fetch_add(1);
  futex(&w.f.word, FUTEX_WAKE_PRIVATE, 1, nullptr);
  if (w.uring) {
    io_uring_sqe* sqe = io_uring_get_sqe(&w.producer_ring);
    io_uring_prep_msg_ring(sqe, w.consumer_ring.ring_fd, 0, 0, 0);
    io_uring_submit(&w.producer_ring);
  }
  consumer.join();
  if (w.uring) {
    io_uring_queue_exit(&w.consumer_ring);
    io_uring_queue_exit(&w.producer_ring);
  }
}

Other measure_other(const std::string& way, int gap_us, int spin_us_, int rounds) {
  OtherWay w;
  w.way = way;
  w.spin_period_us = spin_us_;
  w.uring = way == "uring-msg";
  if (w.uring && (io_uring_queue_init(8, &w.consumer_ring, 0) < 0 ||
                  io_uring_queue_init(8, &w.producer_ring, 0) < 0)) {
    return {{-1, -1, -1, -1, -1, -1}, -1};
  }
  std::thread consumer([&w] { consume(w); });
  std::vector<double> wake, with_work, woken;
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  for (int i = 0; i < rounds; ++i) {
    const auto gap_end = Clock::now() + std::chrono::microseconds(gap_us);
    if (gap_us >= 1000) {
      std::this_thread::sleep_until(gap_end);
    } else {
      while (Clock::now() < gap_end) {
      }
    }
    w.woke_ns = 0;
    const auto t0 = Clock::now();
    wake_consumer(w, w.f.word.fetch_add(1) + 1);
    const auto t1 = Clock::now();
    spin_us(15);
    const auto t2 = Clock::now();
    wake.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
    with_work.push_back(std::chrono::duration<double, std::nano>(t2 - t0).count());
    while (w.woke_ns.load() == 0 && Clock::now() - t0 < std::chrono::milliseconds(100)) {
      std::this_thread::yield();
    }
    woken.push_back(static_cast<double>(w.woke_ns.load() - t0.time_since_epoch().count()));
    if (w.uring) {  // reap what the producer's ring may have posted (errors)
      io_uring_cqe* cqe = nullptr;
      while (io_uring_peek_cqe(&w.producer_ring, &cqe) == 0)
        io_uring_cqe_seen(&w.producer_ring, cqe);
    }
  }
  stop_consumer(w, consumer);
  return {{pct(wake, 0.5), pct(wake, 0.9), pct(with_work, 0.5), pct(with_work, 0.9),
           pct(woken, 0.5), pct(woken, 0.9)},
          w.consumer_cpu.load() / rounds};
}

const char* policy_name(int p) {
  return p == SCHED_BATCH ? "batch" : p == SCHED_IDLE ? "idle" : "default";
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(10, std::atoi(argv[1])) : 400;
  std::printf("{\"benchmark\": \"wake_floor\", \"rounds\": %d, \"rows\": [", rounds);
  bool first = true;
  auto row = [&](const std::string& way, int policy, bool asleep) {
    const Result r = measure(way, policy, asleep, rounds);
    std::printf("%s\n  {\"way\": \"%s\", \"consumer\": \"%s\", \"asleep\": %s, "
                "\"wake_p50_ns\": %.0f, \"wake_p90_ns\": %.0f, "
                "\"with_15us_work_p50_ns\": %.0f, \"with_15us_work_p90_ns\": %.0f, "
                "\"woken_p50_ns\": %.0f, \"woken_p90_ns\": %.0f}",
                first ? "" : ",", way.c_str(), policy_name(policy), asleep ? "true" : "false",
                r.wake_p50_ns, r.wake_p90_ns, r.with_work_p50_ns, r.with_work_p90_ns,
                r.woken_p50_ns, r.woken_p90_ns);
    first = false;
  };
  row("eventfd", SCHED_OTHER, false);  // the baseline: nobody to wake
  for (const char* way : {"eventfd", "tgkill"}) {
    for (const int policy : {SCHED_OTHER, SCHED_BATCH, SCHED_IDLE}) row(way, policy, true);
  }
  std::printf("\n], \"other_ways\": [");
  first = true;
  auto other = [&](const std::string& way, int gap_us, int spin) {
    const Other o = measure_other(way, gap_us, spin, rounds);
    std::printf("%s\n  {\"way\": \"%s\", \"gap_us\": %d, \"spin_or_period_us\": %d, "
                "\"wake_p50_ns\": %.0f, \"wake_p90_ns\": %.0f, "
                "\"with_15us_work_p50_ns\": %.0f, \"woken_p50_ns\": %.0f, \"woken_p90_ns\": %.0f, "
                "\"consumer_cpu_ns_per_wake\": %.0f}",
                first ? "" : ",", way.c_str(), gap_us, spin, o.r.wake_p50_ns, o.r.wake_p90_ns,
                o.r.with_work_p50_ns, o.r.woken_p50_ns, o.r.woken_p90_ns, o.consumer_cpu_ns_per_wake);
    first = false;
  };
  for (const int gap : {2000, 100}) {  // starts 2 ms apart (the shim bench's), and a burst
    other("futex", gap, 0);
    other("spin-futex", gap, 50);
    other("spin-futex", gap, 500);
    other("uring-msg", gap, 0);
    other("timer", gap, 50);
  }
  std::printf("\n]}\n");
  return 0;
}
