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

// An IPv4 network, "a.b.c.d/n" (n 0-32) or one address "a.b.c.d".
struct Cidr {
  std::uint32_t net = 0;
  std::uint32_t mask = 0;
  bool contains(std::uint32_t ip) const { return (ip & mask) == net; }
  bool contains(std::string_view address) const {
    const auto ip = parse_ipv4(address);
    return ip && contains(*ip);
  }
};
inline std::optional<Cidr> parse_cidr(std::string_view s) {
  const std::size_t slash = s.find('/');
  const auto ip = parse_ipv4(s.substr(0, slash));
  if (!ip) return std::nullopt;
  unsigned bits = 32;
  if (slash != std::string_view::npos) {
    const std::string_view b = s.substr(slash + 1);
    if (b.empty() || b.size() > 2 || (b.size() == 2 && b[0] == '0')) return std::nullopt;
    bits = 0;
    for (char c : b) {
      if (c < '0' || c > '9') return std::nullopt;
      bits = bits * 10 + static_cast<unsigned>(c - '0');
    }
    if (bits > 32) return std::nullopt;
  }
  const std::uint32_t mask = bits == 0 ? 0 : ~std::uint32_t{0} << (32 - bits);
  return Cidr{*ip & mask, mask};
}

inline std::string format_ipv4(std::uint32_t ip) {
  return std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 0xff) + "." +
         std::to_string((ip >> 8) & 0xff) + "." + std::to_string(ip & 0xff);
}

}  // namespace flowtune
