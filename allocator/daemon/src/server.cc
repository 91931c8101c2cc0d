#include "flowtune/daemon/server.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq_addon.hpp>

#include "allocator_internal.h"
#include "flowtune/common/curve.h"
#include "flowtune/common/zap.h"
#include "flowtune/common/endpoint.h"
#include "flowtune/common/router.h"
#include "flowtune/common/signals.h"
#include "flowtune/daemon/control.h"
#include "flowtune/wire/codec.h"
#include "flowtune/wire/relay.h"

namespace flowtune::daemon {

namespace {

// Messages taken from the socket per turn before the engine iterates: enough
// to batch a burst into one iteration, few enough that a turn, and so the
// latency of a rate, stays short under load. The time budget is 200 us, or
// as long as the last iteration took if that was longer: with many flows an
// iteration is expensive, and draining at least as long keeps at least half
// of a loaded turn for events.
constexpr int kMaxDrainPerTurn = 4096;
constexpr std::int64_t kMinDrainNs = 200'000;
constexpr int kMaxFramesPerMessage = 8;
// Handshakes answered (and monitor events read) per turn: a connection storm
// shares the loop with the endpoints already connected.
constexpr int kMaxAuthPerTurn = 256;
// libzmq asks the ZAP handler bound here, in the socket's context (RFC 27).
constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";

// recv of the rest of a multipart message, which ZeroMQ delivers whole:
// only a signal can interrupt it, and then it is retried.
void recv_part(zmq::socket_t& s, zmq::message_t& m) {
  for (;;) {
    try {
      (void)s.recv(m, zmq::recv_flags::none);
      return;
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
  }
}

// A listener no other machine can reach: without CURVE, only it takes
// requests that change state.
bool loopback_only(const std::string& endpoint) {
  for (const char* p : {"ipc://", "inproc://", "tcp://127.", "tcp://localhost:", "tcp://[::1]:"}) {
    if (endpoint.rfind(p, 0) == 0) return true;
  }
  return false;
}

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Resident bytes of this process (/proc/self/statm), -1 if unreadable (as
// when a connection storm has used up the descriptors).
std::int64_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "re");
  if (f == nullptr) return -1;
  long size = 0, resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<std::int64_t>(resident) * ::sysconf(_SC_PAGESIZE) : -1;
}

}  // namespace

Server::Server(zmq::context_t& ctx, Allocator& allocator, Log& log, const std::string& listen,
               std::uint64_t busy_poll_us, const AuthConfig& auth)
    : allocator_(allocator), log_(log), router_(ctx, zmq::socket_type::router),
      start_ns_(steady_ns()), busy_poll_us_(busy_poll_us), auth_(auth) {
  set_endpoint_router_options(router_, static_cast<std::int64_t>(wire::kMaxMessageBytes));
  if (const std::string why = endpoint_port_error(listen); !why.empty()) {
    throw ConfigError("cannot listen on " + why);
  }
  if (auth_.enabled()) enable_curve(ctx);
  try {
    router_.bind(listen);
  } catch (const zmq::error_t& e) {
    throw ConfigError("cannot listen on " + listen + ": " + e.what());
  }
  bound_ = router_.get(zmq::sockopt::last_endpoint);
  loopback_only_ = loopback_only(bound_);
  tcp_ = bound_.rfind("tcp://", 0) == 0;
}

// Memory freed after a burst (a flood's flows and endpoints, libzmq's
// buffers after a connection storm, bombs queued before they were refused)
// stays resident with glibc: heap holes and the I/O thread's arena are not
// given back on their own (a storm of 1,000 connections left 57 MB, idle
// 8 MB). On a turn that is not iterating, at most every kMemoryCheckUs, the
// loop weighs what is resident but not in use by the heap (statm less
// mallinfo2's in-use bytes) and, once that is kTrimFreeBytes above the
// least it has been since the last trim, hands the free pages back
// (malloc_trim). Both walk the heap's free chunks: 0.1-0.5 ms typically,
// 10 ms and more on a heap left in tens of thousands of pieces, hence the
// long period (the turn's replies have gone out by then). Before weighing,
// tables left mostly empty by a burst are shrunk (Allocator::
// compact_if_sparse), and what that frees is handed back at once.
void Server::return_memory(std::uint64_t now) {
  if (now < next_memory_check_us_) return;
  next_memory_check_us_ = now + kMemoryCheckUs;
  const std::int64_t t0 = steady_ns();
  trim_if_worth_it(now, allocator_.compact_if_sparse());
  allocator_.counters().memory_check_ns.record(static_cast<std::uint64_t>(steady_ns() - t0));
}

void Server::trim_if_worth_it(std::uint64_t now, bool compacted) {
  std::int64_t gap = 0;
  if (!weigh_heap(now, &gap)) return;
  least_gap_ = std::min(least_gap_, gap);
  if (!compacted && gap - least_gap_ < static_cast<std::int64_t>(kTrimFreeBytes)) return;
  ::malloc_trim(0);
  ++allocator_.counters().memory_trims;
  if (weigh_heap(now, &gap)) least_gap_ = gap;
}

// Records the heap's figures; *gap: resident bytes not in use by the heap.
// False if statm is unreadable.
bool Server::weigh_heap(std::uint64_t now, std::int64_t* gap) {
  const struct mallinfo2 m = ::mallinfo2();
  const std::int64_t resident = resident_bytes();
  heap_ = {static_cast<std::int64_t>(m.uordblks + m.hblkhd), static_cast<std::int64_t>(m.fordblks), now};
  *gap = resident - heap_.in_use_bytes;
  return resident >= 0;
}

Server::~Server() {
  // The monitor goes before the sockets it watches.
  if (monitor_) zmq_socket_monitor(router_.handle(), nullptr, 0);
}

void Server::enable_curve(zmq::context_t& ctx) {
  if (zmq_has("curve") == 0) throw ConfigError("this libzmq was built without CURVE (libsodium)");
  curve::KeyPair own;
  if (const std::string why = curve::read_key_file(auth_.secret_file, true, &own); !why.empty()) {
    throw ConfigError("--curve-secret: " + why);
  }
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
  const std::string monitor = "inproc://flowtune-handshakes-" +
                              std::to_string(reinterpret_cast<std::uintptr_t>(this));
  if (zmq_socket_monitor(router_.handle(), monitor.c_str(),
                         ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) != 0) {
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
  curve::KeyPair own;
  if (const std::string why = curve::read_key_file(auth_.secret_file, true, &own); !why.empty()) {
    return refuse("--curve-secret: " + why);
  }
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
    text += "; " + std::to_string(dropped) + " endpoints dropped (their key or host is no longer allowed)";
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
    std::string why = std::string("the new key is not in use: cannot listen again on ") + bound_ + ": " + e.what();
    try {
      bind_again(router_, bound_);
    } catch (const zmq::error_t& again) {
      why += "; nor with the old key: " + std::string(again.what()) + " (listening nowhere; restart)";
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

std::uint64_t Server::now_us() const {
  return static_cast<std::uint64_t>((steady_ns() - start_ns_) / 1000);
}

int Server::run(int signal_fd, std::uint64_t stop_after_turns) {
  // The router, then the signal fd, the ZAP handler and the handshake
  // monitor where there are.
  std::vector<zmq::pollitem_t> items = {{router_.handle(), 0, ZMQ_POLLIN, 0}};
  const std::size_t signal_item = signal_fd >= 0 ? items.size() : SIZE_MAX;
  if (signal_fd >= 0) items.push_back({nullptr, signal_fd, ZMQ_POLLIN, 0});
  const std::size_t zap_item = zap_ ? items.size() : SIZE_MAX;
  if (zap_) {
    items.push_back({zap_->handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({monitor_->handle(), 0, ZMQ_POLLIN, 0});
  }
  if (probe_) items.push_back({probe_->handle(), 0, ZMQ_POLLIN, 0});
  if (witness_) items.push_back({witness_->handle(), 0, ZMQ_POLLIN, 0});
  for (std::uint64_t turn = 0; turn < stop_after_turns; ++turn) {
    long timeout_ms = -1;
    std::uint64_t now = now_us();
    if (allocator_.busy()) {
      last_active_us_ = now;
      timeout_ms = 0;
    } else if (now - last_active_us_ < busy_poll_us_) {
      timeout_ms = 0;  // still spinning after recent traffic: no wake-up cost
    } else {
      // Idle: the next timer, or the next memory check (due after a turn
      // that was not iterating, which set it into the future).
      std::uint64_t next = std::min(allocator_.next_timer_us(), next_memory_check_us_);
      if (probe_) next = std::min(next, next_probe_us_);
      timeout_ms = next <= now ? 0 : static_cast<long>((next - now + 999) / 1000);
    }
    if (stop_after_turns != UINT64_MAX && timeout_ms < 0) timeout_ms = 10;
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(timeout_ms));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
    if (signal_item != SIZE_MAX && (items[signal_item].revents & ZMQ_POLLIN) != 0) {
      if (const int sig = take_signal(signal_fd); sig != 0) return sig;
    }
    if (zap_item != SIZE_MAX) {
      if ((items[zap_item].revents & ZMQ_POLLIN) != 0) answer_zap(now_us());
      if ((items[zap_item + 1].revents & ZMQ_POLLIN) != 0) read_monitor(now_us());
    }
    if (probe_) standby_turn(now_us());
    const std::int64_t drain_start = steady_ns();
    const std::int64_t drain_budget = std::max(kMinDrainNs, last_iteration_ns_);
    // Counted in endpoint messages: a relay's batch holds up to 1,024.
    int received = 0;
    int next_check = 16;
    while (received < kMaxDrainPerTurn) {
      if (received >= next_check) {
        if (steady_ns() - drain_start > drain_budget) break;
        next_check = received + 16;
      }
      const int n = receive_one(static_cast<std::uint64_t>((steady_ns() - start_ns_) / 1000));
      if (n == 0) break;
      received += n;
    }
    now = now_us();
    if (now >= allocator_.next_timer_us()) {
      const std::int64_t t0 = steady_ns();
      allocator_.on_timer(now);
      allocator_.counters().timer_ns.record(static_cast<std::uint64_t>(steady_ns() - t0));
    }
    if (allocator_.tell_early_rates(now) > 0) {
      flush();
      allocator_.counters().early_answer_ns.record(static_cast<std::uint64_t>(steady_ns() - drain_start));
    }
    if (allocator_.busy()) {
      const std::int64_t t0 = steady_ns();
      allocator_.iterate(now);
      last_iteration_ns_ = steady_ns() - t0;
      allocator_.counters().iteration_ns.record(static_cast<std::uint64_t>(last_iteration_ns_));
    }
    flush();
    if (received > 0) {
      last_active_us_ = now_us();
      allocator_.counters().turn_ns.record(static_cast<std::uint64_t>(steady_ns() - drain_start));
    }
    if (!allocator_.busy()) return_memory(now);  // after the turn's replies went out
  }
  return 0;
}

int Server::receive_one(std::uint64_t now) {
  zmq::message_t peer;
  try {
    if (!router_.recv(peer, zmq::recv_flags::dontwait)) return 0;
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return 0;
    throw;
  }
  zmq::message_t frames[2];
  std::size_t count = 0;
  bool more = peer.more();
  if (more) {
    recv_part(router_, frames[0]);
    more = frames[0].more();
    count = 1;
    if (frames[0].to_string_view() == wire::kRelayTag ||
        frames[0].to_string_view() == wire::kKeyedRelayTag) {
      return std::max(1, relay_batch(peer.to_string_view(), frames[0], more, now));
    }
  }
  if (wire::is_relayed_peer(peer.to_string_view())) {
    // A connection that chose a routing id shaped like a relayed
    // endpoint's key would be taken for that endpoint (libzmq accepts any
    // id): dropped unanswered (an answer would go down the relay).
    zmq::message_t part;
    while (more) {
      recv_part(router_, part);
      more = part.more();
    }
    allocator_.counters().count(Cause::kNotAuthorized);
    return 1;
  }
  while (more) {
    zmq::message_t part;
    recv_part(router_, part);
    more = part.more();
    if (count < 2) frames[count] = std::move(part);
    ++count;
    if (count > kMaxFramesPerMessage) {
      // Drain the rest without keeping it.
      while (more) {
        recv_part(router_, part);
        more = part.more();
      }
    }
  }
  const std::string_view peer_id(peer.data<char>(), peer.size());
  const bool is_control = count == 2 && frames[0].to_string_view() == kControlTag;
  if (count != 1 && !is_control) {
    allocator_.on_bad_frames(peer_id, count, now);
    return 1;
  }
  // With CURVE on, the key the connection proved, looked up now: a key a
  // reload removed is not heard, though its connection lives on.
  const KeyEntry* sender = nullptr;
  if (zap_) {
    const char* key = zmq_msg_gets(frames[0].handle(), "User-Id");
    sender = key != nullptr ? keys_.find(key) : nullptr;
    if (sender == nullptr && !is_control) {
      allocator_.on_unauthorized(peer_id, "this connection's key is in no allow-list", now);
      return 1;
    }
  }
  if (!is_control) {
    if (sender != nullptr && (sender->roles & kRoleEndpoint) == 0) {
      allocator_.on_unauthorized(peer_id,
                                 "key \"" + sender->principal.name +
                                     "\" is a flowtune-ctl key, not an endpoint's",
                                 now);
      return 1;
    }
    // The peer's IP address for the per-source quotas: TCP only (over ipc
    // libzmq names the process, "localhost:UID:GID:PID", which would make
    // each process a source of its own).
    const char* address = tcp_ ? zmq_msg_gets(frames[0].handle(), "Peer-Address") : nullptr;
    allocator_.on_message(peer_id, {frames[0].data<std::uint8_t>(), frames[0].size()}, now,
                          sender != nullptr ? &sender->principal : nullptr,
                          address != nullptr ? std::string_view(address) : std::string_view());
    return 1;
  }
  ++allocator_.counters().control_requests;
  std::string reply;
  if (frames[1].to_string_view() == "role" && (!zap_ || sender != nullptr)) {
    // The standby pair's probe, and a relay's over a pair (an endpoint
    // key): O(1) and says nothing secret. Refused, it is still an answer:
    // the prober hears this allocator alive, its role as last heard.
    if (role_tokens_.take(now)) {
      reply = control("role", sender, now);
    } else {
      allocator_.counters().count(Cause::kRateLimited);
      reply = R"({"error":"too many role probes; try again shortly","retry_ms":10})";
    }
  } else if (zap_ && (sender == nullptr || (sender->roles & kRoleRead) == 0)) {
    allocator_.counters().count(Cause::kNotAuthorized);
    reply = sender == nullptr ? R"({"error":"this connection's key is in no allow-list"})"
                              : R"j({"error":"this key is not a flowtune-ctl key (--curve-ctl, --curve-admin)"})j";
  } else if (control_tokens_.take(now)) {
    reply = control(frames[1].to_string_view(), sender, now);
  } else {
    allocator_.counters().count(Cause::kRateLimited);
    // retry_ms: flowtune-ctl waits and asks again (a paged dump may
    // outrun the burst).
    reply = R"({"error":"too many flowtune-ctl requests; try again shortly","retry_ms":10})";
  }
  send(std::string(peer_id), reply.data(), reply.size(), kControlTag);
  return 1;
}

std::string Server::control(std::string_view request, const KeyEntry* sender, std::uint64_t now) {
  const std::string_view cmd = request.substr(0, request.find(' '));
  if (cmd == "role") {
    return role_answer(role(), takeover_ ? takeover_->term() : 0, takeover_ ? takeover_->id() : 0);
  }
  if (cmd != "reload") {
    return control_reply(allocator_, {bound_, now, auth_info_, heap_, ha_info(now)}, request, now,
                         control_cache_);
  }
  // Changes state: an admin key, or without CURVE a listener only this
  // host can reach.
  const bool admin = zap_ ? (sender->roles & kRoleAdmin) != 0 : loopback_only_;
  if (!admin) {
    allocator_.counters().count(Cause::kNotAuthorized);
    return zap_ ? R"j({"error":"reload needs an admin key (--curve-admin)"})j"
                : R"({"error":"reload needs CURVE and an admin key when the allocator listens beyond this host"})";
  }
  if (!reload_) return R"({"error":"this allocator cannot reload"})";
  // Nothing read from the lists before this line is used after it: the
  // reload replaces them (and `sender` with them).
  const Reload r = reload_();
  log_.write(r.ok ? LogLevel::kInfo : LogLevel::kError, "flowtune-ctl reload: " + r.text);
  return nlohmann::json{{"reload", r.text}, {"ok", r.ok}}.dump(-1, ' ', false,
                                                             nlohmann::json::error_handler_t::replace);
}

// ---- hot standby ----

void Server::enable_standby(zmq::context_t& ctx, Standby s) {
  if (const std::string why = endpoint_port_error(s.peer); !why.empty()) {
    throw ConfigError("--standby-of: " + why);
  }
  if (s.probe_us == 0 || s.takeover_us < 2 * s.probe_us) {
    throw ConfigError("the takeover time must span at least two probes");
  }
  probe_ = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
  probe_->set(zmq::sockopt::linger, 0);
  // A probe goes only to a live connection and none piles up: an answer
  // says how the peer is now, and a stale one would hide its silence.
  probe_->set(zmq::sockopt::immediate, 1);
  probe_->set(zmq::sockopt::sndhwm, 4);
  probe_->set(zmq::sockopt::reconnect_ivl, static_cast<int>(std::max<std::uint64_t>(s.probe_us / 1000, 1)));
  if (auth_.enabled()) {
    curve::KeyPair own;
    if (const std::string why = curve::read_key_file(auth_.secret_file, true, &own); !why.empty()) {
      throw ConfigError("--curve-secret: " + why);
    }
    // The pair shares one key: the probe speaks to the peer with it.
    probe_key_ = own;
    if (curve::apply_client(probe_->handle(), {own.public_key, own, {}}) != 0) {
      throw ConfigError(std::string("CURVE on the standby probe: ") + zmq_strerror(zmq_errno()));
    }
  }
  try {
    probe_->connect(s.peer);
  } catch (const zmq::error_t& e) {
    throw ConfigError("--standby-of " + s.peer + ": " + e.what());
  }
  if (!s.witness.empty()) {
    if (const std::string why = endpoint_port_error(s.witness); !why.empty()) {
      throw ConfigError("--witness: " + why);
    }
    witness_ = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
    witness_->set(zmq::sockopt::linger, 0);
    // As the probe: a claim goes only to a live connection, none piles up.
    witness_->set(zmq::sockopt::immediate, 1);
    witness_->set(zmq::sockopt::sndhwm, 4);
    witness_->set(zmq::sockopt::reconnect_ivl, static_cast<int>(std::max<std::uint64_t>(s.probe_us / 1000, 1)));
    // The witness speaks the pair's key pair, as the peer does.
    if (auth_.enabled() && curve::apply_client(witness_->handle(), {probe_key_.public_key, probe_key_, {}}) != 0) {
      throw ConfigError(std::string("CURVE on the witness's connection: ") + zmq_strerror(zmq_errno()));
    }
    try {
      witness_->connect(s.witness);
    } catch (const zmq::error_t& e) {
      throw ConfigError("--witness " + s.witness + ": " + e.what());
    }
  }
  const std::uint64_t now = now_us();
  takeover_.emplace(s.takeover_us, s.id, now, witness_ != nullptr);
  allocator_.stand_by("this allocator is standing by; " + s.peer + " is active", now);
  next_probe_us_ = now;
  standby_ = std::move(s);
}

namespace {

// Each flowtune-ctl answer waiting on `s` ([kControlTag, text]) passed to
// `f` as its text; anything else is skipped.
template <typename F>
void each_control_answer(zmq::socket_t& s, F f) {
  for (;;) {
    std::vector<zmq::message_t> frames;
    try {
      if (!zmq::recv_multipart(s, std::back_inserter(frames), zmq::recv_flags::dontwait)) return;
    } catch (const zmq::error_t&) {
      return;
    }
    if (frames.size() == 2 && frames[0].to_string_view() == kControlTag) f(frames[1].to_string_view());
  }
}

}  // namespace

void Server::read_probe_answers(std::uint64_t now) {
  each_control_answer(*probe_, [&](std::string_view text) {
    const auto peer = parse_role_answer(text);
    if (peer && peer->id != 0) {
      takeover_->on_answer(*peer, now);
      return;
    }
    // It lives, but says no role: a key it refuses, a build without pairs,
    // or one started without --standby-of (id 0). Not silence: no takeover.
    takeover_->on_heard(now);
    if (now >= next_peer_warning_us_) {
      next_peer_warning_us_ = now + 10'000'000;
      log_.write(LogLevel::kWarn, "the standby peer " + standby_->peer + " answers the role probe with " +
                                      std::string(text.substr(0, 200)) +
                                      (peer ? " (it was started without --standby-of)" : "") +
                                      "; both may serve at once until this is fixed");
    }
  });
}

// The probe speaks the pair's key as --curve-secret holds it now; with
// `alternate`, when that is the key it already speaks, the one before it
// (the peer silent: a key staged in this allocator's file, not yet in the
// peer's, must not leave the two unable to hear each other).
void Server::rekey_probe(bool alternate) {
  curve::KeyPair own;
  if (!curve::read_key_file(auth_.secret_file, true, &own).empty()) return;
  if (own.secret_key == probe_key_.secret_key) {
    if (!alternate || probe_prev_key_.secret_key.empty()) return;
    own = probe_prev_key_;
  }
  // On failure the key in use stays recorded, and the probe's silence
  // brings the next try.
  if (curve::reconnect(probe_->handle(), {own.public_key, own, {}}, standby_->peer) != 0) return;
  probe_prev_key_ = probe_key_;
  probe_key_ = own;
}

void Server::read_witness_answers(std::uint64_t now) {
  each_control_answer(*witness_, [&](std::string_view text) {
    if (const auto a = wire::parse_claim_answer(text)) {
      takeover_->on_claim_answer(*a, now);
      return;
    }
    // A refusal of another kind (a key it does not list, a rate limit):
    // no lease, said every 10 s.
    if (now >= next_witness_warning_us_) {
      next_witness_warning_us_ = now + 10'000'000;
      log_.write(LogLevel::kWarn, "the witness " + standby_->witness + " answers a claim with " +
                                      std::string(text.substr(0, 200)));
    }
  });
}

// A claim (a standby whose peer is silent) or a renewal (the active), its
// nonce the time it went out: the lease counts from then.
void Server::claim(std::uint64_t now) {
  if (!takeover_->wants_claim(now)) return;
  const wire::ClaimRequest c{takeover_->id(), takeover_->term(), standby_->takeover_us / 1000, now};
  try {
    if (witness_->send(zmq::buffer(std::string_view(kControlTag)), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      (void)witness_->send(zmq::buffer(wire::claim_request(c)), zmq::send_flags::dontwait);
    }
  } catch (const zmq::error_t&) {
    // Not connected: no lease this time.
  }
}

// Each turn of a pair: the peer's (and the witness's) answers, a probe (and
// a claim) when due, and the rule.
void Server::standby_turn(std::uint64_t now) {
  read_probe_answers(now);
  if (witness_) read_witness_answers(now);
  if (now >= next_probe_us_) {
    if (witness_) claim(now);
    next_probe_us_ = now + standby_->probe_us;
    // Unanswered for a probe period: the peer may have rotated the pair's
    // key before this allocator's reload. The file says (a key installed
    // on both before either reloads), so the pair keeps hearing itself.
    // Each key is given two probes (a reconnection and its handshake)
    // before the other is tried.
    if (zap_ && now - takeover_->peer_heard_us() > standby_->probe_us &&
        now - last_rekey_check_us_ > 2 * standby_->probe_us) {
      last_rekey_check_us_ = now;
      rekey_probe(/*alternate=*/true);
    }
    try {
      if (probe_->send(zmq::buffer(std::string_view(kControlTag)),
                       zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        (void)probe_->send(zmq::buffer(std::string_view("role")), zmq::send_flags::dontwait);
      }
      takeover_->on_probe_sent(now);  // sent or not (no connection): the silence counts
    } catch (const zmq::error_t&) {
      // Not connected: the silence counts.
    }
  }
  const PairRole was = role();
  const PairRole now_role = takeover_->decide(now);
  if (now_role == was) return;
  const std::string term = std::to_string(takeover_->term());
  if (now_role == PairRole::kActive) {
    allocator_.activate(standby_->new_epoch());
    const char* why = takeover_->why() == Takeover::Why::kTieBreak ? "both stood by; this one has the lower id"
                      : witness_ ? "the peer did not answer; the witness granted the lease"
                                 : "the peer did not answer";
    log_.write(LogLevel::kWarn, "taking over from " + standby_->peer + " (" + why + ") as term " +
                                    term + ", epoch " + std::to_string(allocator_.epoch()));
    return;
  }
  if (takeover_->why() == Takeover::Why::kIsolated || takeover_->why() == Takeover::Why::kWitnessRefused) {
    const bool isolated = takeover_->why() == Takeover::Why::kIsolated;
    allocator_.stand_by(std::string("this allocator stood down: ") +
                            (isolated ? "it hears neither its peer nor the witness" : "the witness holds a newer lease"),
                        now);
    log_.write(LogLevel::kWarn, std::string("standing down (term ") + term + "): " +
                                    (isolated ? "neither " + standby_->peer + " nor the witness " + standby_->witness +
                                                    " answered within half the takeover time"
                                              : "the witness " + standby_->witness +
                                                    " granted the lease to a newer term"));
    return;
  }
  const PeerView& p = *takeover_->peer();
  allocator_.stand_by("this allocator stood down; " + standby_->peer + " is active", now);
  log_.write(LogLevel::kWarn, "standing down: " + standby_->peer + " is active as term " +
                                  std::to_string(p.term) + " (this one: " + term + ")");
}

HaInfo Server::ha_info(std::uint64_t now) const {
  if (!takeover_) return {};
  HaInfo h;
  h.peer = standby_->peer;
  h.term = takeover_->term();
  if (takeover_->peer()) {
    h.peer_role = to_string(takeover_->peer()->role);
    h.peer_heard_s_ago = static_cast<double>(now - std::min(now, takeover_->peer_heard_us())) * 1e-6;
  }
  if (witness_) {
    h.witness = standby_->witness;
    if (takeover_->witness_heard_us() > 0) {
      h.witness_heard_s_ago = static_cast<double>(now - std::min(now, takeover_->witness_heard_us())) * 1e-6;
    }
    const std::uint64_t until = takeover_->lease_until_us();
    h.lease_left_s = static_cast<double>(until > now ? until - now : 0) * 1e-6;
  }
  return h;
}

// ---- relays (wire/relay.h) ----

// A relay's batch: each (route, message) is one endpoint's message, heard
// from the peer named by the relay and the route. The relay's key (CURVE)
// speaks for each, so it must be allowed the hosts behind it. Source quotas
// by address do not apply (every endpoint behind it shares the relay's);
// quotas by host do.
int Server::relay_batch(std::string_view relay, const zmq::message_t& tag, bool more, std::uint64_t now) {
  auto drain = [&] {
    zmq::message_t part;
    while (more) {
      recv_part(router_, part);
      more = part.more();
    }
  };
  // Relays are trusted with the address quotas of every endpoint behind
  // them: only those the operator named (--relay-from) may send batches.
  // With CURVE on, the relay's key must also be an endpoint key, and its
  // hosts are the ones the endpoints behind it may speak for.
  std::string why;
  const KeyEntry* sender = nullptr;
  if (zap_) {
    const char* key = zmq_msg_gets(tag.handle(), "User-Id");
    sender = key != nullptr ? keys_.find(key) : nullptr;
    if (sender == nullptr) {
      why = "this relay's key is in no allow-list";
    } else if ((sender->roles & kRoleEndpoint) == 0) {
      why = "key \"" + sender->principal.name + "\" is a flowtune-ctl key, not a relay's (--curve-clients)";
    }
  }
  if (why.empty() && tcp_) {
    const char* address = zmq_msg_gets(tag.handle(), "Peer-Address");
    if (address == nullptr || !relay_allowed(address)) {
      why = std::string("relay batches from ") + (address != nullptr ? address : "?") +
            " are refused: not in --relay-from";
    }
  }
  // A keyed batch's chains mean something only when the relay sending it
  // was authenticated, and is a relay's key.
  const bool keyed = tag.to_string_view() == wire::kKeyedRelayTag;
  if (why.empty() && keyed && !zap_) {
    why = "keyed relay batches need CURVE on the allocator (--curve-secret)";
  } else if (why.empty() && keyed && !sender->principal.relay) {
    why = "key \"" + sender->principal.name + "\" may not vouch for the keys behind it (relay = true)";
  }
  if (!why.empty()) {
    drain();
    allocator_.on_unauthorized(relay, why, now);
    return 1;
  }
  ++allocator_.counters().relay_batches;
  const std::size_t frames = keyed ? 3 : 2;
  int pairs = 0;
  while (more) {
    zmq::message_t route, keys, body;
    recv_part(router_, route);
    more = route.more();
    if (more && keyed) {
      recv_part(router_, keys);
      more = keys.more();
    }
    if (!more || static_cast<std::size_t>(++pairs) > wire::kMaxRelayBatch) {
      drain();
      allocator_.on_bad_frames(relay, frames * static_cast<std::size_t>(pairs) + 1, now);  // a route without its message, or too many
      return pairs;
    }
    recv_part(router_, body);
    more = body.more();
    const std::string peer = wire::valid_route(route.to_string_view()) ? wire::relayed_peer(relay, route.to_string_view())
                                                                        : std::string();
    if (!wire::is_relayed_peer(peer) || (keyed && !wire::valid_key_chain(keys.to_string_view()))) {
      allocator_.on_bad_frames(relay, frames * static_cast<std::size_t>(pairs) + 1, now);
      continue;
    }
    const Principal* speaker = sender != nullptr ? &sender->principal : nullptr;
    if (keyed) {
      speaker = vouched(keys.to_string_view(), *sender, &why);
      if (speaker == nullptr) {
        allocator_.on_unauthorized(peer, why, now);
        continue;
      }
    }
    allocator_.on_message(peer, {body.data<std::uint8_t>(), body.size()}, now, speaker, {});
  }
  return pairs;
}

// The endpoint key a chain vouches for (wire/relay.h: innermost first),
// with every relay that passed it up, the top one included, in its `via`.
// Null, and *why, when a key is in no endpoint list or a relay's key lacks
// `relay = true`. Kept until the lists are read again.
const Principal* Server::vouched(std::string_view chain, const KeyEntry& top, std::string* why) {
  std::string id(chain);
  id.append(top.principal.key);
  if (const auto it = vouched_.find(id); it != vouched_.end()) return &it->second;
  std::vector<const Principal*> chain_keys;
  for (std::size_t i = 0; i < chain.size(); i += wire::kCurveKeyBytes) {
    char z85[curve::kZ85KeyChars + 1] = {};
    zmq_z85_encode(z85, reinterpret_cast<const std::uint8_t*>(chain.data() + i), wire::kCurveKeyBytes);
    const KeyEntry* k = keys_.find(z85);
    if (k == nullptr || (k->roles & kRoleEndpoint) == 0) {
      *why = std::string(i == 0 ? "the endpoint's key " : "a relay's key ") + z85 +
             " is in no endpoint list (--curve-clients)";
      return nullptr;
    }
    chain_keys.push_back(&k->principal);
  }
  chain_keys.push_back(&top.principal);
  const std::vector<const Principal*> relays(chain_keys.begin() + 1, chain_keys.end());
  std::optional<Principal> p = vouched_for(*chain_keys.front(), relays, why);
  if (!p) return nullptr;
  // Chains are few (one per endpoint key and path of relays); a flood of
  // made-up ones is refused above, as every key must be listed.
  if (vouched_.size() >= kMaxVouched) vouched_.clear();
  return &vouched_.emplace(std::move(id), std::move(*p)).first->second;
}

bool Server::relay_allowed(std::string_view address) const {
  for (const Cidr& c : relay_from_) {
    if (c.contains(address)) return true;
  }
  return false;
}

void Server::flush() {
  for (Outgoing& o : allocator_.take_outbox()) {
    std::vector<std::uint8_t> bytes = wire::encode(o.message);
    std::string_view relay, route;
    if (wire::split_relayed_peer(o.peer, &relay, &route)) {
      // Batched per relay, sent below: one ZeroMQ message for many endpoints.
      RelayOut& out = relay_out_[std::string(relay)];
      out.peers.push_back(std::move(o.peer));
      out.bytes.push_back(std::move(bytes));
      continue;
    }
    if (!send(o.peer, bytes.data(), bytes.size(), nullptr)) allocator_.on_send_failed(o.peer);
  }
  for (auto& [relay, out] : relay_out_) {
    for (std::size_t at = 0; at < out.peers.size(); at += wire::kMaxRelayBatch) {
      const std::size_t end = std::min(out.peers.size(), at + wire::kMaxRelayBatch);
      if (!send_relay_batch(relay, out, at, end)) {
        for (std::size_t i = at; i < end; ++i) allocator_.on_send_failed(out.peers[i]);
      }
    }
  }
  relay_out_.clear();
}

bool Server::send_relay_batch(const std::string& relay, const RelayOut& out, std::size_t at,
                              std::size_t end) {
  Counters& c = allocator_.counters();
  try {
    if (!router_.send(zmq::buffer(relay), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      c.send_failures += end - at;
      return false;
    }
    router_.send(zmq::buffer(wire::kRelayTag), zmq::send_flags::sndmore);
    for (std::size_t i = at; i < end; ++i) {
      std::string_view relay_id, route;
      (void)wire::split_relayed_peer(out.peers[i], &relay_id, &route);
      router_.send(zmq::buffer(route), zmq::send_flags::sndmore);
      router_.send(zmq::buffer(out.bytes[i]), i + 1 < end ? zmq::send_flags::sndmore : zmq::send_flags::none);
      ++c.messages_out;
      c.bytes_out += out.bytes[i].size();
    }
    return true;
  } catch (const zmq::error_t&) {
    c.send_failures += end - at;
    return false;
  }
}

bool Server::send(const std::string& peer, const void* data, std::size_t size, const char* tag) {
  Counters& c = allocator_.counters();
  try {
    if (!router_.send(zmq::buffer(peer), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      ++c.send_failures;
      return false;
    }
    if (tag != nullptr) {
      router_.send(zmq::buffer(std::string_view(tag)), zmq::send_flags::sndmore);
    }
    router_.send(zmq::const_buffer(data, size), zmq::send_flags::none);
    ++c.messages_out;
    c.bytes_out += size;
    return true;
  } catch (const zmq::error_t& e) {
    // EHOSTUNREACH: the peer disconnected; its state times out on its own.
    ++c.send_failures;
    if (log_.enabled(LogLevel::kDebug)) {
      log_.write(LogLevel::kDebug, "send to " + printable_peer(peer) + " failed: " + e.what());
    }
    return false;
  }
}

}  // namespace flowtune::daemon
