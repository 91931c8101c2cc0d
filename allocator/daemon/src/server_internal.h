// What the files of the daemon's Server (server.cc, server_curve.cc,
// server_standby.cc, server_relay.cc, server_memory.cc) share and no one
// else needs: the loop's clock.
#pragma once

#include <chrono>
#include <cstdint>

namespace flowtune::daemon::detail {

// Monotonic nanoseconds (steady_clock).
inline std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace flowtune::daemon::detail
