// Which class, weight, tenant, deadline and coflow the preload shim gives a
// socket's flowlets (docs/preload.md, "Policy"): the process's defaults from
// FLOWTUNE_CLASS, FLOWTUNE_WEIGHT, FLOWTUNE_TENANT, FLOWTUNE_DEADLINE_MS and
// FLOWTUNE_COFLOW,
// and FLOWTUNE_RULES, which sets them otherwise for sockets matched by
// address and port, so one process can carry interactive and bulk sockets
// in different classes. Pure: flowtune-run validates with the same parser
// the shim uses, so a bad rule fails there, before the command runs.
//
// FLOWTUNE_RULES: rules separated by ';', each a list of key=value words
// (spaces or commas between them). Matches: dst=CIDR, src=CIDR, dport=PORT
// or LO-HI, sport=PORT or LO-HI (src/sport: the local end). Settings:
// class=0..7, weight=W, tenant=NAME, deadline-ms=MS, coflow=ID. The first rule whose
// matches all hold sets its settings over the defaults; a rule without
// matches holds for every socket.
//   FLOWTUNE_RULES="dport=6379 class=0; dst=10.1.0.0/16 tenant=batch weight=0.5"
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flowtune/flowtune.h"

namespace flowtune::preload {

struct SocketPolicy {
  int priority_class = FT_CLASS_DEFAULT;
  float weight = 1;
  std::string tenant;
  std::uint32_t deadline_ms = 0;
  std::uint64_t coflow_id = 0;  // 0: none
  bool operator==(const SocketPolicy&) const = default;
};

struct Cidr {
  std::uint32_t addr = 0;  // host byte order, masked
  std::uint32_t mask = 0;
  bool contains(std::uint32_t ip) const { return (ip & mask) == addr; }
};

struct PortRange {
  std::uint16_t lo = 0, hi = 0;
  bool contains(std::uint16_t p) const { return p >= lo && p <= hi; }
};

struct PolicyRule {
  std::optional<Cidr> src, dst;
  std::optional<PortRange> sport, dport;
  std::optional<int> priority_class;
  std::optional<float> weight;
  std::optional<std::string> tenant;
  std::optional<std::uint32_t> deadline_ms;
  std::optional<std::uint64_t> coflow_id;
};

// A connected socket's ends; addresses only for IPv4 (an IPv6 socket
// matches port rules, never address rules).
struct SocketEnds {
  bool v4 = false;
  std::uint32_t src = 0, dst = 0;  // host byte order
  std::uint16_t sport = 0, dport = 0;
};

struct PolicyConfig {
  SocketPolicy defaults;
  std::vector<PolicyRule> rules;
  // Nothing set: sockets register without options (the allocator's defaults).
  bool empty() const { return rules.empty() && defaults == SocketPolicy{}; }
  SocketPolicy for_socket(const SocketEnds& s) const;
};

// The FLOWTUNE_* values (nullptr or "" = unset). On bad input: nullopt and
// *error names the variable, the rule and the word ("FLOWTUNE_RULES: rule 2,
// 'dport=70000': a port is 1-65535").
struct PolicyEnv {
  const char* priority_class = nullptr;
  const char* weight = nullptr;
  const char* tenant = nullptr;
  const char* deadline_ms = nullptr;
  const char* rules = nullptr;
  const char* coflow = nullptr;
  static PolicyEnv from_environment();
};
std::optional<PolicyConfig> parse_policy(const PolicyEnv& env, std::string* error);

}  // namespace flowtune::preload
