// What the files of the daemon's Server (server.cc, server_curve.cc,
// server_standby.cc, server_relay.cc, server_memory.cc) share and no one
// else needs: the loop's clock and the blocking read of a message's
// remaining frames.
#pragma once

#include <cerrno>
#include <chrono>
#include <cstdint>

#include <zmq.hpp>

namespace flowtune::daemon::detail {

// Monotonic nanoseconds (steady_clock).
inline std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// recv of the rest of a multipart message, which ZeroMQ delivers whole:
// only a signal can interrupt it, and then it is retried.
inline void recv_part(zmq::socket_t& s, zmq::message_t& m) {
  for (;;) {
    try {
      (void)s.recv(m, zmq::recv_flags::none);
      return;
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
  }
}

}  // namespace flowtune::daemon::detail
