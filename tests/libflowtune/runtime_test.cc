// The runtime's pieces that can be checked without an allocator: the
// sleep/wake handshake under stress, the lifecycle (every handle closed,
// EventLoop::close() == 0 on every path), and the queue's overflow path.
// Built into pacing_test so the TSan run of libflowtune covers it.
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "fork_guard.h"
#include "runtime.h"
#include "wakeup.h"

namespace flowtune::client {
namespace {

// A producer publishes round i and waits for the consumer to take it; the
// consumer sleeps on an eventfd between rounds, so every round races the
// producer's publish against the consumer's decision to sleep. A lost
// wake-up leaves the consumer asleep with round i published and the
// producer past its decision not to wake it: a poll timeout (100 ms,
// against microseconds for a round) after which the producer has decided
// and the eventfd is still silent is counted, and the consumer carries on
// so the test ends. (A producer merely descheduled between its publish
// and its write, as under TSan on a loaded machine, is late, not lost.)
TEST(WakeFlag, NoWakeUpIsLostUnderStress) {
  constexpr std::uint64_t kRounds = 20000;
  WakeFlag flag;
  std::atomic<std::uint64_t> published{0};
  std::atomic<std::uint64_t> consumed{0};
  std::atomic<std::uint64_t> decided{0};  // rounds whose wake decision is made
  const int efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(efd, 0);
  int lost = 0;
  // On different CPUs, or the race cannot happen at all (one CPU's store
  // buffer is visible to its own loads). Best effort: skipped with one CPU.
  const auto pin = [](int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    (void)::pthread_setaffinity_np(::pthread_self(), sizeof set, &set);
  };
  const bool two_cpus = std::thread::hardware_concurrency() >= 2;
  cpu_set_t saved;
  ::pthread_getaffinity_np(::pthread_self(), sizeof saved, &saved);
  if (two_cpus) pin(1);
  std::thread consumer([&] {
    if (two_cpus) pin(0);
    std::uint64_t seen = 0;
    while (seen < kRounds) {
      const std::uint64_t p = published.load(std::memory_order_acquire);
      if (p != seen) {
        seen = p;
        consumed.store(seen, std::memory_order_release);
        continue;
      }
      if (flag.prepare_to_sleep([&] { return published.load(std::memory_order_relaxed) != seen; })) {
        pollfd pfd{efd, POLLIN, 0};
        if (::poll(&pfd, 1, 100) == 0) {
          const std::uint64_t now_published = published.load(std::memory_order_acquire);
          if (now_published != seen) {
            while (decided.load(std::memory_order_acquire) < now_published) std::this_thread::yield();
            if (::poll(&pfd, 1, 0) == 0) ++lost;
          }
        }
        std::uint64_t v;
        (void)::read(efd, &v, sizeof v);
      }
      flag.woke();
    }
  });
  for (std::uint64_t i = 1; i <= kRounds; ++i) {
    // A delay that varies from round to round (0 to ~2 us) moves the publish
    // across the consumer's way to sleep, so some rounds land in the window
    // of a few ns where a reordered store and load both look too early.
    for (std::uint64_t spin = (i * 2654435761u) % 512; spin > 0; --spin) {
      published.load(std::memory_order_relaxed);
    }
    published.store(i, std::memory_order_release);
    if (flag.should_wake()) {
      const std::uint64_t one = 1;
      ASSERT_EQ(::write(efd, &one, sizeof one), 8);
    }
    decided.store(i, std::memory_order_release);
    while (consumed.load(std::memory_order_acquire) < i) std::this_thread::yield();
  }
  consumer.join();
  ::pthread_setaffinity_np(::pthread_self(), sizeof saved, &saved);
  ::close(efd);
  EXPECT_EQ(lost, 0);
}

// A napping consumer is never woken (it looks by itself); a deep sleeper
// is woken by exactly one producer; work already there forbids either.
TEST(WakeFlag, OnlyADeepSleepIsWoken) {
  WakeFlag flag;
  EXPECT_FALSE(flag.should_wake()) << "awake";
  ASSERT_TRUE(flag.prepare_to_sleep([] { return false; }, WakeFlag::Sleep::kNap));
  EXPECT_FALSE(flag.should_wake()) << "napping";
  flag.woke();
  ASSERT_TRUE(flag.prepare_to_sleep([] { return false; }, WakeFlag::Sleep::kDeep));
  EXPECT_TRUE(flag.should_wake());
  EXPECT_FALSE(flag.should_wake()) << "a second producer";
  flag.woke();
  EXPECT_FALSE(flag.prepare_to_sleep([] { return true; }, WakeFlag::Sleep::kDeep));
  EXPECT_FALSE(flag.should_wake()) << "work was there: it never slept";
}

RuntimeConfig config(std::size_t queue = 1 << 14) {
  RuntimeConfig c;
  // Nobody listens here: ZeroMQ connects in the background, never blocks.
  c.allocator = "ipc:///tmp/flowtune-runtime-test-nobody-" + std::to_string(::getpid());
  c.log_level = 0;
  c.queue_capacity = queue;
  return c;
}

// The loop runs a ready descriptor's handler, polls instead of blocking
// when told work is there (and then takes the pending turn), and returns
// once unwatched; closing a loop that still watches reports it.
TEST(EventLoop, RunsHandlersPollsWhenToldAndStopsWhenUnwatched) {
  EventLoop loop;
  ASSERT_EQ(loop.init(), 0);
  const int ev = ::eventfd(0, EFD_NONBLOCK);
  ASSERT_GE(ev, 0);
  int hits = 0, pending = 0, woke = 0, asked = 0;
  const std::uint64_t one = 1;
  ASSERT_EQ(loop.watch(ev, [&] {
    std::uint64_t v;
    ASSERT_EQ(::read(ev, &v, sizeof v), static_cast<ssize_t>(sizeof v));
    if (++hits < 2) {
      ASSERT_EQ(::write(ev, &one, sizeof one), static_cast<ssize_t>(sizeof one));
    } else {
      loop.unwatch_all();
    }
  }), 0);
  loop.run([&] { return asked++ > 0; }, [&] { ++woke; },
           [&] {
             ++pending;  // the first wait polled and found nothing: our turn
             ASSERT_EQ(::write(ev, &one, sizeof one), static_cast<ssize_t>(sizeof one));
           });
  EXPECT_EQ(pending, 1);
  EXPECT_EQ(hits, 2);
  EXPECT_EQ(woke, 3);
  EXPECT_EQ(loop.close(), 0);
  EventLoop busy;
  ASSERT_EQ(busy.init(), 0);
  ASSERT_EQ(busy.watch(ev, [] {}), 0);
  EXPECT_EQ(busy.close(), -EBUSY);
  ::close(ev);
}

// A fork waits while another thread holds a ForkShield (as a runtime does
// while it makes or ends its ZeroMQ context), so neither the parent after
// fork() returns nor the child can see the shielded work half done.
// Without the wait, fork() returns while the shield is still held.
TEST(ForkShield, AForkWaitsUntilNoShieldIsHeld) {
  // The holder is detached, with its state on the heap: a joinable thread
  // not yet joined at the fork is a leak to TSan in the child.
  struct State {
    std::atomic<bool> inside{false}, released{false}, done{false};
  };
  const auto st = std::make_shared<State>();
  std::thread([st] {
    {
      ForkShield shield;
      st->inside.store(true);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      st->released.store(true);
    }
    st->done.store(true);
  }).detach();
  while (!st->inside.load()) std::this_thread::yield();
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(st->released.load() ? 0 : 1);
  EXPECT_TRUE(st->released.load()) << "fork() returned while a shield was held";
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child saw the shield held";
  while (!st->done.load()) std::this_thread::yield();
  // And the child's generation moved on, the parent's did not.
  const std::uint64_t mine = fork_generation();
  const pid_t again = ::fork();
  if (again == 0) ::_exit(fork_generation() == mine + 1 ? 0 : 1);
  ASSERT_EQ(::waitpid(again, &status, 0), again);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(fork_generation(), mine);
}

TEST(Runtime, StopClosesTheLoopWithNoHandleLeft) {
  SocketTable table;
  Runtime rt(config(), SessionConfig{}, table);
  ASSERT_EQ(rt.start(), FT_OK);
  Event e;
  e.kind = Event::kBegin;
  EXPECT_TRUE(rt.push(e));
  EXPECT_EQ(rt.stop(), 0);
  EXPECT_EQ(rt.stop(), 0);  // idempotent
}

// Events close together cost the caller no wake-up: after the first, the
// runtime naps (looks every kPollUs by itself) for kLingerUs, so urgent
// pushes 500 us apart find it napping. After a quiet spell longer than
// that it sleeps deeply again (a process that stops sending pays nothing),
// and the next push wakes it. Before naps, every one of these pushes sent
// a signal.
TEST(Runtime, EventsCloseTogetherSendOneWakeUp) {
  SocketTable table;
  Runtime rt(config(), SessionConfig{}, table);
  ASSERT_EQ(rt.start(), FT_OK);
  const auto quiet = [] {
    std::this_thread::sleep_for(std::chrono::microseconds(Runtime::kLingerUs) +
                                std::chrono::milliseconds(100));
  };
  Event e;
  e.kind = Event::kSent;  // of no registered socket: dispatched, ignored
  quiet();
  const std::uint64_t first = rt.wakeups_sent();
  constexpr int kPushes = 40;
  for (int i = 0; i < kPushes; ++i) {
    ASSERT_TRUE(rt.push(e));
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  const std::uint64_t burst = rt.wakeups_sent() - first;
  EXPECT_GE(burst, 1u) << "the first push after a quiet spell wakes a deep sleep";
  // A runtime thread descheduled past kLingerUs on a loaded machine may
  // sleep deeply once or twice more; one wake-up per push is what naps end.
  EXPECT_LE(burst, 4u) << "of " << kPushes << " pushes";
  quiet();
  const std::uint64_t before = rt.wakeups_sent();
  ASSERT_TRUE(rt.push(e));
  EXPECT_EQ(rt.wakeups_sent(), before + 1) << "after a quiet spell the runtime sleeps deeply";
  EXPECT_EQ(rt.stop(), 0);
}

// Descriptors open in the calling thread's table.
int open_fds() {
  int n = 0;
  for (int fd = 0; fd < 4096; ++fd) n += ::fcntl(fd, F_GETFD) >= 0 ? 1 : 0;
  return n;
}

// The runtime (its loop, timer, signalfd, ZeroMQ and ZeroMQ's threads) lives
// in its own fd table: the application's table gains nothing, so closing
// every fd there (closefrom) cannot break it, and no number of ours can be
// the application's.
TEST(Runtime, OpensNothingInTheApplicationsFdTable) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "TSan builds keep the shared fd table (see Runtime::enter_private_table)";
#endif
  SocketTable table;
  const int before = open_fds();
  Runtime rt(config(), SessionConfig{}, table);
  ASSERT_EQ(rt.start(), FT_OK);
  ASSERT_TRUE(rt.private_fd_table()) << "pidfd_getfd refused here: the shared-table fallback";
  EXPECT_EQ(open_fds(), before);
  EXPECT_EQ(rt.stop(), 0);
  EXPECT_EQ(open_fds(), before);
}

// An endpoint libzmq cannot use, and a port past 65535 (libzmq would dial
// 34463 for 99999: it keeps the low 16 bits), fail the start and leave
// nothing open.
TEST(Runtime, AFailedStartLeavesNothingOpen) {
  for (const char* endpoint : {"no-such-transport://x", "tcp://127.0.0.1:99999"}) {
    SocketTable table;
    RuntimeConfig c = config();
    c.allocator = endpoint;
    Runtime rt(c, SessionConfig{}, table);
    EXPECT_EQ(rt.start(), FT_ECONNECT) << endpoint;
    EXPECT_EQ(rt.stop(), 0);
  }
}

TEST(Runtime, NeverStartedStopsCleanly) {
  SocketTable table;
  Runtime rt(config(), SessionConfig{}, table);
  EXPECT_EQ(rt.stop(), 0);
}

TEST(EventQueue, AFullQueueRefusesAndRefillsAfterPops) {
  EventQueue q(2);
  Event e;
  EXPECT_TRUE(q.push(e));
  EXPECT_TRUE(q.push(e));
  EXPECT_FALSE(q.push(e));
  Event out;
  EXPECT_TRUE(q.pop(&out));
  EXPECT_TRUE(q.push(e));
}

// Spilled events keep their order relative to one another as the Session
// must see them: an end before any bytes, then begins and bytes, then an end.
TEST(SocketTableSpill, EventsCollapseInOrderAndStopSpillingOnceTaken) {
  SocketTable table;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  SocketRef ref;
  ASSERT_EQ(table.claim(fds[0], &ref), FT_OK);
  EXPECT_FALSE(table.spilling(fds[0]));
  EXPECT_FALSE(table.has_dirty());
  table.spill(fds[0], SocketTable::SpillKind::kEnd);
  FlowletPolicy policy;
  policy.weight = 2;
  policy.coflow_id = 7;
  table.spill(fds[0], SocketTable::SpillKind::kBegin, 100, policy);
  table.spill(fds[0], SocketTable::SpillKind::kSent, 40);
  table.spill(fds[0], SocketTable::SpillKind::kEnd);
  EXPECT_TRUE(table.spilling(fds[0]));
  EXPECT_TRUE(table.has_dirty());
  std::vector<int> dirty;
  table.sweep([&](int fd) { dirty.push_back(fd); });
  ASSERT_EQ(dirty, std::vector<int>{fds[0]});
  const SocketTable::Spilled p = table.take_spill(fds[0]);
  EXPECT_EQ(p.gen, ref.gen);
  EXPECT_TRUE(p.end_first);
  EXPECT_EQ(p.begin_bytes, 100u);
  EXPECT_EQ(p.policy, policy);
  EXPECT_EQ(p.sent, 40u);
  EXPECT_TRUE(p.end_last);
  // Still spilling until the runtime says it applied the batch.
  EXPECT_TRUE(table.spilling(fds[0]));
  table.finish_spill(fds[0]);
  EXPECT_FALSE(table.spilling(fds[0]));
  // An unregistration marks the slot too (no queue involved).
  EXPECT_EQ(table.release(fds[0]), FT_OK);
  dirty.clear();
  table.sweep([&](int fd) { dirty.push_back(fd); });
  EXPECT_EQ(dirty, std::vector<int>{fds[0]});
  table.sweep([&](int fd) { dirty.push_back(fd); });
  EXPECT_EQ(dirty.size(), 1u);  // nothing new: the hint was cleared
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(SocketTableSpill, ABeginAfterAnEndCoalescesRatherThanReorders) {
  SocketTable table;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  SocketRef ref;
  ASSERT_EQ(table.claim(fds[0], &ref), FT_OK);
  table.spill(fds[0], SocketTable::SpillKind::kBegin, 100);
  table.spill(fds[0], SocketTable::SpillKind::kEnd);
  table.spill(fds[0], SocketTable::SpillKind::kBegin, 50);
  const SocketTable::Spilled p = table.take_spill(fds[0]);
  EXPECT_FALSE(p.end_first);
  EXPECT_EQ(p.begin_bytes, 150u);
  EXPECT_FALSE(p.end_last);
  ::close(fds[0]);
  ::close(fds[1]);
}

}  // namespace
}  // namespace flowtune::client
