#include "flowtune/daemon/server.h"

#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "allocator_internal.h"
#include "flowtune/common/endpoint.h"
#include "flowtune/daemon/control.h"
#include "flowtune/wire/codec.h"

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

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Server::Server(zmq::context_t& ctx, Allocator& allocator, Log& log, const std::string& listen,
               std::uint64_t busy_poll_us)
    : allocator_(allocator), log_(log), router_(ctx, zmq::socket_type::router),
      start_ns_(steady_ns()), busy_poll_us_(busy_poll_us) {
  // Unroutable replies (the peer left) fail visibly instead of vanishing, and
  // a slow peer's full queue fails a send instead of blocking the loop.
  router_.set(zmq::sockopt::router_mandatory, 1);
  router_.set(zmq::sockopt::linger, 0);
  router_.set(zmq::sockopt::sndhwm, 100000);
  router_.set(zmq::sockopt::rcvhwm, 100000);
  router_.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(wire::kMaxMessageBytes));
  if (const std::string why = endpoint_port_error(listen); !why.empty()) {
    throw ConfigError("cannot listen on " + why);
  }
  try {
    router_.bind(listen);
  } catch (const zmq::error_t& e) {
    throw ConfigError("cannot listen on " + listen + ": " + e.what());
  }
  bound_ = router_.get(zmq::sockopt::last_endpoint);
}

std::uint64_t Server::now_us() const {
  return static_cast<std::uint64_t>((steady_ns() - start_ns_) / 1000);
}

int Server::run(int signal_fd, std::uint64_t stop_after_turns) {
  zmq::pollitem_t items[2] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                              {nullptr, signal_fd, ZMQ_POLLIN, 0}};
  const int nitems = signal_fd >= 0 ? 2 : 1;
  for (std::uint64_t turn = 0; turn < stop_after_turns; ++turn) {
    long timeout_ms = -1;
    std::uint64_t now = now_us();
    if (allocator_.busy()) {
      last_active_us_ = now;
      timeout_ms = 0;
    } else if (now - last_active_us_ < busy_poll_us_) {
      timeout_ms = 0;  // still spinning after recent traffic: no wake-up cost
    } else if (const std::uint64_t next = allocator_.next_timer_us(); next != UINT64_MAX) {
      timeout_ms = next <= now ? 0 : static_cast<long>((next - now + 999) / 1000);
    }
    if (stop_after_turns != UINT64_MAX && timeout_ms < 0) timeout_ms = 10;
    try {
      zmq::poll(items, static_cast<std::size_t>(nitems), std::chrono::milliseconds(timeout_ms));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
    if (nitems == 2 && (items[1].revents & ZMQ_POLLIN) != 0) {
      signalfd_siginfo si{};
      if (::read(signal_fd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
        return static_cast<int>(si.ssi_signo);
      }
    }
    const std::int64_t drain_start = steady_ns();
    const std::int64_t drain_budget = std::max(kMinDrainNs, last_iteration_ns_);
    int received = 0;
    for (; received < kMaxDrainPerTurn; ++received) {
      if ((received & 15) == 15 && steady_ns() - drain_start > drain_budget) break;
      if (!receive_one(static_cast<std::uint64_t>((steady_ns() - start_ns_) / 1000))) break;
    }
    now = now_us();
    if (now >= allocator_.next_timer_us()) allocator_.on_timer(now);
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
  }
  return 0;
}

bool Server::receive_one(std::uint64_t now) {
  zmq::message_t peer;
  try {
    if (!router_.recv(peer, zmq::recv_flags::dontwait)) return false;
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return false;
    throw;
  }
  zmq::message_t frames[2];
  std::size_t count = 0;
  bool more = peer.more();
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
  if (count == 1) {
    allocator_.on_message(peer_id,
                          {frames[0].data<std::uint8_t>(), frames[0].size()}, now);
    return true;
  }
  if (count == 2 && frames[0].to_string_view() == kControlTag) {
    ++allocator_.counters().control_requests;
    std::string reply;
    if (control_tokens_.take(now)) {
      reply = control_reply(allocator_, {bound_, now}, frames[1].to_string_view(), now);
    } else {
      allocator_.counters().count(Cause::kRateLimited);
      // retry_ms: flowtune-ctl waits and asks again (a paged dump may
      // outrun the burst).
      reply = R"({"error":"too many flowtune-ctl requests; try again shortly","retry_ms":10})";
    }
    send(std::string(peer_id), reply.data(), reply.size(), kControlTag);
    return true;
  }
  allocator_.on_bad_frames(peer_id, count, now);
  return true;
}

void Server::flush() {
  for (Outgoing& o : allocator_.take_outbox()) {
    const std::vector<std::uint8_t> bytes = wire::encode(o.message);
    if (!send(o.peer, bytes.data(), bytes.size(), nullptr)) allocator_.on_send_failed(o.peer);
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
