// The Server's loop (flowtune/daemon/server.h): each turn drains the
// router, runs due timers, iterates, and sends the outbox; an endpoint's
// message and a flowtune-ctl request are told apart here. CURVE, the hot
// standby, relays and heap trimming have files of their own (server_*.cc).
#include "flowtune/daemon/server.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq_addon.hpp>

#include "allocator_internal.h"
#include "flowtune/common/endpoint.h"
#include "flowtune/common/router.h"
#include "flowtune/common/signals.h"
#include "flowtune/common/zmq_recv.h"
#include "flowtune/daemon/control.h"
#include "flowtune/wire/codec.h"
#include "flowtune/wire/relay.h"
#include "server_internal.h"

namespace flowtune::daemon {

using detail::steady_ns;

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

// A listener no other machine can reach: without CURVE, only it takes
// requests that change state.
bool loopback_only(const std::string& endpoint) {
  for (const char* p : {"ipc://", "inproc://", "tcp://127.", "tcp://localhost:", "tcp://[::1]:"}) {
    if (endpoint.rfind(p, 0) == 0) return true;
  }
  return false;
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

Server::~Server() {
  // The monitor goes before the sockets it watches.
  if (monitor_) zmq_socket_monitor(router_.handle(), nullptr, 0);
}

std::uint64_t Server::now_us() const {
  return static_cast<std::uint64_t>((steady_ns() - start_ns_) / 1000);
}

// How long the turn's poll may wait: 0 while busy or spinning after recent
// traffic, else until the next timer, memory check or probe (-1: forever).
long Server::poll_timeout_ms(std::uint64_t now) {
  if (allocator_.busy()) {
    last_active_us_ = now;
    return 0;
  }
  if (now - last_active_us_ < busy_poll_us_) {
    return 0;  // still spinning after recent traffic: no wake-up cost
  }
  // Idle: the next timer, or the next memory check (due after a turn that
  // was not iterating, which set it into the future).
  std::uint64_t next = std::min(allocator_.next_timer_us(), next_memory_check_us_);
  if (probe_) next = std::min(next, next_probe_us_);
  return next <= now ? 0 : static_cast<long>((next - now + 999) / 1000);
}

// The turn's messages, within kMaxDrainPerTurn and the time budget;
// returns how many, counted in endpoint messages (a relay's batch holds up
// to 1,024).
int Server::drain(std::int64_t drain_start) {
  const std::int64_t drain_budget = std::max(kMinDrainNs, last_iteration_ns_);
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
  return received;
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
    long timeout_ms = poll_timeout_ms(now_us());
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
    const int received = drain(drain_start);
    const std::uint64_t now = now_us();
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
    drain_rest(router_, more);
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
      drain_rest(router_, more);
      break;
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
  if (is_control) {
    answer_control(peer_id, frames[1].to_string_view(), sender, now);
  } else {
    hear_endpoint(peer_id, frames[0], sender, now);
  }
  return 1;
}

void Server::hear_endpoint(std::string_view peer_id, const zmq::message_t& body,
                           const KeyEntry* sender, std::uint64_t now) {
  if (sender != nullptr && (sender->roles & kRoleEndpoint) == 0) {
    allocator_.on_unauthorized(peer_id,
                               "key \"" + sender->principal.name +
                                   "\" is a flowtune-ctl key, not an endpoint's",
                               now);
    return;
  }
  // The peer's IP address for the per-source quotas: TCP only (over ipc
  // libzmq names the process, "localhost:UID:GID:PID", which would make
  // each process a source of its own).
  const char* address = tcp_ ? zmq_msg_gets(body.handle(), "Peer-Address") : nullptr;
  allocator_.on_message(peer_id, {body.data<std::uint8_t>(), body.size()}, now,
                        sender != nullptr ? &sender->principal : nullptr,
                        address != nullptr ? std::string_view(address) : std::string_view());
}

void Server::answer_control(std::string_view peer_id, std::string_view request,
                            const KeyEntry* sender, std::uint64_t now) {
  ++allocator_.counters().control_requests;
  std::string reply;
  if (request == "role" && (!zap_ || sender != nullptr)) {
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
    reply = control(request, sender, now);
  } else {
    allocator_.counters().count(Cause::kRateLimited);
    // retry_ms: flowtune-ctl waits and asks again (a paged dump may
    // outrun the burst).
    reply = R"({"error":"too many flowtune-ctl requests; try again shortly","retry_ms":10})";
  }
  send(std::string(peer_id), reply.data(), reply.size(), kControlTag);
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
