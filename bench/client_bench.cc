// libflowtune's cost on the application's thread, against a plain send() of
// the same size measured in the same run (the baseline), and the client's
// CPU per 1,000 flowlets/s.
//
// BM_Send/bytes: write() of `bytes` on a loopback TCP socket whose peer is
//   drained by another thread: what an application pays anyway.
// BM_Begin, BM_Sent, BM_End: one API call each on a registered socket (the
//   runtime thread consumes the events concurrently; no allocator, so no
//   network work is in the measured path). ns per call; compare with
//   BM_Send/1024.
// BM_SendAsFlowlet/bytes: the same write() wrapped as a flowlet (begin,
//   write, sent, end): minus BM_Send of the same size, divided by 3, it is the
//   cost per call when the runtime keeps up, as it does in a real sender.
// BM_FlowletCpu: 1,000 flowlets/s (begin + sent + end, 100 kB each, all
//   reported) for 2 s against a real flowtune-allocator; counter
//   cpu_per_1k_flowlets_s = process CPU seconds per second of run (the
//   application thread only sleeps), i.e. the fraction of a core the client
//   (runtime thread + ZeroMQ I/O) costs at that rate.
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "flowtune/flowtune.h"

extern char** environ;

namespace {

// A loopback TCP connection whose receiving end is drained by a thread.
struct Conn {
  int fd = -1;
  int peer = -1;
  std::thread drain;
  Conn() {
    const int l = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(0x7f000002);
    ::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
    ::listen(l, 1);
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in me{};
    me.sin_family = AF_INET;
    me.sin_addr.s_addr = htonl(0x7f000001);
    ::bind(fd, reinterpret_cast<sockaddr*>(&me), sizeof me);
    ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    peer = ::accept(l, nullptr, nullptr);
    ::close(l);
    drain = std::thread([p = peer] {
      std::vector<char> buf(1 << 16);
      while (::read(p, buf.data(), buf.size()) > 0) {
      }
    });
  }
  ~Conn() {
    ::shutdown(fd, SHUT_WR);
    drain.join();
    ::close(fd);
    ::close(peer);
  }
};

ft_client* open_client(const std::string& allocator) {
  ft_config cfg;
  ft_config_init(&cfg);
  cfg.allocator = allocator.c_str();
  cfg.log_level = 0;
  cfg.min_flowlet_bytes = 1;
  ft_client* c = nullptr;
  if (ft_client_open(&cfg, &c) != FT_OK) std::abort();
  return c;
}

const std::string kNoAllocator = "ipc:///tmp/flowtune-bench-nobody";

void BM_Send(benchmark::State& state) {
  Conn conn;
  std::vector<char> buf(static_cast<std::size_t>(state.range(0)), 'x');
  for (auto _ : state) benchmark::DoNotOptimize(::write(conn.fd, buf.data(), buf.size()));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_Send)->ArgName("bytes")->Arg(64)->Arg(1024)->Arg(65536);

// One call per iteration; calls that met a full event queue (their event
// took the socket's slot instead, see docs/libflowtune.md) are counted.
template <int Which>
void BM_Call(benchmark::State& state) {
  ft_client* c = open_client(kNoAllocator);
  Conn conn;
  ft_socket_register(c, conn.fd);
  std::int64_t failed = 0;
  for (auto _ : state) {
    int rc = FT_OK;
    if constexpr (Which == 0) rc = ft_flowlet_begin(c, conn.fd, 1 << 20, nullptr);
    if constexpr (Which == 1) rc = ft_flowlet_sent(c, conn.fd, 1024);
    if constexpr (Which == 2) {
      ft_flowlet_begin(c, conn.fd, 1 << 20, nullptr);  // so each end has a flowlet
      rc = ft_flowlet_end(c, conn.fd);
    }
    failed += rc != FT_OK;
  }
  // Calls faster than the runtime drains them fill the queue; an event that
  // takes the slot path costs a lock more than a push, so this share must be
  // small to read the time as the queue's.
  ft_stats st{};
  ft_client_stats(c, &st);
  state.counters["queue_full_share"] =
      static_cast<double>(st.queue_overflows) / static_cast<double>(state.iterations());
  state.counters["failed"] = static_cast<double>(failed);
  ft_socket_unregister(c, conn.fd);
  ft_client_close(c);
}
void BM_Begin(benchmark::State& s) { BM_Call<0>(s); }
void BM_Sent(benchmark::State& s) { BM_Call<1>(s); }
void BM_BeginEnd(benchmark::State& s) { BM_Call<2>(s); }
BENCHMARK(BM_Begin);
BENCHMARK(BM_Sent);
BENCHMARK(BM_BeginEnd);

void BM_SendAsFlowlet(benchmark::State& state) {
  ft_client* c = open_client(kNoAllocator);
  Conn conn;
  ft_socket_register(c, conn.fd);
  std::vector<char> buf(static_cast<std::size_t>(state.range(0)), 'x');
  std::int64_t failed = 0;
  for (auto _ : state) {
    failed += ft_flowlet_begin(c, conn.fd, buf.size(), nullptr) != FT_OK;
    const ssize_t n = ::write(conn.fd, buf.data(), buf.size());
    failed += ft_flowlet_sent(c, conn.fd, n > 0 ? static_cast<std::uint64_t>(n) : 0) != FT_OK;
    failed += ft_flowlet_end(c, conn.fd) != FT_OK;
  }
  ft_stats st{};
  ft_client_stats(c, &st);
  state.counters["queue_full"] = static_cast<double>(st.queue_overflows);
  state.counters["failed"] = static_cast<double>(failed);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
  ft_socket_unregister(c, conn.fd);
  ft_client_close(c);
}
BENCHMARK(BM_SendAsFlowlet)->ArgName("bytes")->Arg(64)->Arg(1024)->Arg(65536);

double process_cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

void BM_FlowletCpu(benchmark::State& state) {
  const std::string listen = "ipc:///tmp/flowtune-bench-" + std::to_string(getpid());
  std::vector<std::string> args = {FT_ALLOCATOR_BINARY, "--listen", listen, "--host-gbps", "10",
                                   "--log-level", "error"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) {
    state.SkipWithError("cannot start flowtune-allocator");
    return;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ft_client* c = open_client(listen);
  Conn conn;
  ft_socket_register(c, conn.fd);
  const auto rate = static_cast<int>(state.range(0));
  double cpu = 0, wall = 0;
  for (auto _ : state) {
    const double cpu0 = process_cpu_s();
    const auto t0 = std::chrono::steady_clock::now();
    const auto period = std::chrono::nanoseconds(1'000'000'000 / rate);
    auto next = t0;
    for (int i = 0; i < 2 * rate; ++i) {
      ft_flowlet_begin(c, conn.fd, 100'000, nullptr);
      ft_flowlet_sent(c, conn.fd, 100'000);
      ft_flowlet_end(c, conn.fd);
      next += period;
      std::this_thread::sleep_until(next);
    }
    wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    cpu = process_cpu_s() - cpu0;
  }
  ft_stats st{};
  ft_client_stats(c, &st);
  state.counters["flowlets_reported"] = static_cast<double>(st.flowlets_started);
  state.counters["cpu_fraction"] = cpu / wall;
  state.counters["cpu_per_1k_flowlets_s"] = cpu / wall * 1000.0 / rate;
  ft_socket_unregister(c, conn.fd);
  ft_client_close(c);
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
}
BENCHMARK(BM_FlowletCpu)->ArgName("flowlets_per_s")->Arg(1000)->Arg(10000)->Iterations(1)
    ->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
