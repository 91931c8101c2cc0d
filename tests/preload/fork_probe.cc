// fork_probe PORT MODE: forks at a chosen point in the shim's life and checks
// what the children see. Run under flowtune-run by shim_fork_test, which
// receives on 127.0.0.2:PORT. Exit 0 when every check held; otherwise it
// names the first one that failed on stderr.
//
// Modes (every child sends once, 64 KB + 1 byte, past the mice gate, on a
// connection of its own; the parent counts the connections it made):
//   fds-before    fork before any TCP write: the child's fd table (each
//                 number and what /proc says it names) is the parent's.
//   fds-connected the same after the parent's first TCP write, with 20
//                 files open.
//   fds-first     the same, 20 times, while another thread makes the
//                 process's first TCP write (the client is opening).
//   storm         8 threads write (big and small writes, every call kind the
//                 shim wraps), dup and close sockets, while the main thread
//                 forks 40 children; every child must exit within 10 s.
//   vfork         one connection of 16 MB; after its first 8 MB a vfork()
//                 child closes the socket's fd and dup2s another over it
//                 (as Python's subprocess does before exec), then _exits.
//                 The parent's flowlet must go on as one.
//   exec          the child execs this program as `exec-child`, which sends
//                 on its own connection and exits 0.3 s later.
// Prints "CONNECTIONS BYTES" on success: the connections the receiver
// should count, each of BYTES bytes.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t kChildBytes = 65536 + 1;
int g_port = 0;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fork_probe: %s\n", what.c_str());
  std::exit(1);
}

int connect_to_receiver() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) fail("socket: " + std::string(std::strerror(errno)));
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl(0x7f000001);
  (void)::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(g_port));
  a.sin_addr.s_addr = htonl(0x7f000002);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    fail("connect: " + std::string(std::strerror(errno)));
  }
  return fd;
}

bool send_all(int fd, std::size_t bytes) {
  std::vector<char> buf(bytes, 'f');
  std::size_t off = 0;
  while (off < bytes) {
    const ssize_t n = ::send(fd, buf.data() + off, bytes - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<std::size_t>(n);
  }
  return true;
}

// One connection of kChildBytes, closed; false on any error.
bool send_once() {
  const int fd = connect_to_receiver();
  const bool ok = send_all(fd, kChildBytes);
  return ::close(fd) == 0 && ok;
}

using FdTable = std::map<int, std::string>;

FdTable fd_table() {
  FdTable t;
  for (int fd = 0; fd < 1024; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0) continue;
    char path[64], target[256] = {};
    std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    const ssize_t n = ::readlink(path, target, sizeof target - 1);
    t[fd] = n > 0 ? std::string(target, static_cast<std::size_t>(n)) : "?";
  }
  return t;
}

std::string diff(const FdTable& parent, const FdTable& child) {
  std::string out;
  for (const auto& [fd, what] : parent) {
    auto it = child.find(fd);
    if (it == child.end()) {
      out += " fd " + std::to_string(fd) + " (" + what + ") closed;";
    } else if (it->second != what) {
      out += " fd " + std::to_string(fd) + " " + what + " -> " + it->second + ";";
    }
  }
  for (const auto& [fd, what] : child) {
    if (parent.count(fd) == 0) out += " fd " + std::to_string(fd) + " (" + what + ") new;";
  }
  return out;
}

// Waits for a child up to `ms`; false (and the child killed) if it hangs.
bool reap(pid_t pid, int ms, int* status) {
  for (int waited = 0; waited < ms; waited += 5) {
    const pid_t r = ::waitpid(pid, status, WNOHANG);
    if (r == pid) return true;
    ::usleep(5000);
  }
  ::kill(pid, SIGKILL);
  (void)::waitpid(pid, status, 0);
  return false;
}

// Forks once: the child compares its table with the parent's of just
// before the fork, sends once and exits 0, or 2 on a difference.
void fork_and_compare(const char* when) {
  const FdTable before = fd_table();
  const pid_t pid = ::fork();
  if (pid < 0) fail("fork failed");
  if (pid == 0) {
    const std::string d = diff(before, fd_table());
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a probe that died
    if (!d.empty()) {
      std::fprintf(stderr, "fork_probe: %s: child's fds differ:%s\n", when, d.c_str());
      ::_exit(2);
    }
    ::_exit(send_once() ? 0 : 3);
  }
  int status = 0;
  if (!reap(pid, 10000, &status)) fail(std::string(when) + ": child hung");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fail(std::string(when) + ": child exited " + std::to_string(WEXITSTATUS(status)));
  }
}

std::vector<int> open_files(int n) {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) fds.push_back(::open("/dev/null", O_RDONLY));
  return fds;
}

int run_fds(const std::string& mode) {
  int children = 0;
  if (mode == "fds-before") {
    fork_and_compare("before first use");
    children = 1;
  } else if (mode == "fds-connected") {
    const int fd = connect_to_receiver();
    if (!send_all(fd, kChildBytes)) fail("parent's send failed");
    (void)open_files(20);
    fork_and_compare("while connected");
    fork_and_compare("while connected, again");
    ::close(fd);
    children = 3;  // two children and the parent's connection
  } else {
    const int fd = connect_to_receiver();
    std::thread first([fd] {
      if (!send_all(fd, kChildBytes)) fail("first write failed");
    });
    for (int i = 0; i < 20; ++i) fork_and_compare("during the first TCP write");
    first.join();
    ::close(fd);
    children = 21;
  }
  std::printf("%d %zu\n", children, kChildBytes);
  return 0;
}

// Every wrapped call kind on one connection, with dups and closes, until
// told to stop. Bytes per connection are counted so the receiver can check.
struct Storm {
  std::atomic<bool> stop{false};
  std::atomic<int> connections{0};
  std::atomic<unsigned long long> bytes{0};
};

bool write_kind(int fd, int kind, const char* buf, std::size_t len) {
  ssize_t n = -1;
  switch (kind % 5) {
    case 0: n = ::write(fd, buf, len); break;
    case 1: n = ::send(fd, buf, len, MSG_NOSIGNAL); break;
    case 2: {
      iovec iov[2] = {{const_cast<char*>(buf), len / 2}, {const_cast<char*>(buf) + len / 2,
                                                          len - len / 2}};
      n = ::writev(fd, iov, 2);
      break;
    }
    case 3: {
      iovec iov{const_cast<char*>(buf), len};
      msghdr m{};
      m.msg_iov = &iov;
      m.msg_iovlen = 1;
      n = ::sendmsg(fd, &m, MSG_NOSIGNAL);
      break;
    }
    default: {
      const int dup = ::dup(fd);  // an alias of the socket, written and closed
      n = ::write(dup, buf, len);
      ::close(dup);
    }
  }
  return n >= 0;
}

void storm_writer(Storm* s, int id) {
  std::vector<char> buf(256 * 1024, 's');
  for (int round = 0; !s->stop.load(); ++round) {
    const int fd = connect_to_receiver();
    s->connections.fetch_add(1);
    for (int i = 0; i < 8 && !s->stop.load(); ++i) {
      const std::size_t len = (i + id) % 3 == 0 ? buf.size() : 100;
      if (!write_kind(fd, i + id + round, buf.data(), len)) break;
    }
    ::close(fd);
  }
}

int run_storm() {
  Storm s;
  std::vector<std::thread> writers;
  for (int i = 0; i < 8; ++i) writers.emplace_back(storm_writer, &s, i);
  int hung = 0, failed = 0;
  for (int i = 0; i < 40; ++i) {
    const pid_t pid = ::fork();
    if (pid < 0) fail("fork failed");
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::_exit(send_once() ? 0 : 3);
    }
    int status = 0;
    if (!reap(pid, 10000, &status)) {
      ++hung;
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++failed;
    }
  }
  s.stop.store(true);
  for (auto& t : writers) t.join();
  if (hung != 0 || failed != 0) {
    fail("storm: " + std::to_string(hung) + " of 40 children hung, " + std::to_string(failed) +
         " failed");
  }
  // The storm's own connections carry varying bytes: the receiver counts
  // only the children's (kChildBytes each) and the total of connections.
  std::printf("%d %zu %d\n", 40, kChildBytes, s.connections.load());
  return 0;
}

int run_vfork() {
  // 8 MB first: send_all returns with megabytes still queued at the paced
  // rate, so the flowlet is in progress when the child closes its copy.
  constexpr std::size_t kTotal = 16 << 20, kFirst = 8 << 20;
  const int fd = connect_to_receiver();
  if (!send_all(fd, kFirst)) fail("the first 8 MB failed");
  const pid_t pid = ::vfork();
  if (pid == 0) {
    ::close(fd);
    ::dup2(2, fd);
    ::_exit(0);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) fail("vfork failed");
  if (!send_all(fd, kTotal - kFirst)) fail("the rest failed: the child closed the parent's fd?");
  ::close(fd);
  std::printf("1 %zu\n", kTotal);
  return 0;
}

int run_exec(const char* self) {
  const int fd = connect_to_receiver();
  if (!send_all(fd, kChildBytes)) fail("parent's send failed");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const std::string port = std::to_string(g_port);
    ::execl(self, self, port.c_str(), "exec-child", nullptr);
    ::_exit(127);
  }
  int status = 0;
  if (!reap(pid, 20000, &status)) fail("exec: child hung");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail("exec: child failed");
  ::close(fd);
  std::printf("2 %zu\n", kChildBytes);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr,
                 "usage: fork_probe PORT fds-before|fds-connected|fds-first|storm|vfork|exec\n");
    return 2;
  }
  g_port = std::atoi(argv[1]);
  const std::string mode = argv[2];
  ::signal(SIGPIPE, SIG_IGN);
  if (mode.rfind("fds-", 0) == 0) return run_fds(mode);
  if (mode == "storm") return run_storm();
  if (mode == "vfork") return run_vfork();
  if (mode == "exec") return run_exec("/proc/self/exe");
  if (mode == "exec-child") {
    // Stays long enough for its hello to reach the allocator (a process
    // that exits at once may leave before its client connected).
    const bool ok = send_once();
    ::usleep(300'000);
    return ok ? 0 : 1;
  }
  std::fprintf(stderr, "fork_probe: unknown mode %s\n", mode.c_str());
  return 2;
}
