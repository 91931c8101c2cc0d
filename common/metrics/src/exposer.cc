#include "flowtune/metrics/exposer.h"

#include <arpa/inet.h>

#include <charconv>
#include <stdexcept>

namespace flowtune::metrics {

std::string listen_error(std::string_view addr_port) {
  const std::size_t colon = addr_port.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return "'" + std::string(addr_port) + "' is not ADDR:PORT (e.g. 127.0.0.1:9464)";
  }
  std::string addr(addr_port.substr(0, colon));
  const std::string_view port = addr_port.substr(colon + 1);
  unsigned value = 0;
  const auto r = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || r.ec != std::errc() || r.ptr != port.data() + port.size() || value > 65535) {
    return "'" + std::string(port) + "' is not a port (0..65535)";
  }
  in6_addr buf{};
  const bool v6 = addr.size() > 2 && addr.front() == '[' && addr.back() == ']' &&
                  ::inet_pton(AF_INET6, addr.substr(1, addr.size() - 2).c_str(), &buf) == 1;
  if (!v6 && ::inet_pton(AF_INET, addr.c_str(), &buf) != 1) {
    return "'" + addr + "' is not an IPv4 address or a bracketed IPv6 one";
  }
  return {};
}

Exposition expose(const std::string& flag, const std::string& addr_port,
                  std::shared_ptr<prometheus::Collectable> source) {
  if (const std::string why = listen_error(addr_port); !why.empty()) {
    throw std::runtime_error(flag + ": " + why);
  }
  Exposition e;
  e.source = std::move(source);
  try {
    // One worker thread: scrapes are rare and each asks the daemon once.
    e.exposer = std::make_unique<prometheus::Exposer>(addr_port, 1);
  } catch (const std::exception& ex) {
    throw std::runtime_error(flag + ": cannot listen on " + addr_port + ": " + ex.what());
  }
  e.exposer->RegisterCollectable(e.source);
  return e;
}

int Exposition::port() const {
  if (!exposer) return 0;
  const std::vector<int> ports = exposer->GetListeningPorts();
  return ports.empty() ? 0 : ports.front();
}

}  // namespace flowtune::metrics
