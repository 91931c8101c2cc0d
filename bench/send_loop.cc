// send_loop: the program the shim benchmark runs plain, under flowtune-run
// and under trickle. It sends COUNT messages of SIZE bytes with send() over
// loopback TCP (127.0.0.1 -> 127.0.0.2, drained by a thread of its own) and
// prints the mean wall time and the sending thread's CPU time per send()
// call as JSON (CPU time does not count waiting for a busy CPU, so it holds
// on a loaded machine where the wall time does not).
//   coalesced  back to back: after the first, every send extends a flowlet
//   starts     a 2 ms pause before each send, so the queue drains and each
//              send starts a new flowlet (the shim's slow path) if it is at
//              least min_flowlet_bytes, or is a mouse if smaller
//   mice       20 us apart (busy-waited), as a small-request server's
//              replies come: below the shim's mice rate, so none of them
//              is ever scheduled
// SEND_LOOP_PACING_BYTES_PER_SEC=N caps the socket with SO_MAX_PACING_RATE
// itself: the kernel's pacing cost without the shim, for comparison.
// Usage: send_loop coalesced|starts|mice SIZE COUNT
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: send_loop coalesced|starts|mice SIZE COUNT\n");
    return 2;
  }
  const std::string mode = argv[1];
  const std::size_t size = std::strtoull(argv[2], nullptr, 10);
  const long count = std::strtol(argv[3], nullptr, 10);
  const int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(0x7f000002);
  bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
  listen(l, 1);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in me{};
  me.sin_family = AF_INET;
  me.sin_addr.s_addr = htonl(0x7f000001);
  bind(fd, reinterpret_cast<sockaddr*>(&me), sizeof me);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return 3;
  if (const char* p = std::getenv("SEND_LOOP_PACING_BYTES_PER_SEC"); p != nullptr) {
    const unsigned long long rate = std::strtoull(p, nullptr, 10);
    if (setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof rate) != 0) return 4;
  }
  const int peer = accept(l, nullptr, nullptr);
  std::thread drain([peer] {
    std::vector<char> buf(1 << 16);
    while (read(peer, buf.data(), buf.size()) > 0) {
    }
  });
  std::vector<char> msg(size, 'x');
  double total_ns = 0;
  double cpu_ns = 0;
  const auto thread_ns = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
  };
  for (long i = 0; i < count; ++i) {
    if (mode == "starts") std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (mode == "mice") {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    const double c0 = thread_ns();
    const auto t0 = std::chrono::steady_clock::now();
    std::size_t off = 0;
    while (off < size) {
      const ssize_t n = send(fd, msg.data() + off, size - off, 0);
      if (n <= 0) return 4;
      off += static_cast<std::size_t>(n);
    }
    total_ns += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    cpu_ns += thread_ns() - c0;
  }
  shutdown(fd, SHUT_WR);
  drain.join();
  close(fd);
  close(peer);
  close(l);
  std::printf("{\"mode\": \"%s\", \"bytes\": %zu, \"sends\": %ld, \"ns_per_send\": %.1f, "
              "\"cpu_ns_per_send\": %.1f}\n",
              mode.c_str(), size, count, total_ns / static_cast<double>(count),
              cpu_ns / static_cast<double>(count));
  return 0;
}
