// A ZeroMQ endpoint's port, checked before it is bound or connected:
// libzmq keeps only the low 16 bits of a TCP port, so "tcp://h:99999"
// binds or dials port 34463 and says nothing.
#pragma once

#include <string>
#include <string_view>

namespace flowtune {

// Empty if `endpoint` is usable as far as its port goes; else why not. A
// tcp:// endpoint must end in ":PORT" with PORT decimal 0-65535 or "*"
// (any); other transports (ipc://, inproc://) have no port to check.
inline std::string endpoint_port_error(std::string_view endpoint) {
  constexpr std::string_view kTcp = "tcp://";
  if (endpoint.substr(0, kTcp.size()) != kTcp) return {};
  const std::size_t colon = endpoint.rfind(':');
  if (colon == std::string_view::npos || colon < kTcp.size()) {
    return "'" + std::string(endpoint) + "' names no port (tcp://HOST:PORT)";
  }
  const std::string_view port = endpoint.substr(colon + 1);
  if (port == "*") return {};
  unsigned long v = 0;
  bool ok = !port.empty() && port.size() <= 5;
  for (const char c : port) {
    ok = ok && c >= '0' && c <= '9';
    if (ok) v = v * 10 + static_cast<unsigned long>(c - '0');
  }
  if (!ok || v > 65535) {
    return "'" + std::string(endpoint) + "': port '" + std::string(port) +
           "' is not 0-65535 or *";
  }
  return {};
}

}  // namespace flowtune
