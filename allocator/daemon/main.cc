// flowtune-allocator: the Flowtune rate allocator daemon. main() parses flags,
// builds the network and the Allocator, and runs the Server until SIGINT or
// SIGTERM. Configuration errors exit with status 2 and the reason.
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <string_view>

#include "flowtune/alloc/mpi_driver.h"
#include "flowtune/common/cli.h"
#include "flowtune/common/signals.h"
#include "flowtune/common/curve.h"
#include "flowtune/common/endpoint.h"
#include "flowtune/common/ipv4.h"
#include "flowtune/daemon/allocator.h"
#include "flowtune/daemon/auth.h"
#include "flowtune/daemon/config_file.h"
#include "flowtune/daemon/metrics.h"
#include "flowtune/daemon/server.h"
#include "flowtune/metrics/control_collector.h"
#include "flowtune/metrics/exposer.h"

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
  --threads N                engine threads (default 1)
  --schedule persistent|team|tbb
                             with --threads > 1: a persistent team of threads
                             that runs small engines on one thread while that is
                             faster (default), the team always, or oneTBB's
                             task pool
  --mpi                      under mpirun -np R: the engine's FlowBlocks spread
                             over the R ranks (docs/scale.md); rank 0 serves,
                             the others compute their blocks. Not with
                             --threads > 1
  --mpi-exchange X           how the ranks' link sums meet under --mpi:
                             link-owners (default), neighbors (the same sums;
                             counts sent only when they change, entries over a
                             graph of the ranks that trade), allreduce (every
                             link from every rank; rates equal to rounding) or
                             diagonal (the paper's log-step exchange over a grid
                             of R = 4^k ranks: 1, 4, 16, ...; rates equal to
                             rounding)
  --mpi-gather-threshold T   under --mpi, after an iteration with no changes the
                             other ranks send rank 0 only the rates that moved by
                             more than T (relative) since they last sent them;
                             links are scheduled at (1 - T) of what they would
                             be, so rates told from that view still fit; 0:
                             every rate, every iteration (default 0)
  --gamma G                  NED step size, (0, 1] (default 0.4)
  --norm fnorm|unorm|none    normalizer (default fnorm)
  --threshold T              send a rate only when it moved by more than T
                             (fraction, default 0.01); links are scaled by 1-T
  --early-rates on|off       answer a flowlet's start with its rate at the current
                             prices before the turn's iteration, which corrects
                             it only if it moved past the threshold (default on)
  --update-interval-us US    send raised rates at most this often; the iterations
                             between coalesce, cuts and first rates go at once,
                             and the one that settles sends all (default 0:
                             every moved rate after every iteration)
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
  --coflow-aging-s S         aging: a coflow's weight grows by 1 every S seconds
                             it waits, and its key in the order (stf's bytes,
                             sebf's bottleneck time) is divided by it, so a
                             large coflow is not kept waiting behind a stream of
                             small ones (default 0: off)

leases and limits:
  --lease-ms MS              lifetime of a rate at the endpoint (default 1000)
  --lease-refresh-ms MS      how often live leases are renewed and endpoint
                             timeouts checked (default 300)
  --endpoint-timeout-ms MS   an endpoint silent this long loses its flows; must
                             exceed the lease (default 3000)
  --max-flows-per-endpoint N at most 16382, one resync message (default 16000;
                             the host's --max-flows-per-source binds first)
  --max-endpoints N          (default 65536)
  --max-flows N              flows in all (default 2097152)
  --max-flows-per-source N   flows the endpoints of one host, the connections
                             from one peer address, and with CURVE the holder
                             of one key, may hold together; past it a
                             flowlet is refused and runs on TCP, unpaced;
                             0 = no limit (default 8192)
  --max-endpoints-per-source N
                             endpoints per host, per peer address and per key
                             (default 4096)
  --max-hosts-per-source N   spare host slots (--unknown-hosts add) one peer
                             address or key may fill: hosts its hellos name,
                             and the destinations its endpoints' flows add
                             (which count against their host too); a slot
                             counts until it is released; raise it for an
                             address that fronts many hosts (NAT); 0 = no
                             limit (default 64)
  --max-source-bytes-per-sec B
                             input bytes/s per key (CURVE), else per peer
                             address, else per host, charged before
                             decoding what decoding costs (a frame's size,
                             or a quarter of what it unpacks to if more);
                             0 = unlimited (default 1000000)
  --max-source-burst-bytes B its burst: at least the largest resync an
                             endpoint sends (default 2097152)
  --max-msg-rate R           messages/s per endpoint, a message weighing one
                             more per 4 KB of that cost; 0 = unlimited (default 100000)

security (docs/security.md; off by default):
  --curve-secret FILE        turn on ZeroMQ CURVE with this key pair (from
                             flowtune-ctl keygen); every peer must then hold
                             a key in one of the lists below
  --curve-clients DIR        endpoint keys (DIR/NAME.pub), each bound to the
                             hosts it may speak for (hosts = [...])
  --curve-ctl DIR            flowtune-ctl keys that may read state
  --curve-admin DIR          flowtune-ctl keys that may also reload
                             (without CURVE only a loopback or ipc listener
                             takes reload)

hot standby (docs/scale.md):
  --standby-of ENDPOINT      one of a pair: the other allocator's --listen
                             endpoint. Start both with it (each names the
                             other): one serves, the other answers endpoints
                             "standby" and takes over when its peer has not
                             answered for --takeover-ms; endpoints list both
                             (FLOWTUNE_ALLOCATOR=EP1,EP2) and follow
  --probe-ms MS              how often the peer is asked its role (default 100)
  --takeover-ms MS           the peer's silence that makes a standby take over;
                             at least two probes (default 500)
  --witness ENDPOINT         with --standby-of: the pair's flowtune-witness, a
                             third voice on a third machine. A standby then
                             takes over from a silent peer only once the
                             witness grants it the pair's lease, and the
                             active stands down when it hears neither the
                             witness nor its peer, so a partition leaves at
                             most one serving (give both the same witness)
  --role-probes-per-sec N    role probes answered a second, the pair's and
                             relays' together; past it (a tenth of a second's
                             burst) they are told to retry, which reads as
                             life (default 20000; at least 1)

relays (docs/scale.md#relays):
  --relay-from CIDR[,CIDR]   addresses flowtune-relay may connect from (TCP
                             listeners; an ipc listener takes any). Relays
                             carry many endpoints, so quotas by address do
                             not apply to them: none is trusted by default

metrics (docs/operate.md):
  --metrics ADDR:PORT        serve Prometheus metrics at http://ADDR:PORT/metrics,
                             read from the replies flowtune-ctl reads (off by
                             default). With CURVE, the allocator's own public
                             key must be among its --curve-ctl keys
  --metrics-max-links N      per-link metrics for at most the first N links
                             that carry flows, 0..500 (default 64)

operation:
  --busy-poll-us US          after traffic, keep polling without sleeping this
                             long: lower latency for bursts at the cost of CPU
                             (default 0: sleep as soon as idle)
  --log-level LEVEL          error | warn | info | debug (default info)
  --log-interval-s S         a refusal cause is logged at most once per S (default 10)
  --config FILE              read flags from a TOML file (docs/operate.md): each
                             key a flag's name without the dashes; flags on
                             the command line override it; re-read on SIGHUP
                             (policy and count limits apply, other changes
                             are named and need a restart)
  --check-config             validate the configuration, print it, and exit
  -h, --help                 show this help

signals: SIGINT/SIGTERM stop it; SIGHUP re-reads --config, --policy and the
key lists (as flowtune-ctl reload does).
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
  AuthConfig auth;
  std::string standby_of;
  std::string witness;
  std::vector<flowtune::Cidr> relay_from;
  std::uint64_t probe_ms = 100;
  std::uint64_t takeover_ms = 500;
  std::uint64_t role_probes_per_sec = Server::kRoleRequestsPerSec;
  bool check_config = false;
  bool mpi = false;
  std::string mpi_exchange_flag;  // as given; empty: not given
  flowtune::alloc::Exchange mpi_exchange = flowtune::alloc::Exchange::kLinkOwners;
  double mpi_gather_threshold = 0;
  std::string metrics;  // ADDR:PORT; empty: off
  std::size_t metrics_max_links = 64;
  std::string config_file;  // --config; empty: none
  std::vector<std::string> cmdline;  // argv, for a reload's parse
  std::map<std::string, std::string> from_file;  // flag -> value, the file's keys in force
};

[[noreturn]] void usage_error(const std::string& msg) {
  flowtune::cli::Args::usage_error("flowtune-allocator", msg);
}

// Flags of the network, the engine and the policy; false when `args` is
// at none of them.
bool parse_engine_flag(flowtune::cli::Args& args, Options& o) {
  using flowtune::alloc::Normalizer;
  if (args.is("--check-config")) o.check_config = true;
  else if (args.is("--mpi")) o.mpi = true;
  else if (args.is("--mpi-exchange")) o.mpi_exchange_flag = args.value();
  else if (args.is("--mpi-gather-threshold")) o.mpi_gather_threshold = args.number(0, 0.5);
  else if (args.is("--listen")) o.listen = args.value();
  else if (args.is("--topology")) o.topology_file = args.value();
  else if (args.is("--host-gbps")) o.host_gbps = args.number(1e-6, 1e6);
  else if (args.is("--hosts")) o.hosts = static_cast<std::uint32_t>(args.count(1u << 24));
  else if (args.is("--spare-hosts")) o.spare_hosts = static_cast<std::uint32_t>(args.count(1u << 24));
  else if (args.is("--unknown-hosts")) o.unknown_hosts = args.value();
  else if (args.is("--threads")) o.alloc.threads = static_cast<unsigned>(args.count(256));
  else if (args.is("--schedule")) {
    o.alloc.schedule = args.choice<flowtune::alloc::Schedule>(
        {{"persistent", flowtune::alloc::Schedule::kPersistent},
         {"team", flowtune::alloc::Schedule::kTeam},
         {"tbb", flowtune::alloc::Schedule::kTbb}});
  }
  else if (args.is("--gamma")) o.alloc.engine.gamma = args.number(0, 1);
  else if (args.is("--norm")) {
    o.alloc.engine.normalizer = args.choice<Normalizer>(
        {{"fnorm", Normalizer::kFNorm}, {"unorm", Normalizer::kUNorm}, {"none", Normalizer::kNone}});
  } else if (args.is("--threshold")) o.alloc.threshold = args.number();
  else if (args.is("--update-interval-us")) o.alloc.update_interval_us = args.count(1'000'000);
  else if (args.is("--early-rates")) o.alloc.early_rates = args.choice<bool>({{"on", true}, {"off", false}});
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
      args.fail("--coflow-policy must be none, stf, sebf or bssi, got '" + v + "'");
    }
  }
  else if (args.is("--coflow-share")) o.alloc.coflow_share = args.number();
  else if (args.is("--coflow-aging-s")) o.alloc.coflow_aging_s = args.number();
  else if (args.is("--max-settle-iterations")) o.alloc.max_settle_iterations = args.count();
  else return false;
  return true;
}

// Flags of limits, security, standby, relays, metrics and operation; false
// when `args` is at none of them.
bool parse_operation_flag(flowtune::cli::Args& args, Options& o) {
  if (args.is("--lease-ms")) o.alloc.lease_us = static_cast<std::uint32_t>(args.count(3'600'000) * 1000);
  else if (args.is("--lease-refresh-ms")) o.alloc.lease_refresh_us = args.count(3'600'000) * 1000;
  else if (args.is("--endpoint-timeout-ms")) o.alloc.endpoint_timeout_us = args.count(86'400'000) * 1000;
  else if (args.is("--max-flows-per-endpoint")) o.alloc.max_flows_per_endpoint = static_cast<std::uint32_t>(args.count(1u << 30));
  else if (args.is("--max-endpoints")) o.alloc.max_endpoints = static_cast<std::uint32_t>(args.count(1u << 24));
  else if (args.is("--max-flows")) o.alloc.max_flows = static_cast<std::uint32_t>(args.count(1u << 30));
  else if (args.is("--max-msg-rate")) o.alloc.max_messages_per_sec = args.number();
  else if (args.is("--max-source-bytes-per-sec")) o.alloc.max_source_bytes_per_sec = args.number(0, 1e12);
  else if (args.is("--max-source-burst-bytes")) o.alloc.source_burst_bytes = args.number(1, 1e12);
  else if (args.is("--max-flows-per-source")) o.alloc.max_flows_per_source = static_cast<std::uint32_t>(args.count(1u << 30));
  else if (args.is("--max-endpoints-per-source")) o.alloc.max_endpoints_per_source = static_cast<std::uint32_t>(args.count(1u << 24));
  else if (args.is("--max-hosts-per-source")) o.alloc.max_hosts_per_source = static_cast<std::uint32_t>(args.count(1u << 24));
  else if (args.is("--log-level")) {
    o.log_level = args.choice<LogLevel>({{"error", LogLevel::kError},
                                         {"warn", LogLevel::kWarn},
                                         {"info", LogLevel::kInfo},
                                         {"debug", LogLevel::kDebug}});
  } else if (args.is("--log-interval-s")) o.log_interval_s = args.number(0, 86400);
  else if (args.is("--busy-poll-us")) o.busy_poll_us = args.count(10'000'000);
  else if (args.is("--curve-secret")) o.auth.secret_file = args.value();
  else if (args.is("--curve-clients")) o.auth.clients_dir = args.value();
  else if (args.is("--curve-ctl")) o.auth.ctl_dir = args.value();
  else if (args.is("--curve-admin")) o.auth.admin_dir = args.value();
  else if (args.is("--standby-of")) o.standby_of = args.value();
  else if (args.is("--witness")) o.witness = args.value();
  else if (args.is("--relay-from")) {
    for (const std::string& item : flowtune::cli::split_commas(args.value())) {
      const auto net = flowtune::parse_cidr(item);
      if (!net) args.fail("--relay-from: '" + item + "' is not an IPv4 address or a.b.c.d/n");
      o.relay_from.push_back(*net);
    }
  }
  else if (args.is("--probe-ms")) o.probe_ms = args.count(60'000);
  else if (args.is("--takeover-ms")) o.takeover_ms = args.count(3'600'000);
  else if (args.is("--role-probes-per-sec")) o.role_probes_per_sec = args.count(100'000'000);
  else if (args.is("--metrics")) o.metrics = args.value();
  else if (args.is("--metrics-max-links")) o.metrics_max_links = args.count(500);

  else return false;
  return true;
}

// The checks across flags; `fail` reports a violation (exits at start,
// throws on a reload).
void check(Options& o, const std::function<void(const std::string&)>& fail) {
  if (o.auth.secret_file.empty() &&
      !(o.auth.clients_dir.empty() && o.auth.ctl_dir.empty() && o.auth.admin_dir.empty())) {
    fail("--curve-clients, --curve-ctl and --curve-admin need --curve-secret");
  }
  if (!o.auth.secret_file.empty() && o.auth.clients_dir.empty()) {
    fail("--curve-secret needs --curve-clients: without it no endpoint could connect");
  }
  if (const std::string why = flowtune::endpoint_port_error(o.listen); !why.empty()) {
    fail("--listen: " + why);
  }
  if (!o.standby_of.empty()) {
    if (const std::string why = flowtune::endpoint_port_error(o.standby_of); !why.empty()) {
      fail("--standby-of: " + why);
    }
    if (o.standby_of == o.listen) fail("--standby-of names this allocator's own --listen");
  }
  if (!o.witness.empty()) {
    if (o.standby_of.empty()) fail("--witness: a witness breaks ties within a standby pair: give --standby-of too");
    if (const std::string why = flowtune::endpoint_port_error(o.witness); !why.empty()) {
      fail("--witness: " + why);
    }
    if (o.witness == o.listen || o.witness == o.standby_of) {
      fail("--witness names an allocator of the pair: the witness runs apart (flowtune-witness)");
    }
  }
  if (!o.metrics.empty()) {
    if (const std::string why = flowtune::metrics::listen_error(o.metrics); !why.empty()) {
      fail("--metrics: " + why);
    }
  }
  if (o.probe_ms == 0) fail("--probe-ms must be at least 1");
  if (o.role_probes_per_sec == 0) fail("--role-probes-per-sec must be at least 1");
  if (o.takeover_ms < 2 * o.probe_ms) {
    fail("--takeover-ms (" + std::to_string(o.takeover_ms) + ") must span at least two probes (--probe-ms " +
                std::to_string(o.probe_ms) + ")");
  }
  if (o.mpi && o.alloc.threads > 1) fail("--mpi runs one thread per rank: leave out --threads");
  if (o.mpi_gather_threshold > 0 && !o.mpi) fail("--mpi-gather-threshold needs --mpi");
  if (!o.mpi_exchange_flag.empty()) {
    if (!o.mpi) fail("--mpi-exchange needs --mpi");
    if (!flowtune::alloc::parse_exchange(o.mpi_exchange_flag, o.mpi_exchange)) {
      fail("--mpi-exchange expects link-owners, neighbors, allreduce or diagonal, got '" +
                  o.mpi_exchange_flag + "'");
    }
  }
  if (o.unknown_hosts.empty()) o.unknown_hosts = o.topology_file.empty() ? "add" : "reject";
  if (o.unknown_hosts == "add") o.alloc.unknown_hosts = UnknownHosts::kAdd;
  else if (o.unknown_hosts == "reject") o.alloc.unknown_hosts = UnknownHosts::kReject;
  else fail("--unknown-hosts expects reject or add, got '" + o.unknown_hosts + "'");
}

// argv's flags as given ("--threads" ...): those the command line sets
// override the config file's.
std::set<std::string> flags_given(const std::vector<std::string>& cmdline) {
  std::set<std::string> out;
  for (std::size_t i = 1; i < cmdline.size(); ++i) {
    if (cmdline[i].rfind("--", 0) == 0) out.insert(cmdline[i]);
  }
  return out;
}

// Parses `argv` (a whole argument vector) into `o`; usage errors exit, or
// throw cli::UsageError when `reload`.
void parse_args(const std::vector<std::string>& argv, bool reload, Options& o) {
  std::vector<char*> ptrs;
  for (const std::string& a : argv) ptrs.push_back(const_cast<char*>(a.c_str()));
  flowtune::cli::Args args("flowtune-allocator", kUsage, static_cast<int>(ptrs.size()), ptrs.data());
  args.throw_on_error(reload);
  while (args.next()) {
    if (args.is("--config")) {
      o.config_file = args.value();
      continue;
    }
    if (!parse_engine_flag(args, o) && !parse_operation_flag(args, o)) args.unknown();
  }
}

// --config FILE's keys, as flags, except those the command line gives.
void apply_config_file(const std::string& path, const std::set<std::string>& given, Options& o) {
  for (const ConfigEntry& e : read_config_file(path)) {
    if (given.count(e.flag) > 0) continue;
    std::vector<std::string> one = {"flowtune-allocator", e.flag};
    if (!e.is_switch) one.push_back(e.value);
    try {
      parse_args(one, true, o);
    } catch (const flowtune::cli::UsageError& u) {
      throw ConfigError(where(path, e) + ": " + u.what());
    }
    o.from_file[e.flag] = e.value;
  }
}

// The whole configuration: the config file (if any), then the command
// line over it, then the checks. At start (reload false) a usage error
// exits with status 2 as before; on a reload every error throws.
Options parse_all(const std::vector<std::string>& cmdline, bool reload) {
  Options o;
  o.cmdline = cmdline;
  for (std::size_t i = 1; i + 1 < cmdline.size(); ++i) {
    if (cmdline[i] == "--config") o.config_file = cmdline[i + 1];
  }
  const std::set<std::string> given = flags_given(cmdline);
  if (!o.config_file.empty()) {
    apply_config_file(o.config_file, given, o);
    // A list the command line gives replaces the file's.
    if (given.count("--relay-from") > 0) o.relay_from.clear();
  }
  parse_args(cmdline, reload, o);
  check(o, [reload](const std::string& why) {
    if (reload) throw ConfigError(why);
    usage_error(why);
  });
  return o;
}

Options parse(int argc, char** argv) { return parse_all(std::vector<std::string>(argv, argv + argc), false); }

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

// mpi_ranks: with --mpi, the ranks the engine runs across (else 0).
std::string describe(const Options& o, const Network& n, const Allocator& a, int mpi_ranks) {
  const auto& t = n.topology();
  std::string s = o.config_file.empty() ? std::string() : "config " + o.config_file + "; ";
  s += "network: " + std::to_string(n.num_hosts()) + " hosts";
  if (n.spare_slots() > 0) s += " (+" + std::to_string(n.spare_slots()) + " spare)";
  s += ", " + std::to_string(t.num_links()) + " links";
  s += o.topology_file.empty() ? " (big switch, " + std::to_string(o.host_gbps) + " Gbit/s hosts)"
                               : " from " + o.topology_file;
  s += "; engine: NED gamma " + std::to_string(o.alloc.engine.gamma) + ", " +
       flowtune::alloc::to_string(o.alloc.engine.normalizer) + ", " +
       std::to_string(o.alloc.threads) + " thread(s)" +
       (o.alloc.threads > 1 ? std::string(" (") + flowtune::alloc::to_string(o.alloc.schedule) + ")"
                            : std::string()) +
       ", " + a.engine().kernel_name() + " kernels";
  if (mpi_ranks > 0) {
    s += ", across " + std::to_string(mpi_ranks) + " MPI ranks (" +
         std::to_string(a.engine().num_blocks()) + " FlowBlocks, " +
         flowtune::alloc::to_string(o.mpi_exchange) + " exchange" +
         (o.mpi_gather_threshold > 0 ? ", gather threshold " + std::to_string(o.mpi_gather_threshold)
                                     : std::string()) +
         ")";
  }
  s += "; threshold " + std::to_string(o.alloc.threshold) + ", headroom " +
       std::to_string(o.alloc.headroom) + ", early rates " +
       (o.alloc.early_rates ? "on" : "off") + "; unknown hosts: " + o.unknown_hosts;
  const AllocatorConfig& c = a.config();
  s += "; classes: default " + std::to_string(c.default_class) + ", top " +
       std::to_string(c.top_class) + ", reserve " + std::to_string(c.engine.class_reserve);
  if (c.coflow_policy != flowtune::alloc::CoflowPolicy::kNone) {
    s += std::string("; coflows: ") + flowtune::alloc::to_string(c.coflow_policy) + ", share " +
         std::to_string(c.coflow_share) +
         (c.coflow_aging_s > 0 ? ", aging " + std::to_string(c.coflow_aging_s) + " s" : "");
  }
  if (!o.policy_file.empty()) {
    s += "; policy " + o.policy_file + ": " + std::to_string(c.policy.tenants.size()) +
         " tenants, " + std::to_string(c.policy.rules.size()) + " rules";
  }
  if (!o.standby_of.empty()) {
    s += "; standby pair with " + o.standby_of + " (probe " + std::to_string(o.probe_ms) + " ms, takeover " +
         std::to_string(o.takeover_ms) + " ms" + (o.witness.empty() ? "" : ", witness " + o.witness) + ")";
  }
  s += "; relays from " + (o.relay_from.empty() ? std::string("no address") :
                           std::to_string(o.relay_from.size()) + " network(s)");
  return s;
}

// SIGHUP or flowtune-ctl reload: the policy file and the key lists again.
// What does not load leaves the running one as it was; the result says
// what happened.
Server::Reload reload_policy(const Options& o, Allocator& allocator) {
  if (o.policy_file.empty()) return {true, "policy: no --policy file; nothing changed"};
  try {
    const OperatorPolicy p = load_policy_file(o.policy_file);
    allocator.set_policy(p);
    return {true, "policy re-read from " + o.policy_file + ": " + std::to_string(p.tenants.size()) +
                      " tenants, " + std::to_string(p.rules.size()) + " rules"};
  } catch (const ConfigError& e) {
    return {false, std::string("policy refused, the old one stays: ") + e.what()};
  }
}

Server::Reload reload_files(const Options& o, Allocator& allocator, Server& server) {
  Server::Reload r = reload_policy(o, allocator);
  if (o.auth.enabled()) {
    const Server::Reload k = server.reload_keys();
    r = {r.ok && k.ok, r.text + "; " + k.text};
  }
  return r;
}

// Keys of the config file a reload applies: the policy file (re-read
// anyway) and the count limits (Allocator::set_limits). Any other key
// that changed needs a restart.
bool reloadable(const std::string& flag) {
  static const std::set<std::string> kReloadable = {
      "--policy", "--max-endpoints", "--max-flows", "--max-flows-per-endpoint",
      "--max-flows-per-source", "--max-endpoints-per-source", "--max-hosts-per-source"};
  return kReloadable.count(flag) > 0;
}

// SIGHUP or flowtune-ctl reload with --config: the file again, with the
// same command line over it. A file that does not parse or check leaves
// everything as it was; keys that need a restart are named and keep their
// running values; then the policy and key lists are re-read as without
// --config.
Server::Reload reload_config(Options& running, Allocator& allocator, Server& server) {
  Options next;
  try {
    next = parse_all(running.cmdline, true);
    if (!next.policy_file.empty()) (void)load_policy_file(next.policy_file);
  } catch (const std::exception& e) {
    return {false, "config " + running.config_file + " refused, the running configuration stays: " + e.what()};
  }
  std::set<std::string> keys;
  for (const auto& [k, v] : running.from_file) keys.insert(k);
  for (const auto& [k, v] : next.from_file) keys.insert(k);
  std::string applied, restart;
  for (const std::string& k : keys) {
    const auto was = running.from_file.find(k), now = next.from_file.find(k);
    if (was != running.from_file.end() && now != next.from_file.end() && was->second == now->second) continue;
    std::string& list = reloadable(k) ? applied : restart;
    list += (list.empty() ? "" : ", ") + k.substr(2);
  }
  try {
    allocator.set_limits(next.alloc);
  } catch (const ConfigError& e) {
    return {false, "config " + running.config_file + ": limits refused, the running ones stay: " + e.what()};
  }
  running.policy_file = next.policy_file;
  for (const auto& [k, v] : next.from_file) {
    if (reloadable(k)) running.from_file[k] = v;
  }
  for (auto it = running.from_file.begin(); it != running.from_file.end();) {
    it = reloadable(it->first) && next.from_file.count(it->first) == 0 ? running.from_file.erase(it) : std::next(it);
  }
  const Server::Reload files = reload_files(running, allocator, server);
  std::string text = "config " + running.config_file + " re-read: " + (applied.empty() ? "no reloadable key changed" : "applied " + applied);
  if (!restart.empty()) text += "; needs a restart, the running value stays: " + restart;
  return {files.ok, text + "; " + files.text};
}

Server::Reload reload(Options& running, Allocator& allocator, Server& server) {
  return running.config_file.empty() ? reload_files(running, allocator, server)
                                     : reload_config(running, allocator, server);
}

// Every endpoint holds a connection, and so a descriptor: the usual soft
// limit (1,024) would refuse connections long before --max-endpoints. Raise
// it to the hard limit, and say when even that is short.
void raise_descriptor_limit(const Options& o, Log& log) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  if (lim.rlim_cur < lim.rlim_max) {
    const rlim_t was = lim.rlim_cur;
    lim.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) lim.rlim_cur = was;
  }
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < o.alloc.max_endpoints + 64) {
    log.write(LogLevel::kWarn, "only " + std::to_string(lim.rlim_cur) +
                                   " file descriptors (ulimit -n): fewer endpoints than --max-endpoints (" +
                                   std::to_string(o.alloc.max_endpoints) + ") can connect at once");
  }
}

// --metrics: the exposer, whose collector asks this allocator over its own
// listener (metrics.h); empty when off.
flowtune::metrics::Exposition start_metrics(const Options& o, zmq::context_t& ctx, const Server& server,
                                            Log& log) {
  if (o.metrics.empty()) return {};
  std::optional<flowtune::curve::ClientKeys> keys;
  if (o.auth.enabled()) {
    flowtune::Result<flowtune::curve::KeyPair> own =
        flowtune::curve::load_key_file(o.auth.secret_file, true);
    if (!own) {
      throw ConfigError("--metrics: the allocator's own key (--curve-secret): " +
                        own.error().message);
    }
    keys.emplace();
    keys->own = std::move(own).value();
    keys->server_public = keys->own.public_key;
  }
  auto collector = std::make_shared<flowtune::metrics::ControlCollector>(
      ctx, server.bound_endpoint(), allocator_metric_requests(o.metrics_max_links), allocator_up_spec(),
      allocator_metric_rows(), 1000, keys ? &*keys : nullptr);
  try {
    flowtune::metrics::Exposition e = flowtune::metrics::expose("--metrics", o.metrics, std::move(collector));
    log.write(LogLevel::kInfo, "metrics on http://" + o.metrics + "/metrics (port " + std::to_string(e.port()) + ")");
    return e;
  } catch (const std::runtime_error& e) {
    throw ConfigError(e.what());
  }
}

// --mpi: every rank builds the same Allocator (so the same engine); rank 0
// serves and leads each iteration, the others follow it until it finishes.
struct Mpi {
  // exchange: --mpi-exchange; gather: --mpi-gather-threshold, the same on
  // every rank.
  Mpi(bool on, flowtune::alloc::Exchange exchange, double gather) {
    if (!on) return;
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    try {
      driver = std::make_unique<flowtune::alloc::MpiDriver>(MPI_COMM_WORLD, exchange);
    } catch (const std::invalid_argument& e) {
      // Every rank refuses alike; MPI ends cleanly before the error is told.
      MPI_Finalize();
      throw ConfigError(std::string("--mpi-exchange ") + flowtune::alloc::to_string(exchange) + ": " + e.what());
    }
    driver->set_gather_threshold(gather);
  }
  ~Mpi() {
    if (!driver) return;
    driver.reset();
    MPI_Finalize();
  }
  bool follower() const { return driver && driver->rank() != 0; }
  std::unique_ptr<flowtune::alloc::MpiDriver> driver;
};

// A rank other than 0: the signals (blocked, as on every rank) are rank
// 0's to act on; it ends the run with finish(), and a follower leaves with it.
int follow(Mpi& mpi, Allocator& allocator, Log& log) {
  if (mpi.driver->follow(allocator.mirror_engine())) return 0;
  log.write(LogLevel::kError, "MPI rank " + std::to_string(mpi.driver->rank()) +
                                  ": the engine's changes did not replay here; rank 0 stops");
  return 1;
}

// --check-config's account of the CURVE keys ("" with CURVE off); throws
// ConfigError when they do not load.
std::string check_keys(const Options& o) {
  if (!o.auth.enabled()) return {};
  if (const flowtune::Result<flowtune::curve::KeyPair> own =
          flowtune::curve::load_key_file(o.auth.secret_file, true);
      !own) {
    throw ConfigError("--curve-secret: " + own.error().message);
  }
  const KeyRing ring = KeyRing::load(o.auth);
  return "; CURVE: " + std::to_string(ring.count(kRoleEndpoint)) + " endpoint keys, " +
         std::to_string(ring.count(kRoleRead)) + " ctl keys (" +
         std::to_string(ring.count(kRoleAdmin)) + " admin)";
}

// The start-up line, and a warning when policy rules match keys that
// cannot be told without CURVE.
void log_start(const Options& o, Log& log, const Server& server, const Allocator& allocator,
               const std::string& summary) {
  std::string auth = "; authentication: none";
  if (const AuthInfo& a = server.auth_info(); a.on) {
    auth = "; authentication: CURVE, " + std::to_string(a.endpoint_keys) + " endpoint keys, " +
           std::to_string(a.reader_keys) + " ctl keys (" + std::to_string(a.admin_keys) + " admin)";
  }
  log.write(LogLevel::kInfo, "listening on " + server.bound_endpoint() + "; epoch " +
                                 std::to_string(allocator.epoch()) + "; " + summary + auth);
  if (o.auth.enabled()) return;
  for (const PolicyRule& r : allocator.config().policy.rules) {
    if (r.keys.empty()) continue;
    log.write(LogLevel::kWarn, o.policy_file + ":" + std::to_string(r.line) +
                                   ": a rule matching keys never matches without --curve-secret");
    break;
  }
}

int run(const Options& o) {
  // Signals arrive on an fd the loop polls; blocked before any thread
  // starts (common/signals.h).
  const sigset_t mask = flowtune::block_daemon_signals();
  Mpi mpi(o.mpi, o.mpi_exchange, o.mpi_gather_threshold);
  Log log(Log::stderr_sink(), o.log_level, static_cast<std::uint64_t>(o.log_interval_s * 1e6));
  Network network = build_network(o);
  if (mpi.driver) mpi.driver->set_link_sites(network.topology().link_sites());
  AllocatorConfig config = o.alloc;
  config.view_slack = o.mpi_gather_threshold;
  if (!o.policy_file.empty()) config.policy = load_policy_file(o.policy_file);
  if (mpi.driver) {
    config.engine_blocks = static_cast<std::uint32_t>(
        std::min(64.0, std::ceil(std::sqrt(static_cast<double>(mpi.driver->ranks())))));
    if (!mpi.follower()) {
      config.iterate_elsewhere = [d = mpi.driver.get()](flowtune::alloc::Engine& e,
                                                        std::vector<std::uint8_t>* journal) {
        d->lead(e, journal);
      };
    }
  }
  Allocator allocator(std::move(network), config, new_epoch(), &log);
  if (mpi.follower() && !o.check_config) return follow(mpi, allocator, log);
  // Whatever way rank 0 leaves, the followers leave with it.
  struct Finish {
    flowtune::alloc::MpiDriver* d;
    ~Finish() {
      if (d != nullptr) d->finish();
    }
  } finish{o.check_config ? nullptr : mpi.driver.get()};
  const std::string summary = describe(o, allocator.network(), allocator, mpi.driver ? mpi.driver->ranks() : 0);
  if (o.check_config) {
    std::cout << "configuration ok: " << summary << check_keys(o) << "\n";
    return 0;
  }
  const int sfd = signalfd(-1, &mask, SFD_CLOEXEC);
  if (sfd < 0) throw ConfigError(std::string("signalfd: ") + std::strerror(errno));

  raise_descriptor_limit(o, log);
  Options running = o;  // what a reload may change (reload_config)
  zmq::context_t ctx(1);
  Server server(ctx, allocator, log, o.listen, o.busy_poll_us, o.auth);
  server.set_reload([&] { return reload(running, allocator, server); });
  server.set_relay_from(o.relay_from);
  server.set_role_probe_rate(static_cast<double>(o.role_probes_per_sec));
  if (!o.standby_of.empty()) {
    server.enable_standby(ctx, {o.standby_of, o.probe_ms * 1000, o.takeover_ms * 1000, new_epoch(), new_epoch,
                                o.witness});
  }
  const flowtune::metrics::Exposition metrics = start_metrics(o, ctx, server, log);
  log_start(o, log, server, allocator, summary);
  int sig = 0;
  while ((sig = server.run(sfd)) == SIGHUP) {
    const Server::Reload r = reload(running, allocator, server);
    log.write(r.ok ? LogLevel::kInfo : LogLevel::kError, "SIGHUP: " + r.text);
  }
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
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const ConfigError& e) {  // the config file's (read_config_file, a key's value)
    std::cerr << "flowtune-allocator: " << e.what() << "\n";
    return kExitConfig;
  }
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
