// flowtune-agent: the host agent (docs/agent.md). One per host (per
// network namespace): it holds the host's one session with the allocator,
// and the host's processes under libflowtune or the shim hand it their
// flowlets instead of each running a session of their own.
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "agent_server.h"
#include "flowtune/common/cli.h"
#include "pacing.h"
#include "runtime.h"

namespace {

using namespace flowtune;

constexpr const char* kUsage = R"(usage: flowtune-agent [options]

The host agent: holds this host's one session with the allocator and
serves every process of the host that runs under libflowtune or the shim
(flowtune-run). A process finds the agent at its address when it opens its
client (FLOWTUNE_AGENT, default @flowtune-agent: an abstract unix socket,
so one agent per network namespace) and hands it its flowlets; it paces its
own sockets with the rates the agent sends back. Without an agent, or when
the agent refuses it, a process runs its own session as before. When the
agent exits or stops answering, its processes remove every cap it set
within a second and use it again once it is back. Needs no privileges.

options:
  --allocator ENDPOINT     default $FLOWTUNE_ALLOCATOR or tcp://127.0.0.1:5555
                           (several, comma-separated: a standby pair)
  --listen ADDRESS         "@name" (abstract) or a socket path
                           (default $FLOWTUNE_AGENT or @flowtune-agent)
  --host HOST              this host's name or address in the allocator's
                           topology (default $FLOWTUNE_HOST; else the first
                           socket's local address)
  --id NAME                endpoint id (default agent-HOSTNAME-PID)
  --min-flowlet-bytes N    default $FLOWTUNE_MIN_FLOWLET_BYTES or 65536
  --min-pacing-rate N      bytes/s (default $FLOWTUNE_MIN_PACING_RATE or 16000)
  --heartbeat-ms N         default 1000
  --max-sockets-per-process N
                           registrations one process may hold (default 65536)
  --max-events-per-sec N   flowlet events (starts, ends, registrations) the
                           agent forwards for the whole host, shared equally
                           by the processes sending them; a process past its
                           share is read later (default 20000, under the
                           allocator's default per-source quota; 0: no limit)
  --allow-uid UID[,UID...]
                           serve only these users' processes (and root's
                           and the agent's own user's); default: every user
  --rt-priority N          run at SCHED_FIFO priority N (1-99; default 0:
                           the normal scheduler); needs CAP_SYS_NICE, and
                           without it the agent says so and runs as normal
  --log-level N            0-4 (default $FLOWTUNE_LOG or 2)
  -h, --help               this text

CURVE keys come from FLOWTUNE_CURVE_* as for any client (docs/security.md).
Processes are served only if they ask for the agent's session settings
(the two above) and name no other allocator. Exits 0 on SIGTERM or SIGINT,
1 if it cannot start, 2 on a usage error.
)";

struct Options {
  std::string allocator = "tcp://127.0.0.1:5555";
  std::string listen = std::string(client::agent::kDefaultAddress);
  std::string host;
  std::string id;
  std::uint64_t min_flowlet_bytes = 65536;
  std::uint64_t min_pacing_rate = 16000;
  std::uint64_t heartbeat_ms = 1000;
  std::uint64_t max_sockets = 65536;
  std::uint64_t max_events_per_sec = 20000;
  int rt_priority = 0;
  std::vector<uid_t> allowed_uids;
  int log_level = 2;
};

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

std::uint64_t env_count(const char* name, std::uint64_t fallback) {
  const char* v = env(name);
  if (v == nullptr || *v < '0' || *v > '9') return fallback;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  return *end == '\0' ? n : fallback;
}

Options parse(int argc, char** argv) {
  Options o;
  if (const char* v = env("FLOWTUNE_ALLOCATOR")) o.allocator = v;
  if (const char* v = env("FLOWTUNE_AGENT")) o.listen = v;
  if (const char* v = env("FLOWTUNE_HOST")) o.host = v;
  o.min_flowlet_bytes = env_count("FLOWTUNE_MIN_FLOWLET_BYTES", o.min_flowlet_bytes);
  o.min_pacing_rate = env_count("FLOWTUNE_MIN_PACING_RATE", o.min_pacing_rate);
  if (const char* v = env("FLOWTUNE_LOG"); v != nullptr && v[0] >= '0' && v[0] <= '4' && !v[1]) {
    o.log_level = v[0] - '0';
  }
  cli::Args args("flowtune-agent", kUsage, argc, argv);
  while (args.next()) {
    if (args.is("--allocator"))
      o.allocator = args.value();
    else if (args.is("--listen"))
      o.listen = args.value();
    else if (args.is("--host"))
      o.host = args.value();
    else if (args.is("--id"))
      o.id = args.value();
    else if (args.is("--min-flowlet-bytes"))
      o.min_flowlet_bytes = args.count();
    else if (args.is("--min-pacing-rate"))
      o.min_pacing_rate = args.count();
    else if (args.is("--heartbeat-ms"))
      o.heartbeat_ms = std::max<std::uint64_t>(1, args.count(3'600'000));
    else if (args.is("--max-sockets-per-process"))
      o.max_sockets = args.count();
    else if (args.is("--max-events-per-sec"))
      o.max_events_per_sec = args.count();
    else if (args.is("--log-level"))
      o.log_level = static_cast<int>(args.count(4));
    else if (args.is("--allow-uid"))
      for (const std::string& u : cli::split_commas(args.value())) {
        char* end = nullptr;
        const unsigned long v = std::strtoul(u.c_str(), &end, 10);
        if (u.empty() || *end != '\0' || v > 0xfffffffeul)
          args.fail("--allow-uid expects uids, got '" + u + "'");
        o.allowed_uids.push_back(static_cast<uid_t>(v));
      }
    else if (args.is("--rt-priority"))
      o.rt_priority = static_cast<int>(args.count(99));
    else
      args.unknown();
  }
  if (o.listen == "off") args.fail("--listen off: an agent needs an address");
  if (o.id.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "host");
    o.id = std::string("agent-") + host + "-" + std::to_string(getpid());
  }
  return o;
}

// With --host the session says hello at once: "registered" on standard
// output once the allocator acknowledged it (within 3 s), so a script can
// start the host's processes after it.
void say_registered(const client::Runtime& runtime, bool host_known) {
  if (!host_known) return;
  for (int i = 0; i < 600; ++i) {
    if (runtime.stats().connected != 0) {
      std::printf("registered\n");
      std::fflush(stdout);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::fprintf(stderr, "flowtune-agent: not registered with the allocator yet; serving anyway\n");
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  // SIGTERM and SIGINT end the agent; every thread started below inherits
  // the mask, so they wait for sigwaitinfo() below.
  sigset_t stop_set;
  sigemptyset(&stop_set);
  sigaddset(&stop_set, SIGTERM);
  sigaddset(&stop_set, SIGINT);
  (void)pthread_sigmask(SIG_BLOCK, &stop_set, nullptr);
  // Before any thread starts, so the runtime's and ZeroMQ's inherit it: the
  // host's control plane then never waits behind the host's senders.
  if (o.rt_priority > 0) {
    sched_param sp{};
    sp.sched_priority = o.rt_priority;
    if (const int err = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp); err != 0) {
      std::fprintf(stderr, "flowtune-agent: --rt-priority %d: %s; running as normal\n",
                   o.rt_priority, std::strerror(err));
    }
  }

  // A connection per process: as many as the hard limit allows.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &files);
  }
  auto tenants = std::make_shared<client::TenantNames>();
  agent::ServerConfig sc;
  sc.listen = o.listen;
  sc.allocator = o.allocator;
  sc.host = o.host;
  sc.session.min_flowlet_bytes = o.min_flowlet_bytes;
  sc.session.min_rate_bytes_per_sec = o.min_pacing_rate;
  sc.max_sockets_per_process = o.max_sockets;
  sc.max_events_per_sec = static_cast<double>(o.max_events_per_sec);
  sc.allowed_uids = o.allowed_uids;
  sc.log_level = o.log_level;
  agent::Server server(sc, tenants);
  if (const Result<void> opened = server.open(); !opened) {
    std::fprintf(stderr, "flowtune-agent: %s\n", opened.error().message.c_str());
    return 1;
  }

  client::SessionConfig s;
  s.endpoint_id = o.id;
  s.host = o.host;
  s.min_flowlet_bytes = o.min_flowlet_bytes;
  s.min_rate_bytes_per_sec = o.min_pacing_rate;
  s.heartbeat_us = o.heartbeat_ms * 1000;
  s.tenants = tenants;
  client::RuntimeConfig rc;
  rc.allocator = o.allocator;
  rc.log_level = o.log_level;
  rc.heartbeat_ms = static_cast<std::uint32_t>(o.heartbeat_ms);
  rc.private_fd_table = false;  // the server's connections are in the shared table
  rc.nap = false;               // its processes' events wake its loop
  client::SocketTable table;    // the agent's own: it registers no socket
  client::Runtime runtime(rc, s, table, &server);
  server.attach(&runtime);
  if (runtime.start() != FT_OK) {
    std::fprintf(stderr, "flowtune-agent: cannot use allocator \"%s\" (see above)\n",
                 o.allocator.c_str());
    return 1;
  }
  if (o.log_level >= 2) {
    std::fprintf(stderr, "flowtune-agent: serving %s, allocator %s\n", o.listen.c_str(),
                 o.allocator.c_str());
  }
  say_registered(runtime, !o.host.empty());
  while (sigwaitinfo(&stop_set, nullptr) < 0) {
  }
  // The session's last words end every flowlet; then the processes see the
  // connection close and remove the caps.
  (void)runtime.stop();
  return 0;
}
