// flowtune-relay: see include/flowtune/relay/relay.h. Configuration errors
// exit with status 2 and the reason; SIGINT/SIGTERM stop it (status 0).
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>

#include "flowtune/common/cli.h"
#include "flowtune/common/signals.h"
#include "flowtune/metrics/control_collector.h"
#include "flowtune/metrics/exposer.h"
#include "flowtune/relay/metrics.h"
#include "flowtune/relay/relay.h"

namespace {

constexpr const char* kUsage = R"(usage: flowtune-relay [options]

Endpoints (libflowtune, flowtune-run) of a rack talk to this relay as they
would to flowtune-allocator; it forwards what they say upstream in batches
and brings the answers back, so the allocator holds one connection per
relay instead of one per endpoint. Relays stack: --upstream may be another
relay. flowtune-ctl --allocator ENDPOINT status shows its counters.

  --listen ENDPOINT     endpoints connect here (default tcp://0.0.0.0:5556)
  --upstream ENDPOINT[,ENDPOINT]
                        the allocator, or the relay above (default
                        tcp://127.0.0.1:5555); a standby pair's two
                        endpoints (allocator --standby-of): the relay
                        asks both their role and follows the active one
  --max-batch N         endpoint messages per upstream message, 1-1024
                        (default 1024); a full batch goes at once
  --batch-us US         the longest an endpoint message waits for the batch
                        it goes up in (default 500; 0: send what arrived
                        together at once). Longer batches cost the
                        allocator fewer turns and add up to US to a
                        start's first rate
  --heartbeat-ms MS     ZeroMQ liveness checks of the upstream connection
                        (default 1000)
  --curve-server KEY    the allocator's public key (Z85, or its .pub file):
                        speak CURVE upstream (default $FLOWTUNE_CURVE_SERVER)
  --curve-key FILE      this relay's key pair (default $FLOWTUNE_CURVE_KEY,
                        or $FLOWTUNE_CURVE_SECRET): an endpoint key in the
                        allocator's --curve-clients whose hosts are the
                        ones behind this relay (docs/security.md)
  --curve-secret FILE   endpoints (and relays below) must speak CURVE to
                        this key pair (it may be the --curve-key file).
                        Each message goes up with the key it came with,
                        and the allocator checks it: this relay's key
                        there needs `relay = true`. Without it endpoints
                        talk to the relay in plain text
  --curve-clients DIR   with --curve-secret: only the endpoint keys in DIR
                        may connect (NAME.pub files as the allocator's
                        --curve-clients reads them; a relay below needs
                        `relay = true`, and every key of its batches'
                        chains must be listed too). Without it any key
                        connects and the allocator refuses what it does
                        not list. Re-read on SIGHUP (a list that does not
                        load leaves the old one)
  --curve-ctl DIR       with --curve-secret: keys that may only ask this
                        relay's status (flowtune-ctl); re-read on SIGHUP
  --probe-ms MS         with a standby pair: how often each is asked its
                        role (default 100); a takeover reaches the relay
                        within about 3 probes
  --metrics ADDR:PORT   serve Prometheus metrics at http://ADDR:PORT/metrics,
                        read from this relay's status (off by default;
                        docs/operate.md). With --curve-secret and an
                        allow-list, its own public key must be in --curve-ctl
  -h, --help            show this help

signals: SIGINT/SIGTERM stop it; SIGHUP re-reads --curve-clients and
--curve-ctl.
exit status: 0 after SIGINT/SIGTERM, 2 on a configuration error.
)";

// The command line: the relay's configuration and where to serve metrics
// (empty: nowhere). A bad flag ends the program (cli::Args::fail).
struct Options {
  flowtune::relay::Config c;
  std::string metrics_at;
};

Options parse(int argc, char** argv) {
  Options o;
  flowtune::relay::Config& c = o.c;
  std::string& metrics_at = o.metrics_at;
  std::string curve_server, curve_key, curve_secret;
  flowtune::cli::Args args("flowtune-relay", kUsage, argc, argv);
  while (args.next()) {
    if (args.is("--listen")) c.listen = args.value();
    else if (args.is("--upstream")) {
      c.upstream.clear();
      for (const std::string& ep : flowtune::cli::split_commas(args.value())) {
        if (ep.empty()) args.fail("--upstream: an empty endpoint in the list");
        c.upstream.push_back(ep);
      }
    }
    else if (args.is("--probe-ms")) c.probe_ms = static_cast<std::uint32_t>(args.count(60'000));
    else if (args.is("--curve-server")) curve_server = args.value();
    else if (args.is("--curve-key")) curve_key = args.value();
    else if (args.is("--curve-secret")) curve_secret = args.value();
    else if (args.is("--curve-clients")) c.clients_dir = args.value();
    else if (args.is("--curve-ctl")) c.ctl_dir = args.value();
    else if (args.is("--max-batch")) c.max_batch = args.count(1024);
    else if (args.is("--batch-us")) c.batch_us = args.count(1'000'000);
    else if (args.is("--heartbeat-ms")) c.heartbeat_ms = static_cast<std::uint32_t>(args.count(3'600'000));
    else if (args.is("--metrics")) metrics_at = args.value();
    else args.unknown();
  }
  if (!metrics_at.empty()) {
    if (const std::string why = flowtune::metrics::listen_error(metrics_at); !why.empty()) {
      args.fail("--metrics: " + why);
    }
  }
  auto curve = flowtune::curve::client_keys(curve_server, curve_key);
  if (!curve) args.fail("CURVE: " + curve.error().message);
  if (curve->on) c.curve = curve->keys;
  if (!curve_secret.empty()) {
    flowtune::Result<flowtune::curve::KeyPair> own =
        flowtune::curve::load_key_file(curve_secret, true);
    if (!own) args.fail("--curve-secret: " + own.error().message);
    if (!curve->on) {
      args.fail(
          "--curve-secret: endpoints' keys mean something only to an allocator that "
          "speaks CURVE: give --curve-server too");
    }
    c.listen_key = *own;
  }
  if ((!c.clients_dir.empty() || !c.ctl_dir.empty()) && !c.listen_key) {
    args.fail(std::string(c.clients_dir.empty() ? "--curve-ctl" : "--curve-clients") +
              ": an allow-list judges CURVE keys: give --curve-secret too");
  }
  return o;
}

// The Prometheus endpoint at `at`: it asks this relay's status as
// flowtune-ctl would, with the relay's own key when CURVE is on downstream.
flowtune::metrics::Exposition expose_metrics(zmq::context_t& ctx, const flowtune::relay::Relay& relay,
                                             const flowtune::relay::Config& c, const std::string& at) {
  std::optional<flowtune::curve::ClientKeys> own;
  if (c.listen_key) own = flowtune::curve::ClientKeys{c.listen_key->public_key, *c.listen_key, {}};
  flowtune::metrics::Exposition metrics = flowtune::metrics::expose(
      "--metrics", at,
      std::make_shared<flowtune::metrics::ControlCollector>(
          ctx, relay.bound_endpoint(), std::vector<std::string>{"status"}, flowtune::relay::relay_up_spec(),
          flowtune::relay::relay_metric_rows(), 1000, own ? &*own : nullptr));
  std::cerr << "flowtune-relay: metrics on http://" << at << "/metrics (port " << metrics.port() << ")"
            << std::endl;
  return metrics;
}

// Runs the relay until SIGINT or SIGTERM (SIGHUP reloads the allow-lists);
// 2 when it cannot start.
int serve(const Options& o, int sfd) {
  const flowtune::relay::Config& c = o.c;
  try {
    zmq::context_t ctx(1);
    flowtune::relay::Relay relay(ctx, c);
    std::string ups;
    for (const auto& ep : c.upstream) ups += (ups.empty() ? "" : ",") + ep;
    std::cerr << "flowtune-relay: listening on " << relay.bound_endpoint() << "; upstream " << ups << std::endl;
    flowtune::metrics::Exposition metrics;
    if (!o.metrics_at.empty()) metrics = expose_metrics(ctx, relay, c, o.metrics_at);
    if (relay.listed_keys() > 0 || !c.clients_dir.empty() || !c.ctl_dir.empty()) {
      std::cerr << "flowtune-relay: allow-list of " << relay.listed_keys() << " keys" << std::endl;
    }
    int sig;
    while ((sig = relay.run(sfd)) == SIGHUP) {
      const std::string why = relay.reload();
      if (c.clients_dir.empty() && c.ctl_dir.empty()) {
        std::cerr << "flowtune-relay: SIGHUP: no allow-list to read (--curve-clients, --curve-ctl)" << std::endl;
      } else if (why.empty()) {
        std::cerr << "flowtune-relay: SIGHUP: allow-list of " << relay.listed_keys() << " keys" << std::endl;
      } else {
        std::cerr << "flowtune-relay: SIGHUP: the allow-list stays as it was: " << why << std::endl;
      }
    }
    const auto& k = relay.counters();
    std::cerr << "flowtune-relay: stopping on " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ": "
              << k.messages_up << " messages up in " << k.batches_up << " batches, " << k.messages_down
              << " down, " << k.dropped << " dropped" << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "flowtune-relay: " << e.what() << "\n";
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const int sfd = flowtune::daemon_signal_fd();
  if (sfd < 0) {
    std::cerr << "flowtune-relay: signalfd: " << std::strerror(errno) << "\n";
    return 2;
  }
  const int status = serve(o, sfd);
  if (status == 0) ::close(sfd);
  return status;
}
