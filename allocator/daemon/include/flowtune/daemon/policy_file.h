// The operator's policy (flowtune-allocator --policy FILE.toml, reloaded on
// SIGHUP): tenants with weights, guarantees and caps, the default and top
// class, and rules that map hosts, destination ports and endpoint ids to a
// class, a top class and a tenant. Format and semantics: docs/policy.md.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flowtune/alloc/engine.h"
#include "flowtune/alloc/policy.h"

namespace flowtune::daemon {

struct PolicyRule {
  // What it matches (every given key must match; none given: every flowlet).
  std::vector<std::string> src_hosts;  // topology host names or addresses
  std::vector<std::string> dst_hosts;
  std::uint16_t dst_port_lo = 0, dst_port_hi = 0;  // 0, 0: any port
  std::string endpoint_prefix;                     // of the endpoint's id
  // Names of the CURVE keys (NAME.pub) its endpoint registered with; a key
  // cannot be claimed as an endpoint id can (docs/security.md).
  std::vector<std::string> keys;
  // What it sets.
  std::optional<std::uint8_t> default_class;  // for flowlets that name none
  std::optional<std::uint8_t> top_class;      // the highest class they may ask for
  std::string tenant;                         // replaces the endpoint's; "" = keep it
  int line = 0;                               // in the file, for logs
};

struct OperatorPolicy {
  std::string source;  // the file, for messages
  std::optional<std::uint8_t> default_class;
  std::optional<std::uint8_t> top_class;
  alloc::TenantSpec default_tenant;  // of tenants the file does not list
  std::map<std::string, alloc::TenantSpec> tenants;
  std::vector<PolicyRule> rules;  // first match wins
};

// Throws ConfigError "FILE:LINE: key: reason" for anything it cannot use
// (unknown keys included: a typo must not fall back to a default).
OperatorPolicy load_policy_file(const std::string& path);
OperatorPolicy parse_policy(std::string_view text, const std::string& source);

}  // namespace flowtune::daemon
