#include "runtime.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <csignal>
#include <cerrno>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "flowtune/common/curve.h"
#include "flowtune/common/endpoint.h"
#include "flowtune/wire/codec.h"
#include "fork_guard.h"

namespace flowtune::client {

// ---- EventQueue ----

EventQueue::EventQueue(std::size_t capacity_pow2)
    : cells_(new Cell[capacity_pow2]), mask_(capacity_pow2 - 1) {
  for (std::size_t i = 0; i < capacity_pow2; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
}

bool EventQueue::push(const Event& e) {
  std::uint64_t pos = head_.load(std::memory_order_relaxed);
  for (;;) {
    Cell& c = cells_[pos & mask_];
    const std::uint64_t seq = c.seq.load(std::memory_order_acquire);
    if (seq == pos) {
      if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        c.event = e;
        c.seq.store(pos + 1, std::memory_order_release);
        return true;
      }
    } else if (seq < pos) {
      return false;  // the consumer has not freed this cell: full
    } else {
      pos = head_.load(std::memory_order_relaxed);
    }
  }
}

bool EventQueue::pop(Event* e) {
  const std::uint64_t pos = tail_.load(std::memory_order_relaxed);
  Cell& c = cells_[pos & mask_];
  if (c.seq.load(std::memory_order_acquire) != pos + 1) return false;
  *e = c.event;
  c.seq.store(pos + mask_ + 1, std::memory_order_release);
  tail_.store(pos + 1, std::memory_order_relaxed);
  return true;
}

bool EventQueue::empty() const {
  const std::uint64_t pos = tail_.load(std::memory_order_relaxed);
  return cells_[pos & mask_].seq.load(std::memory_order_seq_cst) != pos + 1;
}

// ---- owners ----

// libzmq and libsodium take process-wide locks while a context is made and
// ended: forks wait for both (fork_guard.h).
void ZmqContextCloser::operator()(void* ctx) const {
  ForkShield shield;
  (void)zmq_ctx_term(ctx);
}
void ZmqSocketCloser::operator()(void* sock) const { (void)zmq_close(sock); }

// ---- Runtime ----

namespace {

// Whether `s` (after spaces) starts with a transport, "name://".
bool starts_endpoint(std::string_view s) {
  const std::size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return false;
  const std::size_t sep = s.find("://", b);
  if (sep == std::string_view::npos || sep == b) return false;
  for (std::size_t i = b; i < sep; ++i) {
    if (!std::isalnum(static_cast<unsigned char>(s[i])) && s[i] != '+') return false;
  }
  return true;
}

// "a, b,c": the endpoints listed, spaces trimmed, blank items dropped. A
// comma separates two endpoints only where a transport follows it, so an
// ipc path holding one stays whole.
std::vector<std::string> split_endpoints(const std::string& list) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    const std::string piece = list.substr(at, comma - at);
    const bool blank = piece.find_first_not_of(" \t") == std::string::npos;
    if (!out.empty() && !blank && !starts_endpoint(piece)) {
      out.back() += "," + piece;
    } else if (!blank) {
      out.push_back(piece);
    }
    at = comma + 1;
  }
  for (std::string& e : out) {
    const std::size_t b = e.find_first_not_of(" \t");
    e = e.substr(b, e.find_last_not_of(" \t") - b + 1);
  }
  return out;
}
}  // namespace

namespace {
SessionConfig with_failover(SessionConfig s, const std::string& allocators) {
  s.failover = split_endpoints(allocators).size() > 1;
  return s;
}
}  // namespace

Runtime::Runtime(RuntimeConfig config, SessionConfig session, SocketTable& table)
    : config_(std::move(config)), table_(table),
      session_(with_failover(std::move(session), config_.allocator)),
      queue_(config_.queue_capacity),
      start_ns_(std::chrono::steady_clock::now().time_since_epoch().count()) {}

Runtime::~Runtime() { (void)stop(); }

std::uint64_t Runtime::now_us() const {
  const std::int64_t ns = std::chrono::steady_clock::now().time_since_epoch().count();
  return static_cast<std::uint64_t>((ns - start_ns_) / 1000) + 1;
}

void Runtime::log(int level, const std::string& text) const {
  if (level > config_.log_level) return;
  const std::string line = "flowtune: " + text + "\n";
  // In the private table fd 2 is /dev/null: write to a copy of the
  // application's stderr, taken for this one write.
  const int pidfd = pidfd_.get();
  const int fd = pidfd >= 0 ? static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, 2, 0)) : 2;
  if (fd >= 0) (void)!::write(fd, line.data(), line.size());
  if (fd >= 0 && pidfd >= 0) (void)::syscall(SYS_close, fd);  // a copy, whatever its number
}

int Runtime::wake_signal() { return SIGRTMAX - 2; }

namespace {

// Whether this process may use pidfd_getfd() on itself (a seccomp profile
// may refuse it, or an old kernel lack it). Probed once, in a throwaway
// thread with a private table, so the probe opens nothing the application
// can see. EBADF for a fd that cannot exist means the call is allowed.
bool pidfd_getfd_works() {
  // Not a function-local static: its initialization guard, held by a thread
  // of the parent at a fork, would stop the child's first client forever.
  // Two threads may both probe the first time; they find the same answer.
  static std::atomic<int> known{0};  // 0: not probed, 1: works, 2: refused
  if (const int k = known.load(std::memory_order_acquire); k != 0) return k == 1;
  bool ok = false;
  try {
    std::thread probe([&ok] {
      if (::unshare(CLONE_FILES) != 0) return;
      const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0));
      if (pidfd < 0) return;
      ok = ::syscall(SYS_pidfd_getfd, pidfd, 0x7ffffff0, 0) < 0 && errno == EBADF;
      (void)::syscall(SYS_close, pidfd);
    });
    probe.join();
  } catch (...) {
    ok = false;
  }
  known.store(ok ? 1 : 2, std::memory_order_release);
  return ok;
}

}  // namespace

namespace {
std::atomic<bool> g_shares_fd_table{false};
}  // namespace

bool runtime_shares_fd_table() { return g_shares_fd_table.load(std::memory_order_acquire); }

bool Runtime::enter_private_table() {
  // A test knob: run as where pidfd_getfd is refused.
  if (const char* v = std::getenv("FLOWTUNE_SHARED_FD_TABLE"); v != nullptr && *v == '1') {
    return false;
  }
#if defined(__SANITIZE_THREAD__)
  // TSan tracks descriptors per process, not per table: our private fd 9
  // and the application's fd 9 would be reported as racing on one object.
  // TSan builds keep the shared table (checking the threads' memory
  // ordering is what they are for); the others test the private table.
  return false;
#endif
  if (!pidfd_getfd_works() || ::unshare(CLONE_FILES) != 0) return false;
  // From here on this thread's table is a copy of the application's: close
  // the copies (raw syscalls: an interposed close must not see them), and
  // put /dev/null on 0-2. Sanitizer builds keep fd 2 (a copy of stderr) so
  // that their reports from this thread are seen.
  (void)::syscall(SYS_close_range, 3u, ~0u, 0u);
  const int null_fd = static_cast<int>(::syscall(SYS_openat, AT_FDCWD, "/dev/null", O_RDWR, 0));
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr int kReplace = 2;
#else
  constexpr int kReplace = 3;
#endif
  for (int fd = 0; fd < kReplace && null_fd >= 0; ++fd) {
    if (fd != null_fd) (void)::syscall(SYS_dup3, null_fd, fd, 0);
  }
  if (null_fd >= kReplace) (void)::syscall(SYS_close, null_fd);
  pidfd_ = UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0)));
  // Without the pidfd no application socket can be reached: pacing fails
  // (kGone) rather than touch a private fd of the same number.
  table_.set_pidfd(pidfd_.get() >= 0 ? pidfd_.get() : kNoPidfd);
  return true;
}

int Runtime::start() {
  std::promise<int> ready;
  std::future<int> result = ready.get_future();
  try {
    thread_ = std::thread([this, &ready] { run(&ready); });
  } catch (...) {
    return FT_ERUNTIME;
  }
  const int rc = result.get();
  if (rc != FT_OK) thread_.join();  // it closed what it opened
  return rc;
}

int Runtime::open_all() {
  {
    ForkShield shield;
    zmq_ctx_.reset(zmq_ctx_new());
  }
  if (!zmq_ctx_) return FT_ERUNTIME;
  zmq_sock_.reset(zmq_socket(zmq_ctx_.get(), ZMQ_DEALER));
  if (!zmq_sock_) return FT_ERUNTIME;
  // Messages wait in ZeroMQ while the connection is being made (a short
  // program's flowlets would otherwise be lost), up to a small queue; past
  // it a send fails at once and the session resyncs later. Closing never
  // waits unless stop() says so (an absent allocator must not delay exit).
  const int hwm = 1000;
  const int linger_ms = 0;
  if (zmq_setsockopt(zmq_sock_.get(), ZMQ_SNDHWM, &hwm, sizeof hwm) != 0 ||
      zmq_setsockopt(zmq_sock_.get(), ZMQ_LINGER, &linger_ms, sizeof linger_ms) != 0) {
    return FT_ERUNTIME;
  }
  // A control path that drops packets (a partition; the allocator lives)
  // leaves TCP retransmitting with exponential backoff: after a 15 s
  // partition the next try was 10 s away, and no flowlet had a rate for that
  // long after the path healed (bench/chaos control_drop). So ZeroMQ pings
  // the allocator every half heartbeat and drops a connection that has been
  // silent a heartbeat past a ping; it then reconnects every 100 ms, each
  // attempt given up after a heartbeat. A healed path carries messages again
  // within about a heartbeat; the allocator answers the new connection with
  // notRegistered, and the session says hello and resyncs.
  const std::uint32_t hb_ms = std::clamp<std::uint32_t>(config_.heartbeat_ms, 100, 3'600'000);
  const int ping_ms = static_cast<int>(hb_ms / 2);
  const int silent_ms = static_cast<int>(hb_ms);
  if (zmq_setsockopt(zmq_sock_.get(), ZMQ_HEARTBEAT_IVL, &ping_ms, sizeof ping_ms) != 0 ||
      zmq_setsockopt(zmq_sock_.get(), ZMQ_HEARTBEAT_TIMEOUT, &silent_ms, sizeof silent_ms) != 0 ||
      zmq_setsockopt(zmq_sock_.get(), ZMQ_CONNECT_TIMEOUT, &silent_ms, sizeof silent_ms) != 0 ||
      // A hung allocator accepts connections (the kernel does) but never
      // completes the handshake: given up after a heartbeat, not 30 s.
      zmq_setsockopt(zmq_sock_.get(), ZMQ_HANDSHAKE_IVL, &silent_ms, sizeof silent_ms) != 0) {
    return FT_ERUNTIME;
  }
  endpoints_ = split_endpoints(config_.allocator);
  if (endpoints_.empty()) {
    log(1, "no allocator endpoint in \"" + config_.allocator + "\"");
    return FT_ECONNECT;
  }
  for (const std::string& ep : endpoints_) {
    if (const std::string why = endpoint_port_error(ep); !why.empty()) {
      log(1, "cannot use allocator endpoint " + why);
      return FT_ECONNECT;
    }
  }
  // CURVE (FLOWTUNE_CURVE_*): keys that do not load keep the client off the
  // allocator, so its sockets stay unpaced rather than unauthenticated.
  curve::ClientKeys keys;
  bool curve_on = false;
  std::string keys_error;
  {
    ForkShield shield;  // zmq_curve_public: libzmq's process-wide random state
    keys_error = curve::client_keys({}, {}, &keys, &curve_on);
  }
  if (const std::string& why = keys_error; !why.empty()) {
    log(1, "CURVE: " + why + "; not connecting to the allocator");
    return FT_ECONNECT;
  }
  if (curve_on && curve::apply_client(zmq_sock_.get(), keys) != 0) {
    log(1, std::string("CURVE: ") + zmq_strerror(zmq_errno()) + "; not connecting to the allocator");
    return FT_ECONNECT;
  }
  if (curve_on) curve_ = std::move(keys);
  for (const std::string& ep : endpoints_) {
    // Each is checked here, so a bad one in the list fails the start, not a
    // failover later.
    if (zmq_connect(zmq_sock_.get(), ep.c_str()) != 0) {
      log(1, "cannot use allocator endpoint \"" + ep + "\": " + zmq_strerror(zmq_errno()));
      return FT_ECONNECT;
    }
    if (&ep != &endpoints_.front()) (void)zmq_disconnect(zmq_sock_.get(), ep.c_str());
  }
  const bool key_file = curve_ && !curve_->server_file.empty();
  if ((endpoints_.size() > 1 || key_file) && open_monitor() != FT_OK) return FT_ERUNTIME;
  timer_fd_ = UniqueFd(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (timer_fd_.get() < 0) return FT_ERUNTIME;
  sigset_t wake_set;
  sigemptyset(&wake_set);
  sigaddset(&wake_set, wake_signal());
  signal_fd_ = UniqueFd(signalfd(-1, &wake_set, SFD_NONBLOCK | SFD_CLOEXEC));
  if (signal_fd_.get() < 0) return FT_ERUNTIME;
  int zfd = -1;
  std::size_t len = sizeof zfd;
  if (zmq_getsockopt(zmq_sock_.get(), ZMQ_FD, &zfd, &len) != 0 || zfd < 0) return FT_ERUNTIME;

  if (loop_.init() != 0) return FT_ERUNTIME;
  if (loop_.watch(signal_fd_.get(), [this] {
        signalfd_siginfo info[8];
        while (::read(signal_fd_.get(), info, sizeof info) > 0) {
        }
        turn();
      }) != 0 ||
      loop_.watch(zfd, [this] { turn(); }) != 0 ||
      loop_.watch(timer_fd_.get(), [this] {
        std::uint64_t expirations;
        (void)::read(timer_fd_.get(), &expirations, sizeof expirations);
        turn();
      }) != 0) {
    return FT_ERUNTIME;
  }
  if (monitor_) {
    int mfd = -1;
    std::size_t mlen = sizeof mfd;
    if (zmq_getsockopt(monitor_.get(), ZMQ_FD, &mfd, &mlen) != 0 || mfd < 0) return FT_ERUNTIME;
    if (loop_.watch(mfd, [this] { turn(); }) != 0) return FT_ERUNTIME;
  }
  return FT_OK;
}

int Runtime::close_all() {
  const int rc = loop_.close();
  // The final ends may wait up to 200 ms for delivery, but only to an
  // allocator that answered: an absent one must not delay the exit.
  if (zmq_sock_ && session_.stats().connected) {
    const int linger_ms = 200;
    (void)zmq_setsockopt(zmq_sock_.get(), ZMQ_LINGER, &linger_ms, sizeof linger_ms);
  }
  monitor_.reset();
  zmq_sock_.reset();
  zmq_ctx_.reset();
  timer_fd_.reset();
  signal_fd_.reset();
  table_.set_pidfd(-1);
  pidfd_.reset();
  return rc;
}

void Runtime::run(std::promise<int>* ready) {
  tid_.store(static_cast<pid_t>(::syscall(SYS_gettid)), std::memory_order_release);
  // Named so that operators (top -H) and benchmarks can tell its CPU from
  // the application's; ZeroMQ names its own threads ZMQbg/*.
  (void)pthread_setname_np(pthread_self(), "ft-runtime");
  // Every signal is blocked here (and in ZeroMQ's threads, which inherit the
  // mask): the wake-up stays pending for the signalfd, and the program's
  // own signals go to its own threads, never to a handler running on ours
  // (which could, say, fork while this thread holds a lock).
  sigset_t all;
  sigfillset(&all);
  (void)pthread_sigmask(SIG_BLOCK, &all, nullptr);
  private_table_ = enter_private_table();
  if (!private_table_) g_shares_fd_table.store(true, std::memory_order_release);
  const int rc = open_all();
  if (rc != FT_OK) {
    loop_.unwatch_all();  // a start that failed half way: nothing to run
    loop_close_rc_ = close_all();
    tid_.store(0, std::memory_order_release);
    ready->set_value(rc);
    return;
  }
  ready->set_value(FT_OK);
  turn();  // a first hello once the host is known
  // The loop blocks only if nothing is queued or marked in the table after
  // it said it sleeps (WakeFlag holds the fences that make this hold); else
  // it polls, and takes a turn if nothing else woke it.
  loop_.run(
      [this] {
        return wake_flag_.prepare_to_sleep([this] { return !queue_.empty() || table_.has_dirty(); },
                                           napping_ ? WakeFlag::Sleep::kNap : WakeFlag::Sleep::kDeep);
      },
      [this] { wake_flag_.woke(); }, [this] { turn(); });
  loop_close_rc_ = close_all();
  // A late wake-up must not reach another thread that gets this tid: with
  // no handler installed, the signal's default action ends the process.
  tid_.store(0, std::memory_order_release);
}

void Runtime::signal_self() const {
  const pid_t tid = tid_.load(std::memory_order_acquire);
  if (tid != 0) (void)::syscall(SYS_tgkill, ::getpid(), tid, wake_signal());
}

bool Runtime::push(const Event& e, bool urgent) {
  if (!queue_.push(e)) {
    published_.queue_overflows.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  if (urgent) wake();
  return true;
}

void Runtime::wake() {
  if (!wake_flag_.should_wake()) return;
  wakeups_sent_.fetch_add(1, std::memory_order_relaxed);
  signal_self();
}

int Runtime::stop() {
  if (!thread_.joinable()) return 0;
  stopping_.store(true, std::memory_order_release);
  signal_self();
  thread_.join();
  return loop_close_rc_;
}

void Runtime::receive() {
  for (;;) {
    int events = 0;
    std::size_t len = sizeof events;
    if (zmq_getsockopt(zmq_sock_.get(), ZMQ_EVENTS, &events, &len) != 0 ||
        (events & ZMQ_POLLIN) == 0) {
      return;
    }
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, zmq_sock_.get(), ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&msg);
      return;
    }
    wire::AllocatorMessage m;
    const auto* data = static_cast<const std::uint8_t*>(zmq_msg_data(&msg));
    const wire::DecodeStatus st = wire::decode({data, zmq_msg_size(&msg)}, &m);
    zmq_msg_close(&msg);
    if (!st.ok()) {
      log(2, std::string("ignored a bad message from the allocator: ") + st.detail);
      continue;
    }
    for (const auto& e : m.errors) log(3, "allocator: " + e.text);
    session_.on_message(m, now_us());
    for (const Notice& n : session_.take_notices()) log(n.level, n.text);
  }
}

void Runtime::apply_actions() {
  for (const PacingAction& a : session_.take_actions()) {
    int err = 0;
    const auto r = table_.set_rate(a.socket, a.bytes_per_sec, &err);
    if (r == SocketTable::Result::kOk) {
      (a.bytes_per_sec != 0 ? published_.rates_applied : published_.rates_cleared)
          .fetch_add(1, std::memory_order_relaxed);
    } else if (r == SocketTable::Result::kFailed) {
      published_.pacing_failures.fetch_add(1, std::memory_order_relaxed);
      if (!pacing_failure_logged_) {
        pacing_failure_logged_ = true;
        log(1, std::string("cannot pace sockets (SO_MAX_PACING_RATE): ") + std::strerror(err) +
                   "; flowlets run unpaced");
      }
    }
  }
}

void Runtime::turn() {
  // Read once: every step below sees the same answer, so a stop cannot
  // close the handles of a turn that did not send the final ends.
  const bool stopping = stopping_.load(std::memory_order_acquire);
  drain(now_us());
  receive();
  timers(now_us());
  if (monitor_ && !stopping) watch_connection(now_us());
  flush(now_us(), stopping);
  publish();
  if (stopping) {
    close_handles();
    return;
  }
  arm_timer();
}

void Runtime::reconcile(int fd, std::uint64_t now) {
  const auto it = known_.find(fd);
  if (it == known_.end()) return;
  const auto cur = table_.lookup(fd);
  if (cur && cur->gen == it->second) return;
  session_.on_unregister(SocketRef{fd, it->second}, now);
  known_.erase(it);
}

void Runtime::dispatch(const Event& e, std::uint64_t now) {
  switch (e.kind) {
    case Event::kRegister: {
      // Taken up even if already released, so the events queued behind it
      // count (a flowlet begun is reported and then ended). Its
      // unregistration is applied only once swept (drain() sweeps before it
      // pops, so every event queued before the release is dispatched first):
      // a release seen any other way, say in the table while the queue still
      // holds the socket's later events, would drop them.
      const auto old = known_.find(e.ref.fd);
      if (old != known_.end() && old->second != e.ref.gen) {
        session_.on_unregister(SocketRef{e.ref.fd, old->second}, now);  // replaced
      }
      session_.on_register(e.ref, e.tuple, e.mss, now, e.policy.value_or(FlowletPolicy{}));
      known_[e.ref.fd] = e.ref.gen;
      return;
    }
    case Event::kUnregister: session_.on_unregister(e.ref, now); return;
    case Event::kBegin: session_.on_begin(e.ref, e.bytes, e.policy, now); return;
    case Event::kSent: session_.on_sent(e.ref, e.bytes, now); return;
    case Event::kWrote: {
      const std::uint64_t bytes = e.bytes + table_.take_unreported(e.ref);
      if (bytes != 0) session_.on_wrote(e.ref, bytes, now);
      return;
    }
    case Event::kEnd: app_end(e.ref, now); return;
  }
}

void Runtime::app_end(SocketRef ref, std::uint64_t now) {
  // The Session lists every end in take_ended(), and the runtime clears the
  // application's flowlet bit for each. An end the application asked for
  // must not: the bit was cleared by ft_flowlet_end already, and the
  // application may have begun its next flowlet since (clearing it then made
  // that flowlet's end fail with FT_ENOFLOWLET). Ends the library decided
  // (advance end, lease) stay listed.
  for (const SocketRef& r : session_.take_ended()) ended_.push_back(r);
  session_.on_end(ref, now);
  (void)session_.take_ended();
}

void Runtime::apply_spill(int fd, const SocketTable::Spilled& p, std::uint64_t now) {
  const auto it = known_.find(fd);
  if (p.gen == 0 || it == known_.end() || it->second != p.gen) return;
  const SocketRef ref{fd, p.gen};
  if (p.end_first) app_end(ref, now);
  if (p.begin_bytes != 0) session_.on_begin(ref, p.begin_bytes, p.policy, now);
  if (p.sent != 0) session_.on_sent(ref, p.sent, now);
  const std::uint64_t wrote = p.wrote + (p.collect ? table_.take_unreported(ref) : 0);
  if (wrote != 0) session_.on_wrote(ref, wrote, now);
  if (p.end_last) app_end(ref, now);
}

void Runtime::drain(std::uint64_t now) {
  // Spilled events and unregistrations are taken before the queue is drained
  // and applied after it: a socket spills only once an event of it found the
  // queue full, and unregisters after its last event, so whatever the queue
  // holds for it came first. "After" means up to the queue position claimed
  // when the sweep saw the slot: pop() stops at a cell another producer has
  // claimed but not yet written, and the socket's own events may sit behind
  // it (applying the unregistration then dropped them). The socket keeps
  // spilling until finish_spill, so nothing of it enters the queue meanwhile.
  const std::size_t first_new = swept_.size();
  table_.sweep([&](int fd) { swept_.push_back({fd, table_.take_spill(fd), 0}); });
  const std::uint64_t horizon = queue_.claimed();
  for (std::size_t i = first_new; i < swept_.size(); ++i) swept_[i].horizon = horizon;
  Event e;
  bool took = swept_.size() > first_new;
  while (queue_.pop(&e)) {
    dispatch(e, now);
    took = true;
  }
  if (took) linger_until_us_ = now + kLingerUs;
  apply_swept(now);
}

void Runtime::apply_swept(std::uint64_t now) {
  const std::uint64_t popped = queue_.popped();
  std::vector<Swept> waiting;
  auto waits = [&](int fd) {
    for (const Swept& w : waiting) {
      if (w.fd == fd) return true;
    }
    return false;
  };
  for (std::size_t i = 0; i < swept_.size(); ++i) {
    Swept& b = swept_[i];
    // In order per socket: a later batch waits behind an earlier one.
    if (popped < b.horizon || waits(b.fd)) {
      waiting.push_back(std::move(b));
      continue;
    }
    reconcile(b.fd, now);
    apply_spill(b.fd, b.events, now);
    bool later = false;
    for (std::size_t j = i + 1; j < swept_.size() && !later; ++j) later = swept_[j].fd == b.fd;
    if (!later) table_.finish_spill(b.fd);
  }
  swept_.swap(waiting);
}

void Runtime::timers(std::uint64_t now) {
  session_.on_timer(now);
  // Drain checks may end flowlets, which queues more actions and events.
  for (const SocketRef& ref : session_.take_drain_queries()) {
    // A socket that cannot be asked (closed under us) counts as drained.
    std::uint64_t unsent = 0;
    if (table_.unsent_bytes(ref, &unsent) != SocketTable::Result::kOk) unsent = 0;
    // Writing first, then the bytes gathered: bytes a call reported before
    // it ended are then collected here, not left for a later event.
    const bool writing = table_.writing(ref);
    if (const std::uint64_t bytes = table_.take_unreported(ref); bytes != 0) {
      session_.on_wrote(ref, bytes, now);
    }
    session_.on_unsent(ref, unsent, now, writing);
  }
}

void Runtime::flush(std::uint64_t now, bool stopping) {
  apply_actions();
  for (const SocketRef& ref : session_.take_ended()) ended_.push_back(ref);
  for (const SocketRef& ref : ended_) table_.clear_flowlet(ref);
  ended_.clear();
  if (stopping) {
    // Last words: end every flowlet the allocator knows of.
    session_.end_all(now);
    apply_actions();
  }
  while (auto m = session_.take_message(now)) {
    const std::vector<std::uint8_t> bytes = wire::encode(*m);
    if (zmq_send(zmq_sock_.get(), bytes.data(), bytes.size(), ZMQ_DONTWAIT) < 0) {
      session_.on_send_failed(now);  // the queue is full: resend state later
      break;
    }
  }
  receive();  // a send can consume ZMQ_FD's edge: look again
}

// ---- hot standby ----

int Runtime::open_monitor() {
  const std::string addr = "inproc://flowtune-monitor-" + std::to_string(reinterpret_cast<std::uintptr_t>(this));
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
      const std::string where(static_cast<const char*>(zmq_msg_data(&address)), zmq_msg_size(&address));
      const bool listed = std::find(endpoints_.begin(), endpoints_.end(), where) != endpoints_.end();
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
  if (endpoints_.size() > 1) failover(now);
  else endpoint_lost_ = false;  // libzmq reconnects on its own
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
    log(1, "CURVE: cannot reconnect to " + ep + " with the allocator's new key: " + zmq_strerror(e));
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
  if (zmq_connect(zmq_sock_.get(), endpoints_[current_].c_str()) != 0) endpoint_lost_ = true;
  else endpoint_lost_ = false;
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

void Runtime::publish() {
  const SessionStats& s = session_.stats();
  // The session's counters are copied; the runtime's own are counted in place.
#define FT_PUBLISH_session(name) published_.name.store(s.name, std::memory_order_relaxed);
#define FT_PUBLISH_runtime(name)
#define FT_PUBLISH_(name, owner, what) FT_PUBLISH_##owner(name)
  FT_STATS_COUNTERS(FT_PUBLISH_)
#undef FT_PUBLISH_
#undef FT_PUBLISH_runtime
#undef FT_PUBLISH_session
  published_.connected.store(s.connected ? 1 : 0, std::memory_order_relaxed);
}

void Runtime::close_handles() { loop_.unwatch_all(); }

void Runtime::arm_timer() {
  std::uint64_t next = session_.next_timer_us();
  // Events do not wake a napping loop: look at the queue every kPollUs
  // while a flowlet is in progress or the last event is recent.
  // A swept batch waiting for a producer to finish writing its cell: soon.
  const std::uint64_t now = now_us();
  if (session_.active_flowlets() > 0 || !swept_.empty() || now < linger_until_us_) {
    next = std::min(next, now + kPollUs);
  }
  if (endpoints_.size() > 1 && failover_wanted(now_us())) next = std::min(next, next_move_us_);
  napping_ = next <= now + kPollUs;
  itimerspec spec{};
  if (next != UINT64_MAX) {
    const std::uint64_t in_us = next > now ? next - now : 1;
    spec.it_value.tv_sec = static_cast<time_t>(in_us / 1'000'000);
    spec.it_value.tv_nsec = static_cast<long>((in_us % 1'000'000) * 1000);
  }
  // A nap ends only by this timer: without it, sleep deeply (wake-ups on).
  if (timerfd_settime(timer_fd_.get(), 0, &spec, nullptr) != 0) napping_ = false;
}

ft_stats Runtime::stats() const {
  ft_stats s{};
#define FT_LOAD_(name, owner, what) s.name = published_.name.load(std::memory_order_relaxed);
  FT_STATS_COUNTERS(FT_LOAD_)
#undef FT_LOAD_
  s.connected = published_.connected.load(std::memory_order_relaxed);
  return s;
}

}  // namespace flowtune::client
