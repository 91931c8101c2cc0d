// flowtune-allocator: the Flowtune rate allocator daemon. main() parses flags,
// builds the network and the Allocator, and runs the Server until SIGINT or
// SIGTERM. Configuration errors exit with status 2 and the reason.
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <string_view>

#include "flowtune/common/cli.h"
#include "flowtune/common/endpoint.h"
#include "flowtune/daemon/allocator.h"
#include "flowtune/daemon/server.h"

namespace {

using namespace flowtune::daemon;

constexpr int kExitConfig = 2;

constexpr const char* kUsage = R"(usage: flowtune-allocator [options]

Runs the Flowtune allocator: endpoints (libflowtune, flowtune-run) report
flowlets over ZeroMQ; the allocator computes rates with NED + F-NORM and sends
each endpoint the pacing rates of its flows. flowtune-ctl shows its state.

network:
  --listen ENDPOINT          ZeroMQ endpoint to bind (default tcp://127.0.0.1:5555)
  --topology FILE            network from a TOML file (docs/topology.md)
  --host-gbps G              without --topology: a big switch whose host links
                             run at G Gbit/s (default 10)
  --hosts N                  without --topology: hosts h0..h{N-1} (default 0)
  --unknown-hosts MODE       reject | add: what to do with a host the network
                             does not name (default: reject with --topology,
                             add without); add needs spare host slots
  --spare-hosts N            without --topology: slots for added hosts (default 1024)

engine:
  --threads N                engine threads; > 1 iterates on TBB (default 1)
  --gamma G                  NED step size, (0, 1] (default 0.4)
  --norm fnorm|unorm|none    normalizer (default fnorm)
  --threshold T              send a rate only when it moved by more than T
                             (fraction, default 0.01); links are scaled by 1-T
  --headroom H               fraction of every link kept for unscheduled mice and
                             external traffic (default 0)
  --max-settle-iterations N  iterations after a change before giving up on
                             convergence (default 2000)

policy (docs/policy.md):
  --default-class N          strict priority class of flowlets that name none,
                             0 (served first) .. 7 (default 4)
  --top-class N              the highest class (lowest number) endpoints may ask
                             for; higher asks are lowered to it (default 0)
  --class-reserve F          share of a link kept for each lower class with
                             flows there, so starved flows trickle and resume
                             at once (default 0.02, range 1e-9..0.1)
  --policy FILE              tenants (weights, guarantees, caps), the default and
                             top class, and rules by host, port and endpoint id
                             (TOML); re-read on SIGHUP, a bad file is refused
                             and the old policy kept
  --max-reserved F           share of a link that floors (tenant guarantees,
                             deadlines) may reserve together (default 0.9)
  --deadline-margin F        a deadline's floor is remaining / time left times
                             1 + F (default 0.05)
  --coflow-policy P          none (default: every flowlet its fair share), stf
                             (smallest remaining coflow first), sebf
                             (smallest effective bottleneck first, flows of a
                             coflow paced to finish together) or bssi
                             (Sincronia's order, each coflow's flows max-min): flowlets
                             carrying one coflow id are served as one, in that
                             order, after guarantees and deadlines
  --coflow-share F           share of a link the coflow order may hand out; the
                             rest is shared by every flowlet, so none starves
                             (default 0.7, within --max-reserved)

leases and limits:
  --lease-ms MS              lifetime of a rate at the endpoint (default 1000)
  --lease-refresh-ms MS      how often live leases are renewed and endpoint
                             timeouts checked (default 300)
  --endpoint-timeout-ms MS   an endpoint silent this long loses its flows; must
                             exceed the lease (default 3000)
  --max-flows-per-endpoint N at most 16382, one resync message (default 16000)
  --max-endpoints N          (default 65536)
  --max-flows N              flows in all (default 2097152)
  --max-msg-rate R           messages/s per endpoint, 0 = unlimited (default 100000)

operation:
  --busy-poll-us US          after traffic, keep polling without sleeping this
                             long: lower latency for bursts at the cost of CPU
                             (default 0: sleep as soon as idle)
  --log-level LEVEL          error | warn | info | debug (default info)
  --log-interval-s S         a refusal cause is logged at most once per S (default 10)
  --check-config             validate the configuration, print it, and exit
  -h, --help                 show this help

signals: SIGINT/SIGTERM stop it; SIGHUP re-reads --policy.
exit status: 0 after SIGINT/SIGTERM or --check-config, 2 on a configuration error.
)";

struct Options {
  std::string listen = "tcp://127.0.0.1:5555";
  std::string topology_file;
  std::string policy_file;
  double host_gbps = 10;
  std::uint32_t hosts = 0;
  std::uint32_t spare_hosts = 1024;
  std::string unknown_hosts;  // empty: by mode
  AllocatorConfig alloc;
  LogLevel log_level = LogLevel::kInfo;
  double log_interval_s = 10;
  std::uint64_t busy_poll_us = 0;
  bool check_config = false;
};

[[noreturn]] void usage_error(const std::string& msg) {
  flowtune::cli::Args::usage_error("flowtune-allocator", msg);
}

Options parse(int argc, char** argv) {
  using flowtune::alloc::Normalizer;
  Options o;
  flowtune::cli::Args args("flowtune-allocator", kUsage, argc, argv);
  while (args.next()) {
    if (args.is("--check-config")) o.check_config = true;
    else if (args.is("--listen")) o.listen = args.value();
    else if (args.is("--topology")) o.topology_file = args.value();
    else if (args.is("--host-gbps")) o.host_gbps = args.number(1e-6, 1e6);
    else if (args.is("--hosts")) o.hosts = static_cast<std::uint32_t>(args.count(1u << 24));
    else if (args.is("--spare-hosts")) o.spare_hosts = static_cast<std::uint32_t>(args.count(1u << 24));
    else if (args.is("--unknown-hosts")) o.unknown_hosts = args.value();
    else if (args.is("--threads")) o.alloc.threads = static_cast<unsigned>(args.count(256));
    else if (args.is("--gamma")) o.alloc.engine.gamma = args.number(0, 1);
    else if (args.is("--norm")) {
      o.alloc.engine.normalizer = args.choice<Normalizer>(
          {{"fnorm", Normalizer::kFNorm}, {"unorm", Normalizer::kUNorm}, {"none", Normalizer::kNone}});
    } else if (args.is("--threshold")) o.alloc.threshold = args.number();
    else if (args.is("--headroom")) o.alloc.headroom = args.number();
    else if (args.is("--default-class")) o.alloc.default_class = static_cast<std::uint8_t>(args.count(7));
    else if (args.is("--class-reserve")) o.alloc.engine.class_reserve = args.number();
    else if (args.is("--top-class")) o.alloc.top_class = static_cast<std::uint8_t>(args.count(7));
    else if (args.is("--policy")) o.policy_file = args.value();
    else if (args.is("--max-reserved")) o.alloc.engine.max_reserved_share = args.number();
    else if (args.is("--deadline-margin")) o.alloc.deadline_margin = args.number();
    else if (args.is("--coflow-policy")) {
      const std::string v = args.value();
      if (!flowtune::alloc::parse_coflow_policy(v, o.alloc.coflow_policy)) {
        args.usage_error("flowtune-allocator", "--coflow-policy must be none, stf, sebf or bssi, got '" + v + "'");
      }
    }
    else if (args.is("--coflow-share")) o.alloc.coflow_share = args.number();
    else if (args.is("--max-settle-iterations")) o.alloc.max_settle_iterations = args.count();
    else if (args.is("--lease-ms")) o.alloc.lease_us = static_cast<std::uint32_t>(args.count(3'600'000) * 1000);
    else if (args.is("--lease-refresh-ms")) o.alloc.lease_refresh_us = args.count(3'600'000) * 1000;
    else if (args.is("--endpoint-timeout-ms")) o.alloc.endpoint_timeout_us = args.count(86'400'000) * 1000;
    else if (args.is("--max-flows-per-endpoint")) o.alloc.max_flows_per_endpoint = static_cast<std::uint32_t>(args.count(1u << 30));
    else if (args.is("--max-endpoints")) o.alloc.max_endpoints = static_cast<std::uint32_t>(args.count(1u << 24));
    else if (args.is("--max-flows")) o.alloc.max_flows = static_cast<std::uint32_t>(args.count(1u << 30));
    else if (args.is("--max-msg-rate")) o.alloc.max_messages_per_sec = args.number();
    else if (args.is("--log-level")) {
      o.log_level = args.choice<LogLevel>({{"error", LogLevel::kError},
                                           {"warn", LogLevel::kWarn},
                                           {"info", LogLevel::kInfo},
                                           {"debug", LogLevel::kDebug}});
    } else if (args.is("--log-interval-s")) o.log_interval_s = args.number(0, 86400);
    else if (args.is("--busy-poll-us")) o.busy_poll_us = args.count(10'000'000);
    else args.unknown();
  }
  if (const std::string why = flowtune::endpoint_port_error(o.listen); !why.empty()) {
    usage_error("--listen: " + why);
  }
  if (o.unknown_hosts.empty()) o.unknown_hosts = o.topology_file.empty() ? "add" : "reject";
  if (o.unknown_hosts == "add") o.alloc.unknown_hosts = UnknownHosts::kAdd;
  else if (o.unknown_hosts == "reject") o.alloc.unknown_hosts = UnknownHosts::kReject;
  else usage_error("--unknown-hosts expects reject or add, got '" + o.unknown_hosts + "'");
  return o;
}

Network build_network(const Options& o) {
  if (!o.topology_file.empty()) return Network::from_toml_file(o.topology_file);
  if (!(o.host_gbps > 0)) throw ConfigError("--host-gbps must be positive");
  const std::uint32_t spare = o.alloc.unknown_hosts == UnknownHosts::kAdd ? o.spare_hosts : 0;
  if (o.hosts + spare == 0) {
    throw ConfigError("the network has no hosts: give --hosts, --unknown-hosts add, or --topology");
  }
  return Network::big_switch(o.hosts, o.host_gbps * 1e9, spare);
}

std::uint64_t new_epoch() {
  std::random_device rd;
  std::uint64_t e = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  return e == 0 ? 1 : e;
}

std::string describe(const Options& o, const Network& n, const Allocator& a) {
  const auto& t = n.topology();
  std::string s = "network: " + std::to_string(n.num_hosts()) + " hosts";
  if (n.spare_slots() > 0) s += " (+" + std::to_string(n.spare_slots()) + " spare)";
  s += ", " + std::to_string(t.num_links()) + " links";
  s += o.topology_file.empty() ? " (big switch, " + std::to_string(o.host_gbps) + " Gbit/s hosts)"
                               : " from " + o.topology_file;
  s += "; engine: NED gamma " + std::to_string(o.alloc.engine.gamma) + ", " +
       flowtune::alloc::to_string(o.alloc.engine.normalizer) + ", " +
       std::to_string(o.alloc.threads) + " thread(s), " + a.engine().kernel_name() + " kernels";
  s += "; threshold " + std::to_string(o.alloc.threshold) + ", headroom " +
       std::to_string(o.alloc.headroom) + "; unknown hosts: " + o.unknown_hosts;
  const AllocatorConfig& c = a.config();
  s += "; classes: default " + std::to_string(c.default_class) + ", top " +
       std::to_string(c.top_class) + ", reserve " + std::to_string(c.engine.class_reserve);
  if (c.coflow_policy != flowtune::alloc::CoflowPolicy::kNone) {
    s += std::string("; coflows: ") + flowtune::alloc::to_string(c.coflow_policy) + ", share " +
         std::to_string(c.coflow_share);
  }
  if (!o.policy_file.empty()) {
    s += "; policy " + o.policy_file + ": " + std::to_string(c.policy.tenants.size()) +
         " tenants, " + std::to_string(c.policy.rules.size()) + " rules";
  }
  return s;
}

// SIGHUP: the policy file again. A file that does not load leaves the
// running policy as it was; either way the log says what happened.
void reload_policy(const Options& o, Allocator& allocator, Log& log) {
  if (o.policy_file.empty()) {
    log.write(LogLevel::kWarn, "SIGHUP: no --policy file to re-read; nothing changed");
    return;
  }
  try {
    const OperatorPolicy p = load_policy_file(o.policy_file);
    allocator.set_policy(p);
    log.write(LogLevel::kInfo, "SIGHUP: policy re-read from " + o.policy_file + ": " +
                                   std::to_string(p.tenants.size()) + " tenants, " +
                                   std::to_string(p.rules.size()) + " rules");
  } catch (const ConfigError& e) {
    log.write(LogLevel::kError, std::string("SIGHUP: policy refused, the old one stays: ") +
                                    e.what());
  }
}

int run(const Options& o) {
  Log log(Log::stderr_sink(), o.log_level, static_cast<std::uint64_t>(o.log_interval_s * 1e6));
  Network network = build_network(o);
  AllocatorConfig config = o.alloc;
  if (!o.policy_file.empty()) config.policy = load_policy_file(o.policy_file);
  Allocator allocator(std::move(network), config, new_epoch(), &log);
  const std::string summary = describe(o, allocator.network(), allocator);
  if (o.check_config) {
    std::cout << "configuration ok: " << summary << "\n";
    return 0;
  }
  // Signals arrive on an fd the loop polls, so shutdown is an ordinary event.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGHUP);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  const int sfd = signalfd(-1, &mask, SFD_CLOEXEC);
  if (sfd < 0) throw ConfigError(std::string("signalfd: ") + std::strerror(errno));

  zmq::context_t ctx(1);
  Server server(ctx, allocator, log, o.listen, o.busy_poll_us);
  log.write(LogLevel::kInfo, "listening on " + server.bound_endpoint() + "; epoch " +
                                 std::to_string(allocator.epoch()) + "; " + summary);
  int sig = 0;
  while ((sig = server.run(sfd)) == SIGHUP) reload_policy(o, allocator, log);
  const Counters& c = allocator.counters();
  log.write(LogLevel::kInfo,
            std::string("stopping on ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") + ": " +
                std::to_string(allocator.num_endpoints()) + " endpoints, " +
                std::to_string(allocator.num_flows()) + " flows; " + std::to_string(c.events()) +
                " events, " + std::to_string(c.rate_updates) + " rate updates, " +
                std::to_string(c.iterations) + " iterations");
  ::close(sfd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    return run(o);
  } catch (const ConfigError& e) {
    std::cerr << "flowtune-allocator: " << e.what() << "\n";
    return kExitConfig;
  } catch (const std::exception& e) {
    std::cerr << "flowtune-allocator: fatal: " << e.what() << "\n";
    return 1;
  }
}
