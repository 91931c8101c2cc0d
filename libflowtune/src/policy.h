// A flowlet's policy as the library carries it from the application's call
// to the start it reports (docs/policy.md), and the client's tenant names.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "flowtune/wire/messages.h"

namespace flowtune::client {

// Tenant names a client's flowlets carry, interned so that events stay
// fixed-size: append-only, index 0 is "none". Any thread.
class TenantNames {
 public:
  static constexpr std::size_t kMax = 255;
  // The index of name, added if new; 0 for ""; -1 when full or name is
  // longer than the wire allows.
  int intern(std::string_view name);
  std::string name(std::uint8_t index) const;

 private:
  mutable std::mutex mu_;
  std::vector<std::string> names_{std::string()};
};

// What a flowlet asks of the allocator besides its size (docs/policy.md).
struct FlowletPolicy {
  float weight = 1;
  std::uint8_t priority_class = wire::kClassUnset;
  std::uint8_t tenant = 0;       // TenantNames index; 0 = none
  std::uint32_t deadline_ms = 0;  // from the begin; 0 = none
  std::uint64_t coflow_id = 0;
  bool operator==(const FlowletPolicy&) const = default;
};

inline int TenantNames::intern(std::string_view name) {
  if (name.empty()) return 0;
  if (name.size() > wire::kMaxTextBytes || name.find('\0') != std::string_view::npos) return -1;
  std::lock_guard<std::mutex> lock(mu_);
  for (std::size_t i = 1; i < names_.size(); ++i) {
    if (names_[i] == name) return static_cast<int>(i);
  }
  if (names_.size() > kMax) return -1;
  names_.emplace_back(name);
  return static_cast<int>(names_.size() - 1);
}

inline std::string TenantNames::name(std::uint8_t index) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index < names_.size() ? names_[index] : std::string();
}

}  // namespace flowtune::client
