// What a standby pair's allocators ask their witness (flowtune-witness), a
// third voice that breaks the tie a partition leaves between two allocators
// that cannot hear each other (docs/scale.md, "The witness"). Both travel as
// flowtune-ctl frames ([kControlTag, text]):
//
//   request  "claim ID TERM LEASE_MS NONCE"
//   answer   {"granted": bool, "holder": ID, "term": N, "lease_ms": L, "nonce": NONCE}
//
// A claim asks to hold the pair's lease for LEASE_MS from when the witness
// reads it: granted to the holder again (a renewal), or to anyone once the
// holder's lease ran out; refused otherwise, with the holder, its term and
// the lease time it has left. The nonce comes back as it went (the
// claimant's clock when it asked, so it knows which claim an answer is
// for, and that its lease runs from no later than then). `term` is the
// holder's, as its last granted claim named it. Header-only: libflowtune never
// speaks it.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace flowtune::wire {

// The longest lease a witness grants (a claim asking more is refused as
// malformed): an hour, far above any takeover time.
inline constexpr std::uint64_t kMaxLeaseMs = 3'600'000;

struct ClaimRequest {
  std::uint64_t id = 0;  // the allocator's (its role answers' id), never 0
  std::uint64_t term = 0;
  std::uint64_t lease_ms = 0;  // 1..kMaxLeaseMs
  std::uint64_t nonce = 0;
};

struct ClaimAnswer {
  bool granted = false;
  std::uint64_t holder = 0;  // 0: none
  std::uint64_t term = 0;
  std::uint64_t lease_ms = 0;  // what the holder's lease has left
  std::uint64_t nonce = 0;     // the claim's
};

inline std::string claim_request(const ClaimRequest& c) {
  return "claim " + std::to_string(c.id) + " " + std::to_string(c.term) + " " + std::to_string(c.lease_ms) + " " +
         std::to_string(c.nonce);
}

// Nothing unless `text` is "claim ID TERM LEASE_MS NONCE" with ID > 0 and
// the lease within 1..kMaxLeaseMs (decimal, single spaces).
inline std::optional<ClaimRequest> parse_claim_request(std::string_view text) {
  constexpr std::string_view kVerb = "claim ";
  if (text.substr(0, kVerb.size()) != kVerb) return std::nullopt;
  text.remove_prefix(kVerb.size());
  std::uint64_t v[4];
  for (int i = 0; i < 4; ++i) {
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v[i]);
    if (ec != std::errc() || end == text.data()) return std::nullopt;
    text.remove_prefix(static_cast<std::size_t>(end - text.data()));
    if (i < 3) {
      if (text.empty() || text.front() != ' ') return std::nullopt;
      text.remove_prefix(1);
    }
  }
  if (!text.empty() || v[0] == 0 || v[2] == 0 || v[2] > kMaxLeaseMs) return std::nullopt;
  return ClaimRequest{v[0], v[1], v[2], v[3]};
}

inline std::string claim_answer(const ClaimAnswer& a) {
  return nlohmann::json{{"granted", a.granted}, {"holder", a.holder}, {"term", a.term},
                        {"lease_ms", a.lease_ms}, {"nonce", a.nonce}}
      .dump();
}

// Nothing when `json` is not a claim answer (an error, a rate limit).
inline std::optional<ClaimAnswer> parse_claim_answer(std::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  const auto g = j.find("granted"), h = j.find("holder"), t = j.find("term"), l = j.find("lease_ms"),
             n = j.find("nonce");
  if (g == j.end() || h == j.end() || t == j.end() || l == j.end() || n == j.end() || !g->is_boolean() ||
      !h->is_number_unsigned() || !t->is_number_unsigned() || !l->is_number_unsigned() ||
      !n->is_number_unsigned()) {
    return std::nullopt;
  }
  return ClaimAnswer{g->get<bool>(), h->get<std::uint64_t>(), t->get<std::uint64_t>(), l->get<std::uint64_t>(),
                     n->get<std::uint64_t>()};
}

}  // namespace flowtune::wire
