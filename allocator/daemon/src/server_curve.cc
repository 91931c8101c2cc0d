// The Server's CURVE side: the ZAP handler that answers libzmq's
// handshakes, the handshake monitor, and the reload and rotation of keys
// (docs/security.md).
#include "flowtune/daemon/server.h"

#include <cstring>
#include <thread>

#include "allocator_internal.h"
#include "flowtune/common/curve.h"
#include "flowtune/common/zap.h"
#include "flowtune/common/zmq_recv.h"
#include "server_internal.h"

namespace flowtune::daemon {

namespace {

// Handshakes answered (and monitor events read) per turn: a connection storm
// shares the loop with the endpoints already connected.
constexpr int kMaxAuthPerTurn = 256;
// libzmq asks the ZAP handler bound here, in the socket's context (RFC 27).
constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";

}  // namespace

void Server::enable_curve(zmq::context_t& ctx) {
  if (zmq_has("curve") == 0) throw ConfigError("this libzmq was built without CURVE (libsodium)");
  Result<curve::KeyPair> read = curve::load_key_file(auth_.secret_file, true);
  if (!read) throw ConfigError("--curve-secret: " + read.error().message);
  const curve::KeyPair& own = *read;
  keys_ = KeyRing::load(auth_);
  // The handler is bound before the listener, so no connection is ever
  // accepted unasked.
  zap_ = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::rep);
  zap_->set(zmq::sockopt::linger, 0);
  try {
    zap_->bind(kZapEndpoint);
  } catch (const zmq::error_t& e) {
    throw ConfigError(std::string("cannot bind the ZAP handler: ") + e.what());
  }
  router_.set(zmq::sockopt::curve_server, 1);
  router_.set(zmq::sockopt::curve_secretkey, own.secret_key);
  own_ = own;
  auth_info_.public_key = own.public_key;
  router_.set(zmq::sockopt::zap_domain, "flowtune");
  const std::string monitor =
      "inproc://flowtune-handshakes-" + std::to_string(reinterpret_cast<std::uintptr_t>(this));
  if (zmq_socket_monitor(
          router_.handle(), monitor.c_str(),
          ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) != 0) {
    throw ConfigError(std::string("cannot monitor handshakes: ") + zmq_strerror(zmq_errno()));
  }
  monitor_ = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::pair);
  monitor_->set(zmq::sockopt::linger, 0);
  monitor_->connect(monitor);
  auth_info_.on = true;
  count_keys();
}

void Server::count_keys() {
  auth_info_.endpoint_keys = keys_.count(kRoleEndpoint);
  auth_info_.reader_keys = keys_.count(kRoleRead);
  auth_info_.admin_keys = keys_.count(kRoleAdmin);
}

Server::Reload Server::reload_keys() {
  if (!zap_) return {true, "keys: CURVE is off"};
  const auto refuse = [this](const std::string& why) -> Reload {
    ++auth_info_.reload_failures;
    auth_info_.last_reload_error = why;
    return {false, "keys refused, the old ones stay: " + why};
  };
  Result<curve::KeyPair> read = curve::load_key_file(auth_.secret_file, true);
  if (!read) return refuse("--curve-secret: " + read.error().message);
  const curve::KeyPair& own = *read;
  try {
    keys_ = KeyRing::load(auth_);
  } catch (const ConfigError& e) {
    return refuse(e.what());
  }
  vouched_.clear();  // it points into the old lists
  ++auth_info_.reloads;
  auth_info_.last_reload_error.clear();
  count_keys();
  std::string rotated;
  if (own.secret_key != own_.secret_key) rotated = rotate_key(own);
  const std::size_t dropped = allocator_.revalidate_keys([this](std::string_view key) {
    const KeyEntry* k = keys_.find(key);
    return k != nullptr && (k->roles & kRoleEndpoint) != 0 ? &k->principal : nullptr;
  });
  std::string text = "keys: " + std::to_string(auth_info_.endpoint_keys) + " endpoint, " +
                     std::to_string(auth_info_.reader_keys) + " ctl (" +
                     std::to_string(auth_info_.admin_keys) + " admin)";
  if (dropped > 0) {
    text += "; " + std::to_string(dropped) +
            " endpoints dropped (their key or host is no longer allowed)";
  }
  if (!rotated.empty()) text += "; " + rotated;
  return {true, text};
}

// A new --curve-secret: libzmq applies a socket's key to the connections a
// listener accepts after it is bound, so the listener is bound again, at the
// same address, with the new key. Every connection made under the old key
// closes with it; clients that read the allocator's key from a file follow
// it there and reconnect (curve::follow_server_key), and each endpoint
// keeps its flows across the reconnection (same id, new connection). A
// rebind that fails puts the old key back.
namespace {

// zmq_unbind hands the listener to the I/O thread to close: a bind to the
// same address at once can find the port still taken. Tried again for up
// to kRebindMs (a reload, not every turn, waits that long at worst).
constexpr int kRebindMs = 2000;
void bind_again(zmq::socket_t& s, const std::string& endpoint) {
  for (int waited = 0;; waited += 5) {
    try {
      s.bind(endpoint);
      return;
    } catch (const zmq::error_t& e) {
      if (e.num() != EADDRINUSE || waited >= kRebindMs) throw;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

std::string Server::rotate_key(const curve::KeyPair& own) {
  router_.set(zmq::sockopt::curve_secretkey, own.secret_key);
  try {
    router_.unbind(bound_);
    bind_again(router_, bound_);
  } catch (const zmq::error_t& e) {
    router_.set(zmq::sockopt::curve_secretkey, own_.secret_key);
    std::string why = std::string("the new key is not in use: cannot listen again on ") + bound_ +
                      ": " + e.what();
    try {
      bind_again(router_, bound_);
    } catch (const zmq::error_t& again) {
      why +=
          "; nor with the old key: " + std::string(again.what()) + " (listening nowhere; restart)";
    }
    log_.write(LogLevel::kError, why);
    ++auth_info_.reload_failures;
    auth_info_.last_reload_error = why;
    return why;
  }
  own_ = own;
  auth_info_.public_key = own.public_key;
  ++auth_info_.key_rotations;
  if (probe_) rekey_probe(/*alternate=*/false);
  log_.write(LogLevel::kInfo, "rotated the allocator's key: now " + own.public_key);
  return "the allocator's key rotated (now " + own.public_key + "); clients reconnect with it";
}

// ZAP (common/zap.h): the key in Z85 travels with every message of the
// connection as its "User-Id" property.
void Server::answer_zap(std::uint64_t now) {
  curve::ZapRequest r;
  for (int i = 0; i < kMaxAuthPerTurn && curve::zap_receive(*zap_, &r); ++i) {
    // Every CURVE key gets its connection; whether it is allowed is asked
    // of each message. libzmq 4.3 never reconnects a socket refused here,
    // so a client whose key a reload adds a moment later would stay
    // locked out until restarted; this way it is heard from the reload on.
    if (!r.z85.empty() && keys_.find(r.z85) != nullptr) {
      ++auth_info_.accepted;
    } else if (!r.z85.empty()) {
      ++auth_info_.unknown_keys;
      log_.note(Note::kKeyRefused, LogLevel::kWarn, now,
                "a connection from " + r.address + " holds key " + r.z85 +
                    ", in no allow-list: its messages are refused");
    }
    curve::zap_reply(*zap_, r);
  }
}

void Server::read_monitor(std::uint64_t now) {
  for (int i = 0; i < kMaxAuthPerTurn; ++i) {
    zmq::message_t event;
    if (!monitor_->recv(event, zmq::recv_flags::dontwait)) return;
    if (event.more()) {
      zmq::message_t address;
      recv_part(*monitor_, address);
    }
    if (event.size() < 6) continue;
    std::uint16_t kind;
    std::uint32_t value;
    std::memcpy(&kind, event.data(), sizeof kind);
    std::memcpy(&value, event.data<char>() + 2, sizeof value);
    const bool no_curve = kind == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
                          value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH;
    ++(no_curve ? auth_info_.unauthenticated : auth_info_.bad_handshakes);
    log_.note(Note::kHandshakeFailed, LogLevel::kWarn, now,
              no_curve ? "refused a peer that does not speak CURVE"
                       : "a CURVE handshake failed (a wrong allocator key, or not ZeroMQ), error " +
                             std::to_string(value));
  }
}

}  // namespace flowtune::daemon
