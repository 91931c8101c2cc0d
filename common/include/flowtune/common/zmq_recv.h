// Reading the frames of a ZeroMQ multipart message, for the components that
// link cppzmq (the allocator's server, flowtune-relay). libzmq delivers a
// multipart message whole, so once its first frame is read the rest are
// already there: a blocking recv of them never waits, and only a signal can
// interrupt it, in which case it is retried.
#pragma once

#include <cerrno>
#include <zmq.hpp>

namespace flowtune {

// The next frame of a multipart message whose first frame was read.
// Retried on EINTR; any other error is thrown (zmq::error_t).
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

// Reads and discards the rest of a message; `more`: whether the frame read
// last had more after it (zmq::message_t::more()).
inline void drain_rest(zmq::socket_t& s, bool more) {
  zmq::message_t part;
  while (more) {
    recv_part(s, part);
    more = part.more();
  }
}

}  // namespace flowtune
