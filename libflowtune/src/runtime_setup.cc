// The endpoint runtime's set-up and tear-down (runtime.h): its thread's
// private fd table, the ZeroMQ socket to the allocator(s) with its
// heartbeats and CURVE keys, and the wake-up fds watched by the loop.
// The loop's turn is in runtime.cc, the hot standby in runtime_failover.cc.
#include "runtime.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <future>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "control_thread.h"
#include "flowtune/common/curve.h"
#include "flowtune/common/endpoint.h"
#include "fork_guard.h"

namespace flowtune::client {

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

Runtime::Runtime(RuntimeConfig config, SessionConfig session, SocketTable& table, SocketPort* port)
    : config_(std::move(config)),
      table_(table),
      session_(with_failover(std::move(session), config_.allocator)),
      inbox_(config_.queue_capacity),
      port_(port != nullptr ? port : &local_port_),
      start_ns_(steady_ns()) {}

Runtime::~Runtime() { (void)stop(); }

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

bool enter_private_fd_table(SocketTable& table, UniqueFd* pidfd) {
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
  *pidfd = UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0)));
  // Without the pidfd no application socket can be reached: pacing fails
  // (kGone) rather than touch a private fd of the same number.
  table.set_pidfd(pidfd->get() >= 0 ? pidfd->get() : kNoPidfd);
  return true;
}

bool Runtime::enter_private_table() {
  return config_.private_fd_table && enter_private_fd_table(table_, &pidfd_);
}

int Runtime::start() {
  return start_control_thread(&thread_, [this](std::promise<int>* ready) { run(ready); });
}

int Runtime::open_all() {
  if (!open_socket()) return FT_ERUNTIME;
  if (const int rc = connect_allocators(); rc != FT_OK) return rc;
  if (!open_wakeups()) return FT_ERUNTIME;
  return FT_OK;
}

bool Runtime::open_socket() {
  {
    ForkShield shield;
    zmq_ctx_.reset(zmq_ctx_new());
  }
  if (!zmq_ctx_) return false;
  zmq_sock_.reset(zmq_socket(zmq_ctx_.get(), ZMQ_DEALER));
  if (!zmq_sock_) return false;
  // Messages wait in ZeroMQ while the connection is being made (a short
  // program's flowlets would otherwise be lost), up to a small queue; past
  // it a send fails at once and the session resyncs later. Closing never
  // waits unless stop() says so (an absent allocator must not delay exit).
  const int hwm = 1000;
  const int linger_ms = 0;
  if (zmq_setsockopt(zmq_sock_.get(), ZMQ_SNDHWM, &hwm, sizeof hwm) != 0 ||
      zmq_setsockopt(zmq_sock_.get(), ZMQ_LINGER, &linger_ms, sizeof linger_ms) != 0) {
    return false;
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
  return zmq_setsockopt(zmq_sock_.get(), ZMQ_HEARTBEAT_IVL, &ping_ms, sizeof ping_ms) == 0 &&
         zmq_setsockopt(zmq_sock_.get(), ZMQ_HEARTBEAT_TIMEOUT, &silent_ms, sizeof silent_ms) ==
             0 &&
         zmq_setsockopt(zmq_sock_.get(), ZMQ_CONNECT_TIMEOUT, &silent_ms, sizeof silent_ms) == 0 &&
         // A hung allocator accepts connections (the kernel does) but never
         // completes the handshake: given up after a heartbeat, not 30 s.
         zmq_setsockopt(zmq_sock_.get(), ZMQ_HANDSHAKE_IVL, &silent_ms, sizeof silent_ms) == 0;
}

int Runtime::connect_allocators() {
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
  if (!apply_curve()) return FT_ECONNECT;
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
  return FT_OK;
}

bool Runtime::apply_curve() {
  // CURVE (FLOWTUNE_CURVE_*): keys that do not load keep the client off the
  // allocator, so its sockets stay unpaced rather than unauthenticated.
  Result<curve::ClientCurve> c = [] {
    ForkShield shield;  // zmq_curve_public: libzmq's process-wide random state
    return curve::client_keys({}, {});
  }();
  if (!c) {
    log(1, "CURVE: " + c.error().message + "; not connecting to the allocator");
    return false;
  }
  if (c->on && curve::apply_client(zmq_sock_.get(), c->keys) != 0) {
    log(1,
        std::string("CURVE: ") + zmq_strerror(zmq_errno()) + "; not connecting to the allocator");
    return false;
  }
  if (c->on) curve_ = std::move(c->keys);
  return true;
}

bool Runtime::open_wakeups() {
  timer_fd_ = UniqueFd(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!timer_fd_) return false;
  sigset_t wake_set;
  sigemptyset(&wake_set);
  sigaddset(&wake_set, wake_signal());
  signal_fd_ = UniqueFd(signalfd(-1, &wake_set, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!signal_fd_) return false;
  int zfd = -1;
  std::size_t len = sizeof zfd;
  if (zmq_getsockopt(zmq_sock_.get(), ZMQ_FD, &zfd, &len) != 0 || zfd < 0) return false;

  if (loop_.init() != 0) return false;
  if (loop_.watch(signal_fd_.get(),
                  [this] {
                    signalfd_siginfo info[8];
                    while (::read(signal_fd_.get(), info, sizeof info) > 0) {
                    }
                    turn();
                  }) != 0 ||
      loop_.watch(zfd, [this] { turn(); }) != 0 || loop_.watch(timer_fd_.get(), [this] {
        std::uint64_t expirations;
        (void)::read(timer_fd_.get(), &expirations, sizeof expirations);
        turn();
      }) != 0) {
    return false;
  }
  if (const int pfd = port_->watch_fd(); pfd >= 0 && loop_.watch(pfd, [this] { turn(); }) != 0) {
    return false;
  }
  if (monitor_) {
    int mfd = -1;
    std::size_t mlen = sizeof mfd;
    if (zmq_getsockopt(monitor_.get(), ZMQ_FD, &mfd, &mlen) != 0 || mfd < 0) return false;
    if (loop_.watch(mfd, [this] { turn(); }) != 0) return false;
  }
  return true;
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

}  // namespace flowtune::client
