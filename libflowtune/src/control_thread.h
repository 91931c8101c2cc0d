// What the library's control threads (the runtime's, runtime.h, and the
// agent link's, agent_link.h) share: their start handshake, their clock
// and their one way to the application's stderr.
#pragma once

#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <future>
#include <string>
#include <thread>

#include "event_queue.h"
#include "flowtune/flowtune.h"
#include "pacing.h"
#include "wakeup.h"

namespace flowtune::client {

// Starts *t running body(&ready) and waits for the code it sets: on
// anything but FT_OK the thread has closed what it opened and is joined.
template <class Body>
int start_control_thread(std::thread* t, Body body) {
  std::promise<int> ready;
  std::future<int> result = ready.get_future();
  try {
    *t = std::thread([&body, &ready] { body(&ready); });
  } catch (...) {
    return FT_ERUNTIME;
  }
  const int rc = result.get();
  if (rc != FT_OK) t->join();
  return rc;
}

// The signal that wakes a control thread: real-time, so it is queued apart
// from standard signals; sent to that thread only (tgkill) and blocked
// there, so no handler runs and no disposition changes.
inline int control_wake_signal() { return SIGRTMAX - 2; }

// A control thread's inbox: the application threads' events, the
// sleep/wake handshake (wakeup.h) and the thread's id for the wake-up.
class ControlInbox {
 public:
  explicit ControlInbox(std::size_t capacity) : queue(capacity) {}

  // Any thread. False when the queue is full (the event is dropped);
  // urgent: wake the thread if it sleeps deeply.
  bool push(const Event& e, bool urgent) {
    if (!queue.push(e)) return false;
    if (urgent) (void)wake();
    return true;
  }
  // Any thread: true if the thread slept deeply and was sent the signal.
  bool wake() {
    if (!flag.should_wake()) return false;
    signal();
    return true;
  }
  // Any thread: the wake-up signal, whatever the thread does.
  void signal() const {
    const pid_t t = tid.load(std::memory_order_acquire);
    if (t != 0) (void)::syscall(SYS_tgkill, ::getpid(), t, control_wake_signal());
  }
  // The thread, before it blocks: false if the queue or the table holds
  // work already (see WakeFlag::prepare_to_sleep).
  bool prepare_to_sleep(const SocketTable& table, bool napping) {
    return flag.prepare_to_sleep([&] { return !queue.empty() || table.has_dirty(); },
                                 napping ? WakeFlag::Sleep::kNap : WakeFlag::Sleep::kDeep);
  }
  // The thread: it runs (its id is where the signal goes), or it is gone
  // (a late wake-up must not reach another thread that gets this id:
  // with no handler installed, the signal's default action ends the
  // process).
  void enter() { tid.store(static_cast<pid_t>(::syscall(SYS_gettid)), std::memory_order_release); }
  void leave() { tid.store(0, std::memory_order_release); }

  EventQueue queue;
  WakeFlag flag;
  std::atomic<pid_t> tid{0};
};

inline std::int64_t steady_ns() {
  return std::chrono::steady_clock::now().time_since_epoch().count();
}

// Microseconds since start_ns, from 1 (0 means "never" to the callers).
inline std::uint64_t micros_since(std::int64_t start_ns) {
  return static_cast<std::uint64_t>((steady_ns() - start_ns) / 1000) + 1;
}

// "flowtune: TEXT" on the application's stderr. In a private fd table fd 2
// is /dev/null: the line goes to a copy of the application's fd 2 taken
// through pidfd for this one write (pidfd < 0: the shared table's fd 2).
inline void log_to_stderr(int pidfd, const std::string& text) {
  const std::string line = "flowtune: " + text + "\n";
  const int fd = pidfd >= 0 ? static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, 2, 0)) : 2;
  if (fd >= 0) (void)!::write(fd, line.data(), line.size());
  if (fd >= 0 && pidfd >= 0) (void)::syscall(SYS_close, fd);  // a copy, whatever its number
}

}  // namespace flowtune::client
