// IPv4 addresses as the wire carries them (host byte order) and as people
// write them (dotted quads). One copy for the allocator, its tools and the
// endpoint library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace flowtune {

// "a.b.c.d", each part decimal 0-255 without leading zeros ("010" is octal to
// inet_aton() and decimal to most people: refused); nullopt otherwise.
inline std::optional<std::uint32_t> parse_ipv4(std::string_view s) {
  std::uint32_t ip = 0;
  std::size_t pos = 0;
  for (int octet = 0; octet < 4; ++octet) {
    if (octet > 0) {
      if (pos >= s.size() || s[pos] != '.') return std::nullopt;
      ++pos;
    }
    const std::size_t start = pos;
    std::uint32_t v = 0;
    while (pos < s.size() && pos - start < 3 && s[pos] >= '0' && s[pos] <= '9') {
      v = v * 10 + static_cast<std::uint32_t>(s[pos] - '0');
      ++pos;
    }
    const std::size_t digits = pos - start;
    if (digits == 0 || v > 255 || (digits > 1 && s[start] == '0')) return std::nullopt;
    ip = (ip << 8) | v;
  }
  if (pos != s.size()) return std::nullopt;
  return ip;
}

inline std::string format_ipv4(std::uint32_t ip) {
  return std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 0xff) + "." +
         std::to_string((ip >> 8) & 0xff) + "." + std::to_string(ip & 0xff);
}

}  // namespace flowtune
