#include "health.h"

namespace flowtune::ctl {

using nlohmann::json;

namespace {

// The pair's part: empty when ready, else why not.
std::string role_problem(const json& s) {
  const json pair = s.value("standby_pair", json());
  const std::string role = s.value("role", std::string("active"));
  if (pair.is_null() || role == "active") return {};
  const json peer = pair.value("peer_role", json());
  if (peer.is_string() && peer.get<std::string>() == "active") return {};
  return "standby and its peer " + pair.value("peer", std::string("?")) +
         (peer.is_string() ? " is " + peer.get<std::string>() : std::string(" has not been heard")) +
         ": its role is not settled";
}

std::uint64_t iterations(const json& s) {
  const json c = s.value("counters", json::object());
  return c.value("iterations", std::uint64_t{0});
}

}  // namespace

Verdict readiness(const json& first, const json& second, long interval_ms) {
  if (!first.is_object() || !second.is_object()) return {false, "not live: no status reply"};
  if (second.value("relay", false) || second.value("witness", false)) {
    return {true, std::string("ready: ") + (second.value("relay", false) ? "relay" : "witness") + " answers"};
  }
  if (first.value("epoch", std::uint64_t{0}) != second.value("epoch", std::uint64_t{0})) {
    return {false, "not ready: the allocator restarted (or took over) between two replies"};
  }
  if (const std::string why = role_problem(second); !why.empty()) return {false, "not ready: " + why};
  const bool busy = first.value("busy", false) && second.value("busy", false);
  const std::uint64_t it0 = iterations(first), it1 = iterations(second);
  if (busy && it1 == it0) {
    return {false, "not ready: the engine is busy but ran no iteration in " + std::to_string(interval_ms) +
                       " ms (" + std::to_string(it1) + " in all)"};
  }
  const std::string role = second.value("role", std::string("active"));
  return {true, "ready: " + role + ", " + std::to_string(second.value("flows", std::uint64_t{0})) + " flows, engine " +
                    (busy ? "iterating (" + std::to_string(it1 - it0) + " iterations in " +
                                std::to_string(interval_ms) + " ms)"
                          : std::string("idle"))};
}

}  // namespace flowtune::ctl
