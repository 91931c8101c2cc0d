// What the library's control threads (the runtime's, runtime.h, and the
// agent link's, agent_link.h) share: their start handshake, their clock
// and their one way to the application's stderr.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <string>
#include <thread>

#include "flowtune/flowtune.h"

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
