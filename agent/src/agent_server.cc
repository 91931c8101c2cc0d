#include "agent_server.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace flowtune::agent {

using client::Event;
using client::SocketRef;
using client::agent::Op;
using client::agent::Record;

namespace {
std::uint64_t key_of(std::int32_t fd, std::uint32_t gen) { return SocketRef{fd, gen}.packed(); }

// What a record costs of its process's share: an event that becomes a
// message to the allocator (a start, an end, a registration) one, a byte
// count, which only updates the session's books, a sixteenth.
double cost_of(Op op) {
  switch (op) {
    case Op::kRegister:
    case Op::kUnregister:
    case Op::kBegin:
    case Op::kEnd:
      return 1;
    case Op::kSent:
    case Op::kWrote:
    case Op::kUnsent:
      return 1.0 / 16;
    default:
      return 0;
  }
}
}  // namespace

Server::Server(ServerConfig config, std::shared_ptr<client::TenantNames> tenants)
    : config_(std::move(config)), tenants_(std::move(tenants)), fair_(config_.max_events_per_sec) {}

Server::~Server() = default;

void Server::log(int level, const std::string& text) const {
  if (level <= config_.log_level) std::fprintf(stderr, "flowtune-agent: %s\n", text.c_str());
}

namespace {
Error io_error(const char* what) {
  return Error{ErrorCause::kIo, std::string(what) + ": " + std::strerror(errno)};
}

// A socket file left by an agent that died, not one a live agent holds.
bool stale_socket_file(const sockaddr_un& addr, unsigned len) {
  UniqueFd probe(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  return probe && ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), len) != 0 &&
         errno == ECONNREFUSED;
}
}  // namespace

Result<void> Server::open() {
  sockaddr_un addr;
  unsigned len = 0;
  if (!client::agent::parse_address(config_.listen, &addr, &len)) {
    return Error{ErrorCause::kInvalid, "bad listen address \"" + config_.listen +
                                           "\" (\"@name\" or a path under 108 bytes)"};
  }
  listen_fd_ = UniqueFd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listen_fd_) return io_error("socket");
  if (config_.listen[0] != '@' && stale_socket_file(addr, len))
    (void)::unlink(config_.listen.c_str());
  if (::bind(listen_fd_.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return Error{ErrorCause::kIo,
                 "cannot listen on " + config_.listen + ": " + std::strerror(errno) +
                     (errno == EADDRINUSE ? " (another agent listens there)" : "")};
  }
  if (::listen(listen_fd_.get(), 256) != 0) return io_error("listen");
  epoll_fd_ = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd_) return io_error("epoll");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_.get();
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, listen_fd_.get(), &ev) != 0) {
    return io_error("epoll_ctl");
  }
  tick_fd_ = UniqueFd(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  itimerspec every{};
  every.it_interval.tv_nsec = static_cast<long>(kTickUs * 1000);
  every.it_value = every.it_interval;
  ev.data.fd = tick_fd_.get();
  if (!tick_fd_ || timerfd_settime(tick_fd_.get(), 0, &every, nullptr) != 0 ||
      ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, tick_fd_.get(), &ev) != 0) {
    return io_error("tick timer");
  }
  throttle_fd_ = UniqueFd(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  ev.data.fd = throttle_fd_.get();
  if (!throttle_fd_ || ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, throttle_fd_.get(), &ev) != 0) {
    return io_error("throttle timer");
  }
  return ok();
}

void Server::on_ready() {
  if (!drain_backlog()) return;  // the processes wait until the queue took it
  epoll_event ready[32];
  const int n = ::epoll_wait(epoll_fd_.get(), ready, 32, 0);
  turn_us_ = now_us();
  for (int i = 0; i < n; ++i) {
    const int fd = ready[i].data.fd;
    if (fd == listen_fd_.get()) {
      accept_all();
    } else if (fd == tick_fd_.get()) {
      std::uint64_t expirations;
      (void)::read(tick_fd_.get(), &expirations, sizeof expirations);
      tick();
    } else if (fd == throttle_fd_.get()) {
      on_throttle_timer();
    } else if (const auto it = clients_.find(fd); it != clients_.end()) {
      // A throttled process is reported only when its connection ends.
      Client& c = *it->second;
      if (c.throttled ? (ready[i].events & (EPOLLHUP | EPOLLERR)) != 0 : !read_client(c)) {
        drop_client(c);
      }
    }
  }
}

std::uint64_t Server::now_us() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

bool Server::allowed(uid_t uid) const {
  if (config_.allowed_uids.empty() || uid == 0 || uid == ::geteuid()) return true;
  for (const uid_t u : config_.allowed_uids) {
    if (u == uid) return true;
  }
  return false;
}

void Server::accept_all() {
  for (;;) {
    UniqueFd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd) {
      if (errno == EMFILE || errno == ENFILE) pause_accepting(errno);
      if (errno == ECONNABORTED || errno == EINTR) continue;
      return;
    }
    auto c = std::make_unique<Client>();
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) continue;
    c->pid = cred.pid;
    c->uid = cred.uid;
    if (!allowed(cred.uid)) {
      log(2, "process " + std::to_string(cred.pid) + " of uid " + std::to_string(cred.uid) +
                 " is not served (--allow-uid)");
      continue;  // closed: it runs its own session
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd.get();
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd.get(), &ev) != 0) continue;
    c->fd = std::move(fd);
    c->heard_us = now_us();
    const int key = c->fd.get();
    clients_[key] = std::move(c);
  }
}

void Server::pause_accepting(int err) {
  if (accept_paused_) return;
  // The connection stays queued and the listening socket readable: left in
  // the set, the loop would spin. Waiting processes time out and run
  // their own sessions.
  (void)::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, listen_fd_.get(), nullptr);
  accept_paused_ = true;
  log(1, std::string("cannot accept processes: ") + std::strerror(err) +
             "; accepting again when one leaves");
}

void Server::resume_accepting() {
  if (!accept_paused_) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_.get();
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, listen_fd_.get(), &ev) == 0) {
    accept_paused_ = false;
  }
}

bool Server::read_client(Client& c) {
  std::uint8_t buf[client::agent::kMaxPacket];
  // A fair share per turn, and nothing more once the queue is full; the
  // rest stays readable for the next turn.
  for (int k = 0; k < 64 && backlog_.empty(); ++k) {
    if (c.welcomed && !fair_.may_read(c.share, turn_us_)) {
      throttle(c);
      return true;
    }
    const ssize_t n = ::recv(c.fd.get(), buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
    if (n == 0) return false;
    if (static_cast<std::size_t>(n) > sizeof buf) {
      log(2, "process " + std::to_string(c.pid) + " sent an oversized packet; dropped");
      return false;
    }
    c.heard_us = now_us();
    bool welcomed_before = c.welcomed;
    const bool ok = client::agent::for_each_record(
        buf, static_cast<std::size_t>(n),
        [&](const Record& r, std::string_view payload) { on_record(c, r, payload); });
    if (!ok) {
      log(2, "process " + std::to_string(c.pid) + " sent a malformed packet; dropped");
      return false;
    }
    if (!welcomed_before && !c.welcomed) return false;  // refused, or no hello first
  }
  return true;
}

void Server::on_record(Client& c, const Record& r, std::string_view payload) {
  if (r.op == Op::kHello) {
    if (!c.welcomed) on_hello(c, r, payload);
    return;
  }
  if (!c.welcomed || static_cast<std::uint8_t>(r.op) >= static_cast<std::uint8_t>(Op::kWelcome)) {
    return;
  }
  Event e = client::agent::event_of(r, payload, tenants_.get());
  if (e.kind == Event::kRegister) {
    on_register(c, e);
  } else {
    forward(c, e);
  }
  fair_.spend(c.share, cost_of(r.op), turn_us_);
}

void Server::on_hello(Client& c, const Record& r, std::string_view payload) {
  client::agent::HelloBody body;
  std::string why;
  if (r.value != client::agent::kProtocolVersion || payload.size() < sizeof body) {
    why = "protocol version " + std::to_string(r.value) + ", the agent speaks " +
          std::to_string(client::agent::kProtocolVersion);
  } else if (std::memcpy(&body, payload.data(), sizeof body);
             body.host_bytes > payload.size() - sizeof body) {
    why = "its hello is malformed (a host longer than the hello)";
  } else {
    std::string_view allocator = payload.substr(sizeof body);
    const std::string_view host = allocator.substr(allocator.size() - body.host_bytes);
    allocator.remove_suffix(body.host_bytes);
    const auto& want = config_.session;
    if (body.min_flowlet_bytes != want.min_flowlet_bytes ||
        body.max_rate_bytes_per_sec != want.max_rate_bytes_per_sec ||
        body.min_rate_bytes_per_sec != want.min_rate_bytes_per_sec) {
      why = "its session settings (min flowlet bytes, pacing rate bounds) differ from the agent's";
    } else if (body.explicit_allocator != 0 && allocator != config_.allocator) {
      why = "it names allocator \"" + std::string(allocator) + "\", the agent uses \"" +
            config_.allocator + "\"";
    } else if (!host.empty() && host != config_.host) {
      why = "it names host \"" + std::string(host) + "\", the agent's session is " +
            (config_.host.empty() ? std::string("for no named host (no --host)")
                                  : "host \"" + config_.host + "\"");
    }
  }
  Record w;
  w.op = Op::kWelcome;
  w.value = why.empty() ? 1 : 0;
  std::vector<std::uint8_t> out;
  client::agent::append(out, w, why);
  (void)::send(c.fd.get(), out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  c.welcomed = why.empty();
  if (!why.empty()) log(2, "process " + std::to_string(c.pid) + " refused: " + why);
}

std::uint32_t Server::new_id() {
  // Ids name sockets in the session: never one still in use.
  for (;;) {
    const std::uint32_t id = next_id_;
    next_id_ = next_id_ >= 0x7fffffffu ? 1 : next_id_ + 1;
    if (routes_.find(id) == routes_.end()) return id;
  }
}

void Server::on_register(Client& c, const Event& e) {
  const std::uint64_t key = key_of(e.ref.fd, e.ref.gen);
  if (c.ids.count(key) != 0) return;  // registered already
  if (c.ids.size() >= config_.max_sockets_per_process) {
    if (!c.told_full)
      log(1, "process " + std::to_string(c.pid) + " registered " + std::to_string(c.ids.size()) +
                 " sockets; more go unscheduled");
    c.told_full = true;
    return;
  }
  const std::uint32_t id = new_id();
  routes_[id] = Route{&c, e.ref.fd, e.ref.gen};
  c.ids[key] = id;
  Event mine = e;
  mine.ref = SocketRef{static_cast<int>(id), 1};
  push(mine);
}

void Server::forward(Client& c, Event e) {
  const auto it = c.ids.find(key_of(e.ref.fd, e.ref.gen));
  if (it == c.ids.end()) return;  // not registered here (or past the limit)
  const std::uint32_t id = it->second;
  e.ref = SocketRef{static_cast<int>(id), 1};
  if (e.kind == Event::kBegin || e.kind == Event::kWrote) {
    if (const auto r = routes_.find(id); r != routes_.end()) ++r->second.begins;
  }
  if (e.kind == Event::kUnregister) {
    c.ids.erase(it);
    routes_.erase(id);
  }
  push(e);
}

void Server::drop_client(Client& c) {
  // The session ends the process's flowlets: its sockets are unregistered.
  for (const auto& [key, id] : c.ids) {
    routes_.erase(id);
    Event e;
    e.kind = Event::kUnregister;
    e.ref = SocketRef{static_cast<int>(id), 1};
    push(e);
  }
  clients_.erase(c.fd.get());  // closes the connection, which leaves the epoll set
  resume_accepting();
}

void Server::push(const Event& e) {
  if (!backlog_.empty() || !runtime_->push(e, false)) backlog_.push_back(e);
}

bool Server::drain_backlog() {
  while (!backlog_.empty() && runtime_->push(backlog_.front(), false)) backlog_.pop_front();
  return backlog_.empty();
}

void Server::throttle(Client& c) {
  if (c.throttled) return;
  epoll_event ev{};
  ev.events = 0;  // hang-ups and errors are still reported
  ev.data.fd = c.fd.get();
  (void)::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
  c.throttled = true;
  if (!c.told_share) {
    log(2, "process " + std::to_string(c.pid) + " sends past its share of the host's " +
               std::to_string(static_cast<long long>(config_.max_events_per_sec)) +
               " events/s (--max-events-per-sec); it is read at its share");
    c.told_share = true;
  }
  arm_throttle_timer(fair_.wait_us(c.share));
}

void Server::arm_throttle_timer(std::uint64_t wait_us) {
  const std::uint64_t due = turn_us_ + std::max<std::uint64_t>(wait_us, 1);
  if (throttle_due_us_ != 0 && throttle_due_us_ <= due) return;  // fires sooner already
  throttle_due_us_ = due;
  itimerspec at{};
  at.it_value.tv_sec = static_cast<time_t>(wait_us / 1'000'000);
  at.it_value.tv_nsec = static_cast<long>(std::max<std::uint64_t>(wait_us % 1'000'000, 1) * 1000);
  (void)timerfd_settime(throttle_fd_.get(), 0, &at, nullptr);
}

void Server::on_throttle_timer() {
  std::uint64_t expirations;
  (void)::read(throttle_fd_.get(), &expirations, sizeof expirations);
  throttle_due_us_ = 0;
  std::uint64_t next = 0;
  for (auto& [fd, c] : clients_) {
    if (!c->throttled) continue;
    if (!fair_.may_read(c->share, turn_us_)) {
      const std::uint64_t w = fair_.wait_us(c->share);
      next = next == 0 ? w : std::min(next, w);
      continue;
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    (void)::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, fd, &ev);
    c->throttled = false;
  }
  if (next != 0) arm_throttle_timer(next);
}

void Server::tick() {
  Record t;
  t.op = Op::kTick;
  std::vector<std::uint8_t> out;
  client::agent::append(out, t);
  const std::uint64_t now = now_us();
  std::vector<Client*> silent;
  std::uint32_t sharing = 0;
  for (const auto& [fd, c] : clients_) {
    if (c->throttled) c->heard_us = now;  // it has something to say: its share is spent
    if (fair_.active(c->share, now)) ++sharing;
    if (now > c->heard_us + kClientSilenceUs) {
      silent.push_back(c.get());
    } else if (c->welcomed) {
      (void)::send(fd, out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
  }
  fair_.set_active(sharing);
  for (Client* c : silent) {
    log(2, "process " + std::to_string(c->pid) + " silent for 3 s; its sockets are released");
    drop_client(*c);
  }
}

// ---- the runtime's decisions ----

void Server::reply(std::uint32_t id, Op op, std::uint64_t value) {
  const auto it = routes_.find(id);
  if (it == routes_.end()) return;  // the process unregistered it or left
  Record r;
  r.op = op;
  r.fd = it->second.fd;
  r.gen = it->second.gen;
  r.value = value;
  client::agent::append(it->second.client->out, r);
}

client::SocketTable::Result Server::set_rate(SocketRef s, std::uint64_t bytes_per_sec, int*) {
  if (routes_.find(static_cast<std::uint32_t>(s.fd)) == routes_.end()) {
    return client::SocketTable::Result::kGone;
  }
  reply(static_cast<std::uint32_t>(s.fd), Op::kRate, bytes_per_sec);
  return client::SocketTable::Result::kOk;
}

bool Server::look(SocketRef s, Look* out) {
  if (routes_.find(static_cast<std::uint32_t>(s.fd)) == routes_.end()) {
    *out = Look{};  // gone: counts as drained
    return true;
  }
  reply(static_cast<std::uint32_t>(s.fd), Op::kLook, 0);
  return false;
}

void Server::clear_flowlet(SocketRef s) {
  // The begins seen so far: the process clears the flowlet only if it sent
  // no begin after them.
  const auto it = routes_.find(static_cast<std::uint32_t>(s.fd));
  if (it != routes_.end()) reply(it->first, Op::kEnded, it->second.begins);
}

void Server::flush() {
  for (auto& [fd, c] : clients_) {
    std::size_t at = 0;
    while (at < c->out.size()) {
      // Whole records, at most a packet's worth each send.
      std::size_t end = at;
      while (end < c->out.size()) {
        Record r;
        std::memcpy(&r, c->out.data() + end, sizeof r);
        const std::size_t len = sizeof r + r.payload;
        if (end > at && end + len - at > client::agent::kMaxPacket) break;
        end += len;
      }
      const ssize_t n = ::send(fd, c->out.data() + at, end - at, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0) break;  // full: kept for the next turn (or the process is gone)
      at = end;
    }
    c->out.erase(c->out.begin(), c->out.begin() + static_cast<std::ptrdiff_t>(at));
    // A process that reads nothing is shut out (the I/O loop then sees the
    // connection end and drops it); it fails open on its side.
    if (c->out.size() > kMaxUnread) (void)::shutdown(fd, SHUT_RDWR);
  }
}

}  // namespace flowtune::agent
