// The options of a ROUTER socket that endpoints talk to: the allocator's
// and a relay's (an endpoint cannot tell them apart, so they must behave
// alike). Only for components that link cppzmq.
#pragma once

#include <cstdint>

#include <zmq.hpp>

namespace flowtune {

inline void set_endpoint_router_options(zmq::socket_t& router, std::int64_t max_message_bytes) {
  // Unroutable replies (the peer left) fail visibly instead of vanishing, and
  // a slow peer's full queue fails a send instead of blocking the loop.
  router.set(zmq::sockopt::router_mandatory, 1);
  router.set(zmq::sockopt::linger, 0);
  router.set(zmq::sockopt::sndhwm, 100000);
  router.set(zmq::sockopt::rcvhwm, 100000);
  // Endpoints reconnect together (after the allocator restarts, or a
  // partition heals): with libzmq's backlog of 100 the rest of them lost
  // their SYNs and retried a second later (the kernel caps this at
  // net.core.somaxconn).
  router.set(zmq::sockopt::backlog, 4096);
  // A frame past the wire's bound is refused by libzmq, which drops the
  // sender's connection: a relay refuses it from its sender rather than
  // pass it to the allocator, which would drop the relay and every
  // endpoint behind it.
  router.set(zmq::sockopt::maxmsgsize, max_message_bytes);
}

}  // namespace flowtune
