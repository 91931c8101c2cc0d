#include "agent_link.h"

#include <poll.h>
#include <pthread.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>

#include "control_thread.h"
#include "runtime.h"

namespace flowtune::client {

using agent::Op;
using agent::Record;

AgentLink::AgentLink(AgentLinkConfig config, SocketTable& table,
                     std::shared_ptr<const TenantNames> tenants)
    : config_(std::move(config)),
      table_(table),
      tenants_(std::move(tenants)),
      inbox_(config_.queue_capacity),
      start_ns_(steady_ns()) {}

AgentLink::~AgentLink() { (void)stop(); }

std::uint64_t AgentLink::now_us() const { return micros_since(start_ns_); }

void AgentLink::log(int level, const std::string& text) const {
  if (level <= config_.log_level) log_to_stderr(pidfd_.get(), text);
}

int AgentLink::start() {
  return start_control_thread(&thread_, [this](std::promise<int>* ready) { run(ready); });
}

int AgentLink::stop() {
  if (!thread_.joinable()) return 0;
  stopping_.store(true, std::memory_order_release);
  inbox_.signal();
  thread_.join();
  return loop_close_rc_;
}

bool AgentLink::push(const Event& e, bool urgent) {
  if (inbox_.push(e, urgent)) return true;
  published_.queue_overflows.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void AgentLink::wake() { (void)inbox_.wake(); }

ft_stats AgentLink::stats() const {
  ft_stats s{};
  s.rates_applied = published_.rates_applied.load(std::memory_order_relaxed);
  s.rates_cleared = published_.rates_cleared.load(std::memory_order_relaxed);
  s.pacing_failures = published_.pacing_failures.load(std::memory_order_relaxed);
  s.queue_overflows = published_.queue_overflows.load(std::memory_order_relaxed);
  s.resyncs = published_.resyncs.load(std::memory_order_relaxed);
  s.connected = published_.connected.load(std::memory_order_relaxed);
  return s;
}

void AgentLink::run(std::promise<int>* ready) {
  inbox_.enter();
  (void)pthread_setname_np(pthread_self(), "ft-agent-link");
  sigset_t all;
  sigfillset(&all);
  (void)pthread_sigmask(SIG_BLOCK, &all, nullptr);
  if (!enter_private_fd_table(table_, &pidfd_)) note_shared_fd_table();
  int rc = connect_agent();
  if (rc == FT_OK && !open_wakeups()) rc = FT_ERUNTIME;
  if (rc != FT_OK) {
    loop_.unwatch_all();
    close_all();
    ready->set_value(rc);
    return;
  }
  published_.connected.store(1, std::memory_order_relaxed);
  ready->set_value(FT_OK);
  turn();
  loop_.run([this] { return inbox_.prepare_to_sleep(table_, napping_); },
            [this] { inbox_.flag.woke(); }, [this] { turn(); });
  close_all();
}

void AgentLink::close_all() {
  loop_close_rc_ = loop_.close();
  sock_.reset();
  timer_fd_.reset();
  signal_fd_.reset();
  table_.set_pidfd(-1);
  pidfd_.reset();
  inbox_.leave();
}

int AgentLink::connect_agent() {
  sockaddr_un addr;
  unsigned len = 0;
  if (!agent::parse_address(config_.address, &addr, &len)) return FT_ECONNECT;
  UniqueFd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s) return FT_ECONNECT;
  if (::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) return FT_ECONNECT;
  // Anyone may bind an abstract name: only an agent run by root or by this
  // process's own user is trusted with its sockets' rates.
  ucred peer{};
  socklen_t plen = sizeof peer;
  if (::getsockopt(s.get(), SOL_SOCKET, SO_PEERCRED, &peer, &plen) != 0 ||
      (peer.uid != 0 && peer.uid != ::geteuid())) {
    log(1, "ignoring " + config_.address + ": it is run by uid " + std::to_string(peer.uid) +
               ", neither root nor this process's user");
    return FT_ECONNECT;
  }
  std::vector<std::uint8_t> hello;
  Record r;
  r.op = Op::kHello;
  r.value = agent::kProtocolVersion;
  agent::HelloBody body = config_.hello;
  body.explicit_allocator = config_.allocator.empty() ? 0 : 1;
  body.host_bytes = static_cast<std::uint32_t>(config_.host.size());
  std::string payload(reinterpret_cast<const char*>(&body), sizeof body);
  payload += config_.allocator;
  payload += config_.host;
  agent::append(hello, r, payload);
  if (::send(s.get(), hello.data(), hello.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(hello.size())) {
    return FT_ECONNECT;
  }
  pollfd p{s.get(), POLLIN, 0};
  if (::poll(&p, 1, kWelcomeWaitMs) != 1) return FT_ECONNECT;
  std::uint8_t buf[agent::kMaxPacket];
  const ssize_t n = ::recv(s.get(), buf, sizeof buf, MSG_TRUNC);
  if (n <= 0 || static_cast<std::size_t>(n) > sizeof buf) return FT_ECONNECT;
  int verdict = -1;
  std::string why;
  const bool ok = agent::for_each_record(buf, static_cast<std::size_t>(n),
                                         [&](const Record& w, std::string_view text) {
                                           if (w.op != Op::kWelcome || verdict >= 0) return;
                                           verdict = w.value == 1 ? 1 : 0;
                                           why = text;
                                         });
  if (!ok || verdict != 1) {
    if (verdict == 0) log(2, "host agent " + config_.address + " refused this process: " + why);
    return FT_ECONNECT;
  }
  sock_ = std::move(s);
  heard_us_ = said_us_ = now_us();
  return FT_OK;
}

bool AgentLink::open_wakeups() {
  timer_fd_ = UniqueFd(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!timer_fd_) return false;
  sigset_t wake_set;
  sigemptyset(&wake_set);
  sigaddset(&wake_set, control_wake_signal());
  signal_fd_ = UniqueFd(signalfd(-1, &wake_set, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!signal_fd_ || loop_.init() != 0) return false;
  return loop_.watch(signal_fd_.get(),
                     [this] {
                       signalfd_siginfo info[8];
                       while (::read(signal_fd_.get(), info, sizeof info) > 0) {
                       }
                       turn();
                     }) == 0 &&
         loop_.watch(timer_fd_.get(),
                     [this] {
                       std::uint64_t expirations;
                       (void)::read(timer_fd_.get(), &expirations, sizeof expirations);
                       turn();
                     }) == 0 &&
         loop_.watch(sock_.get(), [this] { on_readable(); }) == 0;
}

void AgentLink::on_readable() {
  readable_ = true;
  turn();
}

void AgentLink::turn() {
  const bool stopping = stopping_.load(std::memory_order_acquire);
  std::uint64_t now = now_us();
  if (intake_.drain(now, *this)) linger_until_us_ = now + kLingerUs;
  // The socket is read when the loop said it is readable: a turn of the
  // nap timer or a wake-up would mostly find it empty (a system call for
  // nothing on every turn). And before the agent is called silent: what it
  // said may be waiting behind this turn in the loop's batch.
  if (sock_ && (readable_ || now > heard_us_ + kSilenceUs)) {
    readable_ = false;
    receive(now);
  }
  now = now_us();
  if (sock_ && now > heard_us_ + kSilenceUs) lost(now, "host agent silent");
  if (!sock_ && !stopping && now >= retry_at_us_) try_reconnect(now);
  if (sock_ && out_.empty() && pending_.empty() && now >= said_us_ + kTickUs) {
    Record t;
    t.op = Op::kTick;
    agent::append(out_, t);
  }
  if (sock_) send_out(now);
  if (stopping) {
    // The agent ends this process's flowlets when the connection closes.
    loop_.unwatch_all();
    return;
  }
  arm_timer(now_us());
}

void AgentLink::receive(std::uint64_t now) {
  std::uint8_t buf[agent::kMaxPacket];
  for (;;) {
    const ssize_t n = ::recv(sock_.get(), buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n < 0 && errno == EINTR) continue;
    if (n > static_cast<ssize_t>(sizeof buf)) {
      lost(now, "host agent sent an oversized packet");
      return;
    }
    if (n <= 0) {
      lost(now, n == 0 ? "host agent closed the connection" : std::strerror(errno));
      return;
    }
    heard_us_ = now;
    if (!agent::for_each_record(buf, static_cast<std::size_t>(n),
                                [this](const Record& r, std::string_view) { on_record(r); })) {
      lost(now, "host agent sent a malformed packet");
      return;
    }
  }
}

void AgentLink::on_record(const Record& r) {
  const SocketRef ref{r.fd, r.gen};
  switch (r.op) {
    case Op::kRate: {
      int err = 0;
      const auto res = table_.set_rate(ref, r.value, &err);
      if (res == SocketTable::Result::kOk) {
        (r.value != 0 ? published_.rates_applied : published_.rates_cleared)
            .fetch_add(1, std::memory_order_relaxed);
      } else if (res == SocketTable::Result::kFailed) {
        published_.pacing_failures.fetch_add(1, std::memory_order_relaxed);
        if (!pacing_failure_logged_) {
          pacing_failure_logged_ = true;
          log(1, std::string("cannot pace sockets (SO_MAX_PACING_RATE): ") + std::strerror(err) +
                     "; flowlets run unpaced");
        }
      }
      return;
    }
    case Op::kLook: {
      SocketPort::Look look;
      LocalPort(table_).look(ref, &look);
      Event e;
      e.ref = ref;
      if (look.unreported != 0) {
        // A wrote record: the agent counts it among the begins (kEnded).
        if (const auto it = regs_.find(ref.fd); it != regs_.end()) ++it->second.begins;
        e.kind = Event::kWrote;
        e.bytes = look.unreported;
        emit(e);
      }
      e.kind = Event::kUnsent;
      e.bytes = look.unsent;
      e.writing = look.writing;
      emit(e);
      return;
    }
    case Op::kEnded: {
      // Only if no begin went out after the one the agent ended.
      const auto it = regs_.find(ref.fd);
      if (it == regs_.end() || it->second.gen != ref.gen || it->second.begins != r.value) return;
      it->second.outstanding = 0;
      set_open(it->second, false);
      table_.clear_flowlet(ref);
      return;
    }
    default:
      return;  // kTick: heard_us_ is enough
  }
}

void AgentLink::emit(const Event& e) {
  std::string tenant;
  const Record r = agent::record_of(e, tenants_.get(), &tenant);
  if (out_.size() + sizeof r + tenant.size() > agent::kMaxPacket) {
    pending_bytes_ += out_.size();
    pending_.push_back(std::move(out_));
    out_.clear();
  }
  agent::append(out_, r, tenant);
}

void AgentLink::send_out(std::uint64_t now) {
  if (!out_.empty()) {
    pending_bytes_ += out_.size();
    pending_.push_back(std::move(out_));
    out_.clear();
  }
  while (!pending_.empty()) {
    const std::vector<std::uint8_t>& p = pending_.front();
    const ssize_t n = ::send(sock_.get(), p.data(), p.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0) {
      lost(now, std::string("host agent: ") + std::strerror(errno));
      return;
    }
    pending_bytes_ -= p.size();
    pending_.pop_front();
    said_us_ = now;
  }
  if (pending_bytes_ > kMaxBacklog) lost(now, "host agent stopped reading");
}

void AgentLink::lost(std::uint64_t now, const std::string& why) {
  published_.connected.store(0, std::memory_order_relaxed);
  // Fail open: no cap of the agent's outlives the connection.
  for (const auto& [fd, reg] : regs_) {
    int err = 0;
    if (table_.set_rate(SocketRef{fd, reg.gen}, 0, &err) == SocketTable::Result::kOk) {
      published_.rates_cleared.fetch_add(1, std::memory_order_relaxed);
    }
  }
  sock_.reset();  // closing it takes it out of the loop's set
  readable_ = false;
  pending_.clear();
  pending_bytes_ = 0;
  out_.clear();
  backoff_us_ = backoff_us_ == 0 ? kRetryMinUs : std::min(backoff_us_ * 2, kRetryMaxUs);
  retry_at_us_ = now + backoff_us_;
  log(2, why + "; sockets unpaced until it is back");
}

void AgentLink::try_reconnect(std::uint64_t now) {
  if (connect_agent() != FT_OK || loop_.watch(sock_.get(), [this] { on_readable(); }) != 0) {
    sock_.reset();
    backoff_us_ = std::min(std::max(backoff_us_ * 2, kRetryMinUs), kRetryMaxUs);
    retry_at_us_ = now + backoff_us_;
    return;
  }
  backoff_us_ = 0;
  published_.connected.store(1, std::memory_order_relaxed);
  published_.resyncs.fetch_add(1, std::memory_order_relaxed);
  log(2, "host agent " + config_.address + " is back");
  resend_state();
}

void AgentLink::resend_state() {
  // The agent knows nothing of this process: every registration again, and
  // each flowlet in progress with what it still holds (declared and not
  // handed over, plus what the kernel has not sent).
  for (auto& [fd, reg] : regs_) {
    const SocketRef ref{fd, reg.gen};
    reg.begins = 0;
    Event e;
    e.kind = Event::kRegister;
    e.ref = ref;
    e.tuple = reg.tuple;
    e.mss = reg.mss;
    e.policy = reg.defaults;
    emit(e);
    if (!table_.in_flowlet(fd)) continue;
    std::uint64_t unsent = 0;
    if (table_.unsent_bytes(ref, &unsent) != SocketTable::Result::kOk) unsent = 0;
    const std::uint64_t left = reg.outstanding + unsent;
    if (left == 0) continue;
    e = Event{};
    e.kind = Event::kBegin;
    e.ref = ref;
    e.bytes = left;
    e.policy = reg.policy;  // its class, weight, deadline, coflow and tenant
    ++reg.begins;
    emit(e);
    if (unsent != 0) {
      e.kind = Event::kSent;
      e.bytes = unsent;
      emit(e);
    }
  }
}

void AgentLink::arm_timer(std::uint64_t now) {
  std::uint64_t next =
      sock_ ? std::min(heard_us_ + kSilenceUs + 1, said_us_ + kTickUs) : retry_at_us_;
  // As the runtime does: while a flowlet is in progress its bytes handed
  // over (not urgent) are looked for every kPollUs.
  if (!pending_.empty() || intake_.waiting() || now < linger_until_us_ || open_flowlets_ > 0) {
    next = std::min(next, now + kPollUs);
  }
  napping_ = next <= now + kPollUs;
  itimerspec spec{};
  const std::uint64_t in_us = next > now ? next - now : 1;
  spec.it_value.tv_sec = static_cast<time_t>(in_us / 1'000'000);
  spec.it_value.tv_nsec = static_cast<long>((in_us % 1'000'000) * 1000);
  if (timerfd_settime(timer_fd_.get(), 0, &spec, nullptr) != 0) napping_ = false;
}

// ---- the application's events, forwarded ----

void AgentLink::set_open(Reg& r, bool open) {
  if (r.open == open) return;
  r.open = open;
  open ? ++open_flowlets_ : --open_flowlets_;
}

void AgentLink::on_register(SocketRef s, const wire::FiveTuple& tuple, std::uint32_t mss,
                            const FlowletPolicy& defaults, std::uint64_t) {
  Reg& r = regs_[s.fd];
  set_open(r, false);
  r = Reg{};
  r.gen = s.gen;
  r.tuple = tuple;
  r.mss = mss;
  r.defaults = defaults;
  Event e;
  e.kind = Event::kRegister;
  e.ref = s;
  e.tuple = tuple;
  e.mss = mss;
  e.policy = defaults;
  if (sock_) emit(e);
}

void AgentLink::on_unregister(SocketRef s, std::uint64_t) {
  const auto it = regs_.find(s.fd);
  if (it != regs_.end() && it->second.gen == s.gen) {
    set_open(it->second, false);
    regs_.erase(it);
  }
  Event e;
  e.kind = Event::kUnregister;
  e.ref = s;
  if (sock_) emit(e);
}

void AgentLink::on_begin(SocketRef s, std::uint64_t bytes,
                         const std::optional<FlowletPolicy>& policy, std::uint64_t) {
  if (const auto it = regs_.find(s.fd); it != regs_.end()) {
    it->second.outstanding += bytes;
    if (policy || !it->second.open) it->second.policy = policy;  // else: extends it
    ++it->second.begins;
    set_open(it->second, true);
  }
  Event e;
  e.kind = Event::kBegin;
  e.ref = s;
  e.bytes = bytes;
  e.policy = policy;
  if (sock_) emit(e);
}

void AgentLink::on_sent(SocketRef s, std::uint64_t bytes, std::uint64_t) {
  if (const auto it = regs_.find(s.fd); it != regs_.end()) {
    it->second.outstanding -= std::min(it->second.outstanding, bytes);
  }
  Event e;
  e.kind = Event::kSent;
  e.ref = s;
  e.bytes = bytes;
  if (sock_) emit(e);
}

void AgentLink::on_wrote(SocketRef s, std::uint64_t bytes, std::uint64_t) {
  if (const auto it = regs_.find(s.fd); it != regs_.end()) {
    if (!it->second.open) it->second.policy.reset();  // begins with the defaults
    ++it->second.begins;
    set_open(it->second, true);
  }
  Event e;
  e.kind = Event::kWrote;
  e.ref = s;
  e.bytes = bytes;
  if (sock_) emit(e);
}

void AgentLink::on_end(SocketRef s, std::uint64_t) {
  if (const auto it = regs_.find(s.fd); it != regs_.end()) {
    it->second.outstanding = 0;
    set_open(it->second, false);
  }
  Event e;
  e.kind = Event::kEnd;
  e.ref = s;
  if (sock_) emit(e);
}

}  // namespace flowtune::client
