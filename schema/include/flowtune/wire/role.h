// The answer to a flowtune-ctl `role` request: what an allocator says of
// itself to its standby peer and to relays that follow a pair,
//
//   {"role": "active" | "standby", "term": N, "id": N}
//
// term counts takeovers (the higher one won last); id breaks ties between
// equal terms (the lower one stays). Header-only: libflowtune never parses it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace flowtune::wire {

// The first frame of a flowtune-ctl request and of its answer (a role probe,
// a witness's claim, a status request), apart from endpoint messages.
inline constexpr std::string_view kControlTag = "flowtune-ctl";

enum class PairRole : std::uint8_t { kStandby, kActive };

inline const char* to_string(PairRole r) { return r == PairRole::kActive ? "active" : "standby"; }

struct PeerView {
  PairRole role = PairRole::kStandby;
  std::uint64_t term = 0;
  std::uint64_t id = 0;
};

inline std::string role_answer(PairRole role, std::uint64_t term, std::uint64_t id) {
  return nlohmann::json{{"role", to_string(role)}, {"term", term}, {"id", id}}.dump();
}

// Nothing when `json` is not a role answer (a relay's status, an error).
inline std::optional<PeerView> parse_role_answer(std::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  const auto role = j.find("role");
  const auto term = j.find("term");
  const auto id = j.find("id");
  if (role == j.end() || term == j.end() || id == j.end() || !role->is_string() ||
      !term->is_number_unsigned() || !id->is_number_unsigned()) {
    return std::nullopt;
  }
  PeerView p;
  const auto& r = role->get_ref<const std::string&>();
  if (r == "active") p.role = PairRole::kActive;
  else if (r == "standby") p.role = PairRole::kStandby;
  else return std::nullopt;
  p.term = term->get<std::uint64_t>();
  p.id = id->get<std::uint64_t>();
  return p;
}

}  // namespace flowtune::wire
