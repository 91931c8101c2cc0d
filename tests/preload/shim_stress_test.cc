// The shim linked into the test program itself (its wrappers interpose on
// this process's own calls), so the fork stress runs in every preset,
// ThreadSanitizer's included: while threads run every path the shim has
// (each wrapped write call, dup, dup2, close, close_range, the calls that
// make descriptors, flowlets begun, coalesced and ended, the mice gate),
// the main thread forks children that each send once. No child may block,
// every child's bytes arrive, and under TSan no race may be reported.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <gtest/gtest.h>

#include "../allocator/daemon/daemon_harness.h"
#include "../sanitizers.h"
#include "loopback.h"

namespace flowtune::shim {
namespace {

using daemon::testing::DaemonProcess;
using daemon::testing::unique_endpoint;

// A child's one send: past the mice gate, so the child opens its own client
// (the first write of a forked child hung on the shim's open lock). Under
// TSan a mouse: TSan cannot start threads in the child of a multithreaded
// process ("dup thread with used id"), so there the children check that
// the shim's paths never block them, and TSan checks the parent's.
#if defined(FT_TEST_TSAN)
constexpr std::size_t kChildBytes = 64;
#else
constexpr std::size_t kChildBytes = 65536 + 7;
#endif

// Accepts on 127.0.0.2 and counts each connection's bytes until EOF.
class Sink {
 public:
  // One thread serves every connection (an epoll set), so thousands of
  // short connections cost no thread each.
  Sink() {
    fd_ = testing::listen_on_127_0_0_2(512, &port_);
    ep_ = ::epoll_create1(0);
    stop_ = ::eventfd(0, 0);
    add(fd_);
    add(stop_);
    server_ = std::thread([this] { serve(); });
  }
  ~Sink() {
    const std::uint64_t one = 1;
    (void)!::write(stop_, &one, sizeof one);
    server_.join();
    for (auto& [c, n] : open_) ::close(c);
    ::close(fd_);
    ::close(stop_);
    ::close(ep_);
  }
  int connect_to() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port_));
    a.sin_addr.s_addr = htonl(0x7f000002);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }
  int whole() const { return whole_.load(); }
  // Bytes of every connection that has ended.
  std::size_t bytes() const { return bytes_.load(); }

 private:
  void add(int fd) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    EXPECT_EQ(::epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev), 0);
  }
  // Reads what one connection has; at EOF counts and closes it.
  void drain(int c) {
    char buf[65536];
    const ssize_t r = ::read(c, buf, sizeof buf);
    if (r > 0) {
      open_[c] += static_cast<std::size_t>(r);
      return;
    }
    if (r < 0 && errno == EAGAIN) return;
    const std::size_t n = open_[c];
    open_.erase(c);
    // Removed by hand: a forked child's copy keeps the socket open, and an
    // epoll set drops a socket only when its last descriptor closes.
    (void)::epoll_ctl(ep_, EPOLL_CTL_DEL, c, nullptr);
    ::close(c);
    bytes_.fetch_add(n);
    if (n == kChildBytes) whole_.fetch_add(1);
  }
  void serve() {
    epoll_event ready[64];
    for (;;) {
      const int n = ::epoll_wait(ep_, ready, 64, -1);
      for (int i = 0; i < n; ++i) {
        const int fd = ready[i].data.fd;
        if (fd == stop_) return;
        if (fd != fd_) {
          drain(fd);
          continue;
        }
        const int c = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK);
        if (c < 0) continue;
        open_[c] = 0;
        add(c);
      }
    }
  }

  int fd_ = -1;
  int ep_ = -1;
  int stop_ = -1;
  int port_ = 0;
  std::thread server_;
  std::unordered_map<int, std::size_t> open_;  // the server thread's: fd -> bytes
  std::atomic<int> whole_{0};
  std::atomic<std::size_t> bytes_{0};
};

bool write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// One connection through every path the shim wraps, then closed.
void every_path(const Sink& sink, int file_fd, int round) {
  static const std::vector<char> big(256 * 1024, 'b');
  const int fd = sink.connect_to();
  if (fd < 0) return;
  (void)::write(fd, big.data(), round % 2 == 0 ? big.size() : 100);  // a flowlet, or a mouse
  (void)::send(fd, big.data(), 64, MSG_NOSIGNAL);
  iovec iov[2] = {{const_cast<char*>(big.data()), 1000}, {const_cast<char*>(big.data()), 70000}};
  (void)::writev(fd, iov, 2);
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = 1;
  (void)::sendmsg(fd, &m, MSG_NOSIGNAL);
  mmsghdr mm{};
  mm.msg_hdr = m;
  (void)::sendmmsg(fd, &mm, 1, MSG_NOSIGNAL);
  off_t off = 0;
  (void)::sendfile(fd, file_fd, &off, 4096);
  int p[2];
  if (::pipe(p) == 0) {  // splice: pipe -> socket
    (void)::write(p[1], big.data(), 512);
    (void)::splice(p[0], nullptr, fd, nullptr, 512, 0);
    ::close(p[0]);
    ::close(p[1]);
  }
  const int alias = ::dup(fd);  // an alias written, then dup2'd over and closed
  (void)::write(alias, big.data(), 2000);
  const int ev = ::eventfd(0, 0);
  if (ev >= 0) (void)::dup2(ev, alias);
  ::close(alias);
  if (ev >= 0) ::close(ev);
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0) {
    (void)::write(pair[0], "x", 1);
    ::close(pair[0]);
    ::close(pair[1]);
  }
#if defined(FT_TEST_TSAN)
  ::close(fd);  // TSan does not see close_range close a fd, and reports its reuse
#else
  (void)::close_range(static_cast<unsigned>(fd), static_cast<unsigned>(fd), 0);
#endif
}

// Forks; the child sends kChildBytes on a new connection (its first
// managed write: it opens its own client) and exits. True if it exited 0
// within 20 s.
bool fork_one_sender(const Sink& sink) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a test that died
    const std::vector<char> bytes(kChildBytes, 'c');
    const int fd = sink.connect_to();
    const bool ok = fd >= 0 && write_all(fd, bytes.data(), bytes.size()) && ::close(fd) == 0;
    ::_exit(ok ? 0 : 1);
  }
  for (int waited = 0; waited < 20000; waited += 5) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    ::usleep(5000);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return false;
}

void stress(const std::string& allocator) {
#ifdef FT_TEST_ASAN  // tests/sanitizers.h
  GTEST_SKIP() << "AddressSanitizer's allocator is not fork-safe here (a child forked while "
                  "threads allocate can hang in malloc): run in the release and tsan presets";
#endif
  ::setenv("FLOWTUNE_ALLOCATOR", allocator.c_str(), 1);  // read when the client opens
  ::signal(SIGPIPE, SIG_IGN);
  Sink sink;
  const std::string path = ::testing::TempDir() + "ft_stress_file";
  const int file_fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(file_fd, 0);
  ASSERT_EQ(::ftruncate(file_fd, 1 << 16), 0);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      for (int round = i; !stop.load(); ++round) every_path(sink, file_fd, round);
    });
  }
  int good = 0;
  constexpr int kChildren = 30;
  for (int i = 0; i < kChildren; ++i) good += fork_one_sender(sink) ? 1 : 0;
  stop.store(true);
  for (auto& t : threads) t.join();
  ::close(file_fd);
  EXPECT_EQ(good, kChildren) << "children hung or failed";
  for (int i = 0; i < 1000 && sink.whole() < kChildren; ++i) ::usleep(10000);
  EXPECT_GE(sink.whole(), kChildren) << "a child's bytes did not all arrive";
}

// One socket, many fds: a writer crosses the mice gate through one fd
// (registering the socket) while other threads dup it, write mice and bulk
// through their dups, close them, and dup2 over them, all at once. The
// socket's group and registration must stay one: every byte arrives, no
// sanitizer report, and once the last fd closes the allocator holds no
// flow of it (a registration left behind would keep one).
TEST(ShimDupStress, DupsComeAndGoWhileAnotherFdCrossesTheGate) {
  DaemonProcess daemon;
  const std::string ep = unique_endpoint();
  daemon.start(ep, {"--host-gbps", "10"});
  ::setenv("FLOWTUNE_ALLOCATOR", ep.c_str(), 1);
  ::signal(SIGPIPE, SIG_IGN);
  std::atomic<std::size_t> sent{0};
  {
    Sink sink;
    const int fd = sink.connect_to();
    ASSERT_GE(fd, 0);
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        const std::vector<char> buf(96 * 1024, 'd');
        for (int i = 0; !stop.load(); ++i) {
          const int dup = t == 0 ? fd : ::dup(fd);
          const std::size_t n = (i + t) % 4 == 0 ? buf.size() : 200;
          if (write_all(dup, buf.data(), n)) sent.fetch_add(n);
          if (t != 0) {
            if (i % 3 == 0) (void)::dup2(2, dup);  // a dup2 over the alias
            ::close(dup);
          }
        }
      });
    }
    ::usleep(1'500'000);
    stop.store(true);
    for (auto& th : threads) th.join();
    ::close(fd);
    for (int i = 0; i < 1000 && sink.bytes() < sent.load(); ++i) ::usleep(10000);
    EXPECT_EQ(sink.bytes(), sent.load());
  }
  for (int i = 0; i < 600 && daemon.status()["flows"].get<int>() != 0; ++i) ::usleep(10000);
  EXPECT_EQ(daemon.status()["flows"].get<int>(), 0) << daemon.status().dump();
  EXPECT_GE(daemon.status()["counters"]["hellos"].get<int>(), 1) << "never registered";
}

TEST(ShimForkStress, ForksWhileEveryShimPathRunsNeverBlockAChild) {
  DaemonProcess daemon;
  const std::string ep = unique_endpoint();
  daemon.start(ep, {"--host-gbps", "10"});
  stress(ep);
  // That the wrappers interpose is ShimDupStress's check: children that
  // _exit at once may leave before their hello is sent, and in a run of
  // the whole binary this process's client is an earlier test's.
}

TEST(ShimForkStress, WithTheAllocatorDownForksNeverBlockAChild) {
  stress(unique_endpoint());  // nobody listens there
}

}  // namespace
}  // namespace flowtune::shim
