// ZAP (ZeroMQ's authentication protocol, RFC 27) as the allocator and
// flowtune-relay answer it: every CURVE key gets its connection (a relay
// with an allow-list refuses the keys it does not list), and the
// reply's user id (the key in Z85) travels with each of the connection's
// messages as its "User-Id" property, where the receiver judges it. A
// handshake without a CURVE key is refused.
//
// Request frames: version, request id, domain, address, routing id,
// mechanism, credentials (CURVE: the client's 32-byte public key).
#pragma once

#include <cerrno>
#include <iterator>
#include <string>
#include <vector>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "flowtune/common/curve.h"

namespace flowtune::curve {

struct ZapRequest {
  std::string id;       // the request's, echoed in the reply
  std::string address;  // the peer's, for logs
  std::string z85;      // the client's key; empty: not CURVE
};

// The next request waiting on the handler's REP socket; false when none
// waits (or a signal interrupted the read).
inline bool zap_receive(zmq::socket_t& handler, ZapRequest* r) {
  std::vector<zmq::message_t> req;
  try {
    if (!zmq::recv_multipart(handler, std::back_inserter(req), zmq::recv_flags::dontwait)) return false;
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return false;
    throw;
  }
  *r = {};
  if (req.size() >= 2) r->id = req[1].to_string();
  if (req.size() >= 4) r->address = req[3].to_string();
  if (req.size() >= 7 && req[5].to_string_view() == "CURVE" && req[6].size() == 32) {
    char z85[kZ85KeyChars + 1] = {};
    zmq_z85_encode(z85, req[6].data<std::uint8_t>(), 32);
    r->z85 = z85;
  }
  return true;
}

// 200 with the key as the user id for a CURVE handshake, 400 otherwise;
// `refusal` (not null): 400 with that text whatever the key.
inline void zap_reply(zmq::socket_t& handler, const ZapRequest& r, const char* refusal = nullptr) {
  const bool ok = !r.z85.empty() && refusal == nullptr;
  const std::string status = ok ? "200" : "400";
  const std::string text = ok ? "OK" : refusal != nullptr ? refusal : "no CURVE key";
  std::vector<zmq::const_buffer> reply = {zmq::str_buffer("1.0"), zmq::buffer(r.id),
                                          zmq::buffer(status), zmq::buffer(text),
                                          zmq::buffer(r.z85), zmq::str_buffer("")};
  zmq::send_multipart(handler, reply);
}

}  // namespace flowtune::curve
