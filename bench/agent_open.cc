// A process's first flowlet with and without the host agent, in one run:
// rounds alternate a client that runs its own session (FLOWTUNE_AGENT=off)
// with one the agent serves. Per round: ft_client_open's time on the
// caller, the time from open to the first rate on the socket (what a
// short-lived process under the shim waits for), and the CPU spent by this
// process, and the agent's over the whole run. Starts its own allocator and agent; prints one
// JSON object with medians and the agent/own ratios.
//
//   agent_open [--rounds N]
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "agent_harness.h"
#include "flowtune/flowtune.h"

namespace {

using Clock = std::chrono::steady_clock;
using flowtune::bench::Pair;
using flowtune::bench::spawn;

double self_cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

double pid_cpu_s(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const std::size_t close = s.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<std::string> fields;
  std::size_t at = close + 2;
  while (at < s.size()) {
    const std::size_t sp = std::min(s.find(' ', at), s.size());
    fields.push_back(s.substr(at, sp - at));
    at = sp + 1;
  }
  // utime and stime are fields 14 and 15 (1-based), 11 and 12 after ')'.
  if (fields.size() < 13) return 0;
  return (std::stod(fields[11]) + std::stod(fields[12])) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

struct Sample {
  double open_us = 0, first_rate_us = 0, self_cpu_ms = 0;
};

// One client's life: open, one flowlet until its rate is on the socket, close.
bool one_round(bool use_agent, const std::string& address, Sample* out) {
  ::setenv("FLOWTUNE_AGENT", use_agent ? address.c_str() : "off", 1);
  Pair p;
  const double cpu0 = self_cpu_s();
  const auto t0 = Clock::now();
  ft_config cfg;
  ft_config_init(&cfg);
  ft_client* c = nullptr;
  if (ft_client_open(&cfg, &c) != FT_OK) return false;
  const auto t1 = Clock::now();
  ft_socket_register(c, p.send_fd);
  ft_flowlet_begin(c, p.send_fd, 100u << 20, nullptr);
  std::uint64_t r = 0;
  while (r == 0 && Clock::now() - t0 < std::chrono::seconds(5)) {
    ft_socket_rate(c, p.send_fd, &r);
    if (r == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  const auto t2 = Clock::now();
  ft_socket_unregister(c, p.send_fd);
  ft_client_close(c);
  out->open_us = std::chrono::duration<double, std::micro>(t1 - t0).count();
  out->first_rate_us = std::chrono::duration<double, std::micro>(t2 - t0).count();
  out->self_cpu_ms = (self_cpu_s() - cpu0) * 1e3;
  return r != 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 30;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: agent_open [--rounds N]\n");
      return 2;
    }
  }
  const std::string listen = "ipc:///tmp/flowtune-agent-open-" + std::to_string(getpid());
  const std::string address = "@flowtune-agent-open-" + std::to_string(getpid());
  ::setenv("FLOWTUNE_ALLOCATOR", listen.c_str(), 1);
  ::setenv("FLOWTUNE_LOG", "1", 1);
  const pid_t alloc =
      spawn({FT_ALLOCATOR_BINARY, "--listen", listen, "--host-gbps", "10", "--log-level", "error"});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const pid_t agent =
      spawn({FT_AGENT_BINARY, "--listen", address, "--host", "127.0.0.1", "--log-level", "1"});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<Sample> own, served;
  const double agent_cpu0 = pid_cpu_s(agent);
  bool ok = alloc > 0 && agent > 0;
  for (int k = 0; k < rounds && ok; ++k) {
    Sample a, b;
    ok = one_round(false, address, &a) && one_round(true, address, &b);
    own.push_back(a);
    served.push_back(b);
  }
  const double agent_cpu_s = pid_cpu_s(agent) - agent_cpu0;
  ::kill(agent, SIGTERM);
  ::kill(alloc, SIGTERM);
  ::waitpid(agent, nullptr, 0);
  ::waitpid(alloc, nullptr, 0);
  if (!ok) {
    std::fprintf(stderr, "agent_open: a round got no rate within 5 s\n");
    return 1;
  }
  auto col = [](const std::vector<Sample>& v, double Sample::*f) {
    std::vector<double> x;
    for (const Sample& s : v) x.push_back(s.*f);
    return median(x);
  };
  std::printf("{\"rounds\": %d", rounds);
  const std::pair<const char*, double Sample::*> fields[] = {
      {"open_us", &Sample::open_us},
      {"first_rate_us", &Sample::first_rate_us},
      {"self_cpu_ms", &Sample::self_cpu_ms}};
  for (const auto& [name, f] : fields) {
    const double o = col(own, f), s = col(served, f);
    std::printf(", \"%s\": {\"own\": %.1f, \"agent\": %.1f, \"ratio\": %.3f}", name, o, s,
                o > 0 ? s / o : 0.0);
  }
  // The agent's CPU (clock ticks, so over the whole run) per served round.
  std::printf(", \"agent_cpu_ms_per_round\": %.2f}\n", agent_cpu_s * 1e3 / rounds);
  return 0;
}
