// --metrics ADDR:PORT: the daemon's /metrics over HTTP, served by
// prometheus-cpp's pull exposer (civetweb threads of its own). The daemon
// hands it one Collectable, asked on every scrape.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>

namespace flowtune::metrics {

// Empty when `addr_port` is an IPv4 address (or a bracketed IPv6 one) and
// a port 1..65535, e.g. 127.0.0.1:9464; else why not.
std::string listen_error(std::string_view addr_port);

// The exposer and what it serves: the exposer holds its source weakly,
// so both live here, and the exposer (its threads) ends first.
struct Exposition {
  std::shared_ptr<prometheus::Collectable> source;
  std::unique_ptr<prometheus::Exposer> exposer;
  // The port actually bound (ADDR:0 takes a free one), or 0 when off.
  int port() const;
};

// Listens on addr_port and serves `source` at /metrics. Throws
// std::runtime_error naming `flag` and the address when it cannot (a bad
// address, the port in use).
Exposition expose(const std::string& flag, const std::string& addr_port,
                  std::shared_ptr<prometheus::Collectable> source);

}  // namespace flowtune::metrics
