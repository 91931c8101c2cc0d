// A ZeroMQ endpoint's port, checked before it is bound or connected:
// libzmq keeps only the low 16 bits of a TCP port, so "tcp://h:99999"
// binds or dials port 34463 and says nothing.
#pragma once

#include <string>
#include <string_view>

namespace flowtune {

namespace detail {
// One "HOST:PORT" part (the peer, or the source before ';').
inline std::string port_error(std::string_view endpoint, std::string_view part) {
  const std::size_t colon = part.rfind(':');
  if (colon == std::string_view::npos) {
    return "'" + std::string(endpoint) + "' names no port (tcp://HOST:PORT)";
  }
  const std::string_view port = part.substr(colon + 1);
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
}  // namespace detail

// Empty if `endpoint` is usable as far as its ports go; else why not. A
// tcp:// endpoint must end in ":PORT" with PORT decimal 0-65535 or "*"
// (any), and so must a source address before ';' ("tcp://SRC:PORT;HOST:PORT");
// other transports (ipc://, inproc://) have no port to check.
inline std::string endpoint_port_error(std::string_view endpoint) {
  constexpr std::string_view kTcp = "tcp://";
  if (endpoint.substr(0, kTcp.size()) != kTcp) return {};
  const std::string_view rest = endpoint.substr(kTcp.size());
  const std::size_t semi = rest.find(';');
  if (semi != std::string_view::npos) {
    if (std::string why = detail::port_error(endpoint, rest.substr(0, semi)); !why.empty()) {
      return why;
    }
  }
  return detail::port_error(endpoint, semi == std::string_view::npos ? rest : rest.substr(semi + 1));
}

}  // namespace flowtune
