// A program for the shim tests, run under flowtune-run: connects from
// 127.0.0.1 to 127.0.0.2:PORT and sends BYTES with one intercepted call kind,
// then prints the checksum of what it sent. Modes:
//   send sendto sendmsg sendmmsg write writev sendfile splice  one call kind
//   all       each kind in turn, one connection
//   dup       half by send() on the fd, half by write() on a dup() of it
//   fork      parent and child each send BYTES on their own connection
//   forkshare one connection written at once by the parent and 8 forked
//             children, each with its own client (one socket: one flow at
//             the allocator, whatever processes write to it); the bytes are
//             one constant, so their interleaving does not change the sum;
//             reports the lowest pacing cap the socket had while they wrote
//             as the watched rate
//   threads   four threads, each its own connection
//   nonblock  a non-blocking socket driven by poll(), EAGAIN handled
//   closefrom, close_range_raw, close_range_libc
//             one connection, then every fd from 3 up closed the way a
//             daemon does at start-up (glibc closefrom, the raw syscall,
//             libc close_range), then a second connection: the library's
//             own descriptors must survive, or not matter
// A sender paces itself at nothing: the shim and the kernel decide.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in me{};
  me.sin_family = AF_INET;
  me.sin_addr.s_addr = htonl(0x7f000001);
  bind(fd, reinterpret_cast<sockaddr*>(&me), sizeof me);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(0x7f000002);
  to.sin_port = htons(static_cast<std::uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    std::perror("connect");
    std::exit(3);
  }
  return fd;
}

// The highest SO_MAX_PACING_RATE seen on a "watched" connection (bytes/s;
// 0: never paced), sampled between writes.
std::uint64_t g_max_rate = 0;

void watch_rate(int fd) {
  std::uint64_t v = 0;
  socklen_t len = sizeof v;
  if (getsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &v, &len) != 0) return;
  if (len == sizeof(std::uint32_t)) v &= 0xffffffffu;
  if (v != ~std::uint64_t{0} && v != 0xffffffffu && v > g_max_rate) g_max_rate = v;
}

char byte_at(std::uint64_t i) { return static_cast<char>(i * 7 + 3); }

// Writes data[0, n) with `kind`, handling partial writes; returns false on error.
bool put(int fd, const std::string& kind, const char* data, std::size_t n) {
  std::size_t off = 0;
  while (off < n) {
    const char* p = data + off;
    const std::size_t len = n - off;
    ssize_t w = -1;
    if (kind == "send") {
      w = send(fd, p, len, 0);
    } else if (kind == "sendto") {
      w = sendto(fd, p, len, 0, nullptr, 0);
    } else if (kind == "sendmsg" || kind == "sendmmsg") {
      iovec iov[2] = {{const_cast<char*>(p), len / 2}, {const_cast<char*>(p + len / 2), len - len / 2}};
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = 2;
      if (kind == "sendmsg") {
        w = sendmsg(fd, &m, 0);
      } else {
        mmsghdr mm{};
        mm.msg_hdr = m;
        const int r = sendmmsg(fd, &mm, 1, 0);
        w = r == 1 ? static_cast<ssize_t>(mm.msg_len) : -1;
      }
    } else if (kind == "write") {
      w = write(fd, p, len);
    } else if (kind == "writev") {
      iovec iov[2] = {{const_cast<char*>(p), len / 2}, {const_cast<char*>(p + len / 2), len - len / 2}};
      w = writev(fd, iov, 2);
    } else if (kind == "sendfile" || kind == "splice") {
      // Through a temporary file (sendfile) or a pipe (splice).
      if (kind == "sendfile") {
        char path[] = "/tmp/ft-shim-XXXXXX";
        const int f = mkstemp(path);
        unlink(path);
        if (write(f, p, len) != static_cast<ssize_t>(len)) return false;
        off_t o = 0;
        w = sendfile(fd, f, &o, len);
        close(f);
      } else {
        int pipefd[2];
        if (pipe(pipefd) != 0) return false;
        const std::size_t chunk = len < 32768 ? len : 32768;
        if (write(pipefd[1], p, chunk) != static_cast<ssize_t>(chunk)) return false;
        w = splice(pipefd[0], nullptr, fd, nullptr, chunk, 0);
        // Bytes the splice did not move stay in the pipe: read them back out.
        close(pipefd[0]);
        close(pipefd[1]);
      }
    } else {
      std::fprintf(stderr, "unknown kind %s\n", kind.c_str());
      return false;
    }
    if (w < 0) {
      if (errno == EINTR) continue;
      std::perror(kind.c_str());
      return false;
    }
    off += static_cast<std::size_t>(w);
  }
  return true;
}

std::uint64_t checksum(const std::vector<char>& d) {
  std::uint64_t s = 0;
  for (char c : d) s = s * 31 + static_cast<unsigned char>(c);
  return s;
}

std::vector<char> payload(std::uint64_t n) {
  std::vector<char> d(n);
  for (std::uint64_t i = 0; i < n; ++i) d[i] = byte_at(i);
  return d;
}

// Sends `bytes` on a fresh connection with one kind (or all kinds in turn).
bool run_one(int port, const std::string& kind, std::uint64_t bytes) {
  const int fd = connect_to(port);
  const std::vector<char> d = payload(bytes);
  bool ok = true;
  if (kind == "all") {
    const char* kinds[] = {"send", "sendto", "sendmsg", "sendmmsg", "write", "writev", "sendfile", "splice"};
    const std::size_t part = bytes / 8;
    for (std::size_t k = 0; k < 8 && ok; ++k) {
      const std::size_t from = k * part;
      const std::size_t to = k == 7 ? bytes : from + part;
      ok = put(fd, kinds[k], d.data() + from, to - from);
    }
  } else if (kind == "watch") {
    // send() in 256 kB pieces, sampling the socket's pacing rate between.
    for (std::size_t off = 0; off < bytes && ok; off += 256 * 1024) {
      ok = put(fd, "send", d.data() + off, std::min<std::size_t>(256 * 1024, bytes - off));
      watch_rate(fd);
    }
  } else if (kind == "dup") {
    // Half through the socket's fd, half through a dup of it: one socket,
    // so one flowlet. The dup is closed first, then the original.
    const int dupfd = dup(fd);
    ok = put(fd, "send", d.data(), bytes / 2) && put(dupfd, "write", d.data() + bytes / 2, bytes - bytes / 2);
    close(dupfd);
  } else {
    ok = put(fd, kind, d.data(), d.size());
  }
  close(fd);
  return ok;
}

// The parent and kForkWriters children write one socket concurrently. Each
// holder's client sets the socket's cap to its own rate, so the socket moves
// at n flows' share if the allocator counts each writer as a flow: the
// effective rate tells.
constexpr int kForkWriters = 8;
constexpr char kForkByte = 'f';

bool run_fork_share(int port, std::uint64_t bytes) {
  const int fd = connect_to(port);
  // A small send buffer, so the writers' time is the wire's, not the copy's.
  const int sndbuf = 64 * 1024;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  const std::uint64_t part = bytes / (kForkWriters + 1);
  auto write_part = [&](std::uint64_t n) {
    const std::vector<char> d(n, kForkByte);
    return put(fd, "write", d.data(), n);
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<pid_t> children;
  for (int i = 0; i < kForkWriters; ++i) {
    const pid_t c = fork();
    if (c == 0) std::exit(write_part(part) ? 0 : 1);  // exit(): the child's client sends its ends
    children.push_back(c);
  }
  // The cap the socket carries while they write, every 0.5 ms (started after
  // the forks: no child inherits the thread). Nine flows would each be
  // capped at a ninth of the link; one flow is capped at all of it. The cap,
  // unlike bytes / time, does not depend on how fast the machine is.
  std::atomic<bool> done{false};
  std::uint64_t lowest = ~std::uint64_t{0};
  std::thread sampler([&] {
    while (!done.load()) {
      std::uint64_t v = 0;
      socklen_t len = sizeof v;
      if (getsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &v, &len) == 0) {
        if (len == sizeof(std::uint32_t)) v &= 0xffffffffu;
        if (v != 0 && v != ~std::uint64_t{0} && v != 0xffffffffu) lowest = std::min(lowest, v);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  bool ok = write_part(bytes - part * kForkWriters);
  for (pid_t c : children) {
    int st = 0;
    waitpid(c, &st, 0);
    ok = ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  done = true;
  sampler.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "forkshare: %.1f MB/s\n", static_cast<double>(bytes) / s / 1e6);
  g_max_rate = lowest == ~std::uint64_t{0} ? 0 : lowest;
  close(fd);
  return ok;
}

bool run_nonblocking(int port, std::uint64_t bytes) {
  const int fd = connect_to(port);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  const std::vector<char> d = payload(bytes);
  std::size_t off = 0;
  int eagain = 0;
  while (off < d.size()) {
    const ssize_t w = send(fd, d.data() + off, std::min<std::size_t>(d.size() - off, 256 * 1024), 0);
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      ++eagain;  // errno must be the kernel's, untouched by the shim
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 1000);
      continue;
    }
    if (w < 0) {
      std::perror("send");
      return false;
    }
    off += static_cast<std::size_t>(w);
  }
  std::fprintf(stderr, "nonblock: %d EAGAIN\n", eagain);
  close(fd);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: shim_sender PORT MODE BYTES\n");
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const std::string mode = argv[2];
  const std::uint64_t bytes = std::strtoull(argv[3], nullptr, 10);
  std::uint64_t sum = checksum(payload(bytes));
  bool ok = true;
  int connections = 1;
  if (mode == "forkshare") {
    ok = run_fork_share(port, bytes);
    sum = checksum(std::vector<char>(bytes, kForkByte));
  } else if (mode == "fork") {
    const pid_t child = fork();
    ok = run_one(port, "write", bytes);
    if (child == 0) _exit(ok ? 0 : 1);
    int st = 0;
    waitpid(child, &st, 0);
    ok = ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    connections = 2;
  } else if (mode == "threads") {
    std::vector<std::thread> ts;
    std::vector<int> results(4, 0);
    for (int t = 0; t < 4; ++t) ts.emplace_back([&, t] { results[t] = run_one(port, "send", bytes); });
    for (auto& t : ts) t.join();
    for (int r : results) ok = ok && r;
    connections = 4;
  } else if (mode == "closefrom" || mode == "close_range_raw" || mode == "close_range_libc") {
    // The first connection opens the client (its runtime thread, ZeroMQ).
    ok = run_one(port, "send", bytes);
    if (mode == "closefrom") {
      closefrom(3);
    } else if (mode == "close_range_raw") {
      ok = ok && syscall(SYS_close_range, 3u, ~0u, 0) == 0;
    } else {
      ok = ok && close_range(3, ~0u, 0) == 0;
    }
    ok = ok && run_one(port, "watch", bytes);
    connections = 2;
  } else if (mode == "nonblock") {
    ok = run_nonblocking(port, bytes);
  } else {
    ok = run_one(port, mode, bytes);
  }
  // What each connection carried: the same bytes, so one checksum; then the
  // highest pacing rate a watched connection had (0 if none was watched).
  std::printf("%d %llu %llu\n", connections, static_cast<unsigned long long>(sum),
              static_cast<unsigned long long>(g_max_rate));
  return ok ? 0 : 1;
}
