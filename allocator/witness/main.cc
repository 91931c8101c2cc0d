// flowtune-witness: see include/flowtune/witness/witness.h. Configuration
// errors exit with status 2 and the reason; SIGINT/SIGTERM stop it (status
// 0); SIGHUP re-reads --curve-clients.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>

#include "flowtune/common/cli.h"
#include "flowtune/common/signals.h"
#include "flowtune/common/curve.h"
#include "flowtune/metrics/control_collector.h"
#include "flowtune/metrics/exposer.h"
#include "flowtune/witness/metrics.h"
#include "flowtune/witness/witness.h"

namespace {

constexpr const char* kUsage = R"(usage: flowtune-witness [options]

The third voice of a hot standby pair (flowtune-allocator --standby-of ...
--witness ENDPOINT): an allocator takes over from a silent peer only while
it holds the pair's lease here, and an active one that hears neither this
witness nor its peer stands down before its lease runs out, so a partition
between the two allocators leaves at most one of them serving. Run it on
a third machine. flowtune-ctl --allocator ENDPOINT status shows its lease.

  --listen ENDPOINT       the pair claims here (default tcp://0.0.0.0:5557)
  --curve-secret FILE     speak CURVE with this key pair: the pair's own
                          --curve-secret (they speak to it as to each other)
  --curve-clients DIR     with --curve-secret: the keys that may claim or
                          ask (NAME.pub files, as flowtune-ctl's lists; the
                          pair's public key, and operators'); re-read on
                          SIGHUP
  --claims-per-sec N      claims answered a second, with a second's burst
                          (default 1000); past it they are told to retry,
                          which the pair reads as the witness's silence
  --metrics ADDR:PORT     serve Prometheus metrics at http://ADDR:PORT/metrics,
                          read from this witness's status (off by default;
                          docs/operate.md). With CURVE, its own public key
                          must be in --curve-clients
  -h, --help              show this help

signals: SIGINT/SIGTERM stop it; SIGHUP re-reads --curve-clients.
exit status: 0 after SIGINT/SIGTERM, 2 on a configuration error.
)";

// --metrics: the witness's status, asked as flowtune-ctl asks it (with
// the witness's own key under CURVE); empty when off.
flowtune::metrics::Exposition start_metrics(zmq::context_t& ctx, const flowtune::witness::Config& c,
                                            const std::string& endpoint, const std::string& at) {
  if (at.empty()) return {};
  std::optional<flowtune::curve::ClientKeys> own;
  if (!c.secret_file.empty()) {
    flowtune::Result<flowtune::curve::KeyPair> key =
        flowtune::curve::load_key_file(c.secret_file, true);
    if (!key) {
      throw std::runtime_error("--metrics: the witness's own key (--curve-secret): " +
                               key.error().message);
    }
    own.emplace();
    own->own = std::move(key).value();
    own->server_public = own->own.public_key;
  }
  flowtune::metrics::Exposition e = flowtune::metrics::expose(
      "--metrics", at,
      std::make_shared<flowtune::metrics::ControlCollector>(ctx, endpoint, std::vector<std::string>{"status"},
                                                            flowtune::witness::witness_up_spec(),
                                                            flowtune::witness::witness_metric_rows(), 1000,
                                                            own ? &*own : nullptr));
  std::cerr << "flowtune-witness: metrics on http://" << at << "/metrics (port " << e.port() << ")" << std::endl;
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  flowtune::witness::Config c;
  std::string metrics_at;
  flowtune::cli::Args args("flowtune-witness", kUsage, argc, argv);
  while (args.next()) {
    if (args.is("--listen")) c.listen = args.value();
    else if (args.is("--curve-secret")) c.secret_file = args.value();
    else if (args.is("--curve-clients")) c.clients_dir = args.value();
    else if (args.is("--claims-per-sec")) c.claims_per_sec = args.number(1, 1e6);
    else if (args.is("--metrics")) metrics_at = args.value();
    else args.unknown();
  }
  if (!metrics_at.empty()) {
    if (const std::string why = flowtune::metrics::listen_error(metrics_at); !why.empty()) {
      args.fail("--metrics: " + why);
    }
  }
  const int sfd = flowtune::daemon_signal_fd();
  if (sfd < 0) {
    std::cerr << "flowtune-witness: signalfd: " << std::strerror(errno) << "\n";
    return 2;
  }
  try {
    zmq::context_t ctx(1);
    flowtune::witness::Witness w(ctx, c);
    std::cerr << "flowtune-witness: listening on " << w.bound_endpoint() << std::endl;
    const flowtune::metrics::Exposition metrics = start_metrics(ctx, c, w.bound_endpoint(), metrics_at);
    int sig;
    while ((sig = w.run(sfd)) == SIGHUP) {
      const std::string why = w.reload();
      std::cerr << "flowtune-witness: SIGHUP: "
                << (c.clients_dir.empty() ? "no allow-list to read"
                                          : why.empty() ? "allow-list read" : "the allow-list stays as it was: " + why)
                << std::endl;
    }
    const auto& k = w.counters();
    std::cerr << "flowtune-witness: stopping on " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ": " << k.claims
              << " claims, " << k.grants << " granted, " << k.refusals << " refused" << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "flowtune-witness: " << e.what() << "\n";
    return 2;
  }
  ::close(sfd);
  return 0;
}
