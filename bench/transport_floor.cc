// transport_floor: the round-trip floor under the allocator's control loop on
// this machine, with no allocator in the path. Three echoes of a 40-byte
// message between two processes, back to back: raw TCP (blocking, NODELAY),
// libzmq DEALER <-> ROUTER over tcp://, and over ipc://. The daemon's
// start-to-rate latency (daemon_bench) cannot beat the ZeroMQ rows.
// Usage: transport_floor [ROUND_TRIPS]   (prints JSON)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

constexpr int kBytes = 40;

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Summary {
  double p50, p99, p999;
};

Summary summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))]; };
  return {at(0.5), at(0.99), at(0.999)};
}

bool read_all(int fd, char* b, int n) {
  for (int got = 0; got < n;) {
    const ssize_t r = recv(fd, b + got, static_cast<std::size_t>(n - got), 0);
    if (r <= 0) return false;
    got += static_cast<int>(r);
  }
  return true;
}

Summary raw_tcp(int n) {
  const int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
  listen(l, 1);
  const int one = 1;
  if (fork() == 0) {
    const int c = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) _exit(1);
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char b[kBytes];
    while (read_all(c, b, kBytes)) send(c, b, kBytes, 0);
    _exit(0);
  }
  const int s = accept(l, nullptr, nullptr);
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  char b[kBytes] = {};
  std::vector<double> v;
  for (int i = 0; i < n; ++i) {
    const double t0 = now_us();
    send(s, b, kBytes, 0);
    if (!read_all(s, b, kBytes)) break;
    v.push_back(now_us() - t0);
  }
  close(s);
  close(l);
  wait(nullptr);
  return summarize(std::move(v));
}

Summary zmq_echo(const std::string& endpoint, int n) {
  const pid_t child = fork();
  if (child == 0) {
    void* ctx = zmq_ctx_new();
    void* r = zmq_socket(ctx, ZMQ_ROUTER);
    if (zmq_bind(r, endpoint.c_str()) != 0) _exit(1);
    char id[256], b[256];
    for (;;) {
      const int il = zmq_recv(r, id, sizeof id, 0);
      const int m = zmq_recv(r, b, sizeof b, 0);
      if (il < 0 || m < 0 || (m == 1 && b[0] == 'q')) _exit(0);
      zmq_send(r, id, static_cast<std::size_t>(il), ZMQ_SNDMORE);
      zmq_send(r, b, static_cast<std::size_t>(m), 0);
    }
  }
  void* ctx = zmq_ctx_new();
  void* d = zmq_socket(ctx, ZMQ_DEALER);
  zmq_connect(d, endpoint.c_str());
  char b[kBytes] = {};
  for (int i = 0; i < 200; ++i) {  // warm-up; also waits for the bind
    zmq_send(d, b, kBytes, 0);
    zmq_recv(d, b, kBytes, 0);
  }
  std::vector<double> v;
  for (int i = 0; i < n; ++i) {
    const double t0 = now_us();
    zmq_send(d, b, kBytes, 0);
    zmq_recv(d, b, kBytes, 0);
    v.push_back(now_us() - t0);
  }
  zmq_send(d, "q", 1, 0);
  waitpid(child, nullptr, 0);
  zmq_close(d);
  zmq_ctx_term(ctx);
  return summarize(std::move(v));
}

void row(const char* name, const Summary& s, bool last) {
  std::printf("    {\"transport\": \"%s\", \"p50_us\": %.1f, \"p99_us\": %.1f, \"p999_us\": %.1f}%s\n",
              name, s.p50, s.p99, s.p999, last ? "" : ",");
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 20000;
  if (n <= 0) {
    std::fprintf(stderr, "usage: transport_floor [ROUND_TRIPS > 0]\n");
    return 2;
  }
  const std::string ipc = "ipc:///tmp/ft-transport-floor-" + std::to_string(getpid());
  const Summary tcp = raw_tcp(n);
  const Summary ztcp = zmq_echo("tcp://127.0.0.1:" + std::to_string(40000 + getpid() % 20000), n);
  const Summary zipc = zmq_echo(ipc, n);
  unlink(ipc.substr(6).c_str());
  std::printf("{\n  \"benchmark\": \"transport_floor\",\n  \"round_trips\": %d,\n  \"rows\": [\n", n);
  row("raw tcp", tcp, false);
  row("zeromq tcp", ztcp, false);
  row("zeromq ipc", zipc, true);
  std::printf("  ]\n}\n");
  return 0;
}
