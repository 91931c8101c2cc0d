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

// Listens on addr_port and serves `source` at /metrics. Throws
// std::runtime_error naming `flag` and the address when it cannot (a bad
// address, the port in use).
std::unique_ptr<prometheus::Exposer> expose(const std::string& flag, const std::string& addr_port,
                                            const std::shared_ptr<prometheus::Collectable>& source);

// The port actually bound (for ADDR:0 in tests), or 0.
int bound_port(const prometheus::Exposer& e);

}  // namespace flowtune::metrics
