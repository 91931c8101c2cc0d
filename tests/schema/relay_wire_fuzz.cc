// libFuzzer target over the small parsers a relay batch and a standby
// pair's probe go through (wire/relay.h, wire/role.h): routes, relayed
// peer names, key chains and role answers, from arbitrary bytes. Checked,
// beyond nothing crashing or tripping a sanitizer:
//   - valid_route holds exactly when popping hops consumes the route, each
//     hop 1-255 bytes; a route pushed is popped back as it went in, and a
//     push is refused only for what the rules refuse;
//   - a relayed peer's name (of a valid route, as callers give it) splits
//     back into its relay and route;
//   - valid_key_chain holds exactly for 1-9 keys of 32 bytes;
//   - a role answer parses only to a role, a term and an id, and a role
//     answer written parses back to what was written.
// The first byte splits the rest into a hop and a route. Run with
// -max_len=4096.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "flowtune/wire/relay.h"
#include "flowtune/wire/role.h"

namespace {

using namespace flowtune::wire;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "relay_wire_fuzz: %s\n", what);
  std::abort();
}

// valid_route by hand: hop after hop, each of 1-255 bytes, at least one.
bool route_by_hand(std::string_view r) {
  if (r.empty()) return false;
  while (!r.empty()) {
    const std::size_t n = static_cast<unsigned char>(r[0]);
    if (n == 0 || r.size() < 1 + n) return false;
    r.remove_prefix(1 + n);
  }
  return true;
}

void routes(std::string_view hop, std::string_view route) {
  if (valid_route(route) != route_by_hand(route)) fail("valid_route disagrees with the rules");
  const std::string pushed = route_push(hop, route);
  const bool allowed = !hop.empty() && hop.size() <= 255 && 1 + hop.size() + route.size() <= kMaxRouteBytes;
  if (pushed.empty() == allowed) fail("route_push refused what the rules allow, or the reverse");
  if (!pushed.empty()) {
    std::string_view h, rest;
    if (!route_pop(pushed, &h, &rest) || h != hop || rest != route) fail("a pushed hop did not pop back");
    if (valid_route(route) && !valid_route(pushed)) fail("a hop pushed onto a valid route broke it");
    // Callers name a relayed peer only by a route they checked.
    if (valid_route(route)) {
      const std::string peer = relayed_peer(hop, route);
      std::string_view relay, below;
      if (!is_relayed_peer(peer) || !split_relayed_peer(peer, &relay, &below) || relay != hop || below != route) {
        fail("a relayed peer did not split back");
      }
    }
  }
  std::string_view h, rest;
  if (route_pop(route, &h, &rest) && (h.empty() || h.size() + rest.size() + 1 != route.size())) {
    fail("route_pop lost bytes");
  }
  std::string_view relay, below;
  if (split_relayed_peer(route, &relay, &below) && !is_relayed_peer(route)) fail("split a peer that is not relayed");
}

void keys(std::string_view chain) {
  const bool want = !chain.empty() && chain.size() % 32 == 0 && chain.size() <= 9 * 32;
  if (valid_key_chain(chain) != want) fail("valid_key_chain disagrees with the rules");
}

void roles(std::string_view text, std::uint64_t term, std::uint64_t id) {
  if (const auto p = parse_role_answer(text)) {
    if (p->role != PairRole::kActive && p->role != PairRole::kStandby) fail("a role that is neither");
  }
  for (const PairRole r : {PairRole::kActive, PairRole::kStandby}) {
    const auto back = parse_role_answer(role_answer(r, term, id));
    if (!back || back->role != r || back->term != term || back->id != id) fail("a role answer did not parse back");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::size_t cut = std::min<std::size_t>(data[0], rest.size());
  routes(rest.substr(0, cut), rest.substr(cut));
  keys(rest);
  std::uint64_t term = 0, id = 0;
  for (std::size_t i = 0; i < 8 && i < rest.size(); ++i) term = term << 8 | static_cast<unsigned char>(rest[i]);
  for (std::size_t i = 8; i < 16 && i < rest.size(); ++i) id = id << 8 | static_cast<unsigned char>(rest[i]);
  roles(rest, term, id);
  return 0;
}
