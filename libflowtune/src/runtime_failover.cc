// The endpoint runtime's hot standby (runtime.h, "Hot standby"): the
// socket monitor that reports a lost or refused connection, following a
// rotated allocator key, and moving to the next allocator listed.
#include "runtime.h"

#include <zmq.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "flowtune/common/curve.h"
#include "fork_guard.h"

namespace flowtune::client {

int Runtime::open_monitor() {
  const std::string addr =
      "inproc://flowtune-monitor-" + std::to_string(reinterpret_cast<std::uintptr_t>(this));
  if (zmq_socket_monitor(zmq_sock_.get(), addr.c_str(),
                         ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED) != 0) {
    return FT_ERUNTIME;
  }
  monitor_.reset(zmq_socket(zmq_ctx_.get(), ZMQ_PAIR));
  const int linger_ms = 0;
  if (!monitor_ || zmq_setsockopt(monitor_.get(), ZMQ_LINGER, &linger_ms, sizeof linger_ms) != 0 ||
      zmq_connect(monitor_.get(), addr.c_str()) != 0) {
    return FT_ERUNTIME;
  }
  return FT_OK;
}

// Connection events: a lost or refused connection to the allocator in use
// (events of one left behind are not).
void Runtime::read_monitor() {
  for (;;) {
    zmq_msg_t event, address;
    zmq_msg_init(&event);
    if (zmq_msg_recv(&event, monitor_.get(), ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&event);
      return;
    }
    zmq_msg_init(&address);
    const bool two = zmq_msg_more(&event) != 0 && zmq_msg_recv(&address, monitor_.get(), 0) >= 0;
    if (two) {
      const std::string where(static_cast<const char*>(zmq_msg_data(&address)),
                              zmq_msg_size(&address));
      const bool listed =
          std::find(endpoints_.begin(), endpoints_.end(), where) != endpoints_.end();
      // A name resolved by ZeroMQ may read differently: taken as ours.
      if (where == endpoints_[current_] || !listed) endpoint_lost_ = true;
    }
    zmq_msg_close(&address);
    zmq_msg_close(&event);
  }
}

bool Runtime::failover_wanted(std::uint64_t now) const {
  return endpoint_lost_ || session_.failover_due(now);
}

void Runtime::watch_connection(std::uint64_t now) {
  read_monitor();
  if (endpoint_lost_) follow_server_key(now);
  if (endpoints_.size() > 1)
    failover(now);
  else
    endpoint_lost_ = false;  // libzmq reconnects on its own
}

// The connection dropped or its handshake failed: if the allocator's key
// file now names another key (a rotation, docs/security.md), reconnect with
// it, to the same allocator. Read at most every 100 ms (a refused handshake
// repeats at each reconnection).
void Runtime::follow_server_key(std::uint64_t now) {
  if (!curve_ || curve_->server_file.empty() || now < next_key_check_us_) return;
  next_key_check_us_ = now + 100'000;
  Result<bool> followed = false;
  {
    ForkShield shield;  // as in open_all
    followed = curve::follow_server_key(&*curve_);
  }
  if (!followed) {
    const std::string& why = followed.error().message;
    if (why != key_error_logged_) log(1, "CURVE: " + why + "; the key in use stays");
    key_error_logged_ = why;
    return;
  }
  if (!*followed) {
    key_error_logged_.clear();
    return;
  }
  key_error_logged_.clear();
  const std::string& ep = endpoints_[current_];
  if (int e = curve::reconnect(zmq_sock_.get(), *curve_, ep); e != 0) {
    log(1,
        "CURVE: cannot reconnect to " + ep + " with the allocator's new key: " + zmq_strerror(e));
    return;
  }
  log(2, "the allocator's key changed (" + curve_->server_file + "); reconnected to " + ep);
  endpoint_lost_ = false;
}

void Runtime::failover(std::uint64_t now) {
  const bool registered = session_.link_state() == LinkState::kRegistered;
  if (registered) {
    tried_in_round_ = 0;
    round_backoff_us_ = 0;
    if (!was_registered_) log(2, "registered with allocator " + endpoints_[current_]);
  }
  was_registered_ = registered;
  if (!failover_wanted(now) || now < next_move_us_) return;
  rotate(now);
}

void Runtime::rotate(std::uint64_t now) {
  const std::string& left = endpoints_[current_];
  if (was_registered_) log(1, "allocator " + left + " is gone or standing by; trying the next one");
  (void)zmq_disconnect(zmq_sock_.get(), left.c_str());
  current_ = (current_ + 1) % endpoints_.size();
  // Checked at start: a failure here (out of memory) is retried next round.
  if (zmq_connect(zmq_sock_.get(), endpoints_[current_].c_str()) != 0)
    endpoint_lost_ = true;
  else
    endpoint_lost_ = false;
  session_.on_allocator_switched(now);
  was_registered_ = false;
  next_move_us_ = now;
  if (++tried_in_round_ >= endpoints_.size()) {
    // A whole round without an answer (the standby has not taken over yet):
    // the next waits, doubling up to a quarter heartbeat or 100 ms, the
    // lesser: the endpoints reach the new active allocator within 100 ms
    // of its takeover, and a refusal costs the standby a decode.
    tried_in_round_ = 0;
    const std::uint64_t cap =
        std::clamp<std::uint64_t>(std::uint64_t{config_.heartbeat_ms} * 250, 10'000, 100'000);
    round_backoff_us_ = std::min(cap, std::max<std::uint64_t>(2 * round_backoff_us_, 10'000));
    next_move_us_ = now + round_backoff_us_;
  }
}

}  // namespace flowtune::client
