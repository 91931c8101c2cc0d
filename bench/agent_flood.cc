// Goal 7 of issue 47, isolation within a host: a calm process's start to
// rate, on an idle host and while another process of the host floods the
// agent with flowlets (begin/end pairs as fast as it can, on 16 sockets).
// Starts its own allocator and agent (--share-off: the agent without a
// per-process share, --max-events-per-sec 0) and the flooding process (this
// binary again, --flooder ADDRESS). The calm process begins a 100 MB
// flowlet on its registered socket, waits for the cap on the socket, ends
// it and waits for the cap to go, --samples times idle and as many during
// the flood. Prints one JSON object: p50 and p99 of each, the flood/idle
// ratio of the p99, and the allocator's rate_limited errors (messages it
// dropped whole) over the flood.
//
//   agent_flood [--samples N] [--share-off]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "agent_harness.h"
#include "flowtune/flowtune.h"

namespace {

using Clock = std::chrono::steady_clock;
using flowtune::bench::Pair;
using flowtune::bench::spawn;

// The flooding process: its own client of the agent, begin/end pairs on
// 16 sockets until it is killed.
int flood(const std::string& address) {
  ::setenv("FLOWTUNE_AGENT", address.c_str(), 1);
  ft_config cfg;
  ft_config_init(&cfg);
  ft_client* c = nullptr;
  if (ft_client_open(&cfg, &c) != FT_OK) return 1;
  std::vector<std::unique_ptr<Pair>> socks;
  for (int i = 0; i < 16; ++i) {
    socks.push_back(std::make_unique<Pair>());
    ft_socket_register(c, socks.back()->send_fd);
  }
  for (;;) {
    for (auto& p : socks) {
      (void)ft_flowlet_begin(c, p->send_fd, 1u << 20, nullptr);
      (void)ft_flowlet_end(c, p->send_fd);
    }
  }
}

std::uint64_t rate_of(ft_client* c, int fd) {
  std::uint64_t r = 0;
  ft_socket_rate(c, fd, &r);
  return r;
}

// One start: microseconds from the begin to the cap on the socket (-1 if
// none within 5 s); then the flowlet ends and its cap goes.
double one_start(ft_client* c, int fd) {
  const auto t0 = Clock::now();
  if (ft_flowlet_begin(c, fd, 100u << 20, nullptr) != FT_OK) return -1;
  while (rate_of(c, fd) == 0 && Clock::now() - t0 < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  const bool rated = rate_of(c, fd) != 0;
  (void)ft_flowlet_end(c, fd);
  const auto t1 = Clock::now();
  while (rate_of(c, fd) != 0 && Clock::now() - t1 < std::chrono::seconds(1)) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return rated ? us : -1;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

// flowtune-ctl's status counter `errors.rate_limited`, read from its JSON
// (-1 if it cannot be read).
long long rate_limited(const std::string& allocator) {
  const std::string cmd =
      std::string(FT_CTL_BINARY) + " --json --allocator " + allocator + " status";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  std::string out;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), p) != nullptr) out += buf.data();
  ::pclose(p);
  const std::size_t at = out.find("\"rate_limited\":");
  return at == std::string::npos ? -1 : std::atoll(out.c_str() + at + 15);
}

struct Run {
  std::vector<double> idle, flood;
  long long dropped = -1;
  bool ok = true;
};

Run measure(const std::string& allocator, const std::string& address, int samples) {
  Run run;
  ::setenv("FLOWTUNE_AGENT", address.c_str(), 1);
  ft_config cfg;
  ft_config_init(&cfg);
  ft_client* c = nullptr;
  if (ft_client_open(&cfg, &c) != FT_OK) return Run{{}, {}, -1, false};
  Pair p;
  ft_socket_register(c, p.send_fd);
  for (int k = 0; k < samples && run.ok; ++k) {
    const double us = one_start(c, p.send_fd);
    run.ok = us >= 0;
    run.idle.push_back(us);
  }
  const long long before = rate_limited(allocator);
  const pid_t flooder = spawn({"/proc/self/exe", "--flooder", address});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the flood is on
  for (int k = 0; k < samples && run.ok; ++k) {
    const double us = one_start(c, p.send_fd);
    run.ok = us >= 0;
    run.flood.push_back(us);
  }
  ::kill(flooder, SIGKILL);
  ::waitpid(flooder, nullptr, 0);
  const long long after = rate_limited(allocator);
  if (before >= 0 && after >= 0) run.dropped = after - before;
  ft_client_close(c);
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  int samples = 100;
  bool share = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--flooder") == 0 && i + 1 < argc) return flood(argv[i + 1]);
    if (std::strcmp(argv[i], "--samples") == 0 && i + 1 < argc) {
      samples = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--share-off") == 0) {
      share = false;
    } else {
      std::fprintf(stderr, "usage: agent_flood [--samples N] [--share-off]\n");
      return 2;
    }
  }
  const std::string listen = "ipc:///tmp/flowtune-agent-flood-" + std::to_string(getpid());
  const std::string address = "@flowtune-agent-flood-" + std::to_string(getpid());
  ::setenv("FLOWTUNE_ALLOCATOR", listen.c_str(), 1);
  ::setenv("FLOWTUNE_LOG", "0", 1);
  const pid_t alloc =
      spawn({FT_ALLOCATOR_BINARY, "--listen", listen, "--host-gbps", "10", "--log-level", "error"});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<std::string> agent_args = {FT_AGENT_BINARY, "--listen",    address, "--host",
                                         "127.0.0.1",     "--log-level", "0"};
  if (!share) agent_args.insert(agent_args.end(), {"--max-events-per-sec", "0"});
  const pid_t agent = spawn(agent_args);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const Run run =
      alloc > 0 && agent > 0 ? measure(listen, address, samples) : Run{{}, {}, -1, false};
  ::kill(agent, SIGTERM);
  ::kill(alloc, SIGTERM);
  ::waitpid(agent, nullptr, 0);
  ::waitpid(alloc, nullptr, 0);
  if (!run.ok) {
    std::fprintf(stderr, "agent_flood: a start got no rate within 5 s\n");
    return 1;
  }
  const double idle99 = percentile(run.idle, 0.99), flood99 = percentile(run.flood, 0.99);
  std::printf(
      "{\"share\": %s, \"samples\": %d, \"idle_us\": {\"p50\": %.0f, \"p99\": %.0f}, "
      "\"flood_us\": {\"p50\": %.0f, \"p99\": %.0f}, \"p99_flood_over_idle\": %.2f, "
      "\"rate_limited_during_flood\": %lld}\n",
      share ? "true" : "false", samples, percentile(run.idle, 0.5), idle99,
      percentile(run.flood, 0.5), flood99, idle99 > 0 ? flood99 / idle99 : 0.0, run.dropped);
  return 0;
}
