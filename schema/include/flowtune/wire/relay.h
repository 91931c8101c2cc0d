// Relays (flowtune-relay, docs/scale.md#relays): endpoints talk to a relay
// as they would to the allocator; the relay batches what they say upstream
// and fans the answers back. Between a relay and its upstream (the
// allocator, or another relay) one ZeroMQ message carries a batch:
//
//   "flowtune-relay", route_1, message_1, route_2, message_2, ...
//
// each message the unchanged wire frame of one endpoint (schema/), each
// route the path back to it: the routing ids of the hops below, outermost
// first, each as [length: 1 byte][id]. The answers come down the same way,
// and every relay pops its own hop. ZeroMQ routing ids are 1-255 bytes.
//
// A relay whose endpoints speak CURVE to it (flowtune-relay --curve-secret)
// sends keyed batches instead, one triple per endpoint message:
//
//   "flowtune-relay-keyed", route_1, keys_1, message_1, ...
//
// keys_i is the chain of CURVE public keys (32 raw bytes each) that vouch
// for message_i, innermost first: the key the endpoint itself connected
// with, then the key of each relay below that passed it up. The relay
// sending the batch does not list itself: its upstream knows its key from
// the connection. The allocator checks every key of the chain against its
// own lists (docs/security.md#relays). Answers come down unkeyed.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace flowtune::wire {

inline constexpr std::string_view kRelayTag = "flowtune-relay";
inline constexpr std::string_view kKeyedRelayTag = "flowtune-relay-keyed";
inline constexpr std::size_t kCurveKeyBytes = 32;
// Keys in one chain: the endpoint's and a relay's per hop (routes stop at
// 8 hops).
inline constexpr std::size_t kMaxKeyChain = 9;

// A chain of keys_i well formed: 1 to kMaxKeyChain keys of 32 bytes.
inline bool valid_key_chain(std::string_view keys) {
  return !keys.empty() && keys.size() % kCurveKeyBytes == 0 &&
         keys.size() / kCurveKeyBytes <= kMaxKeyChain;
}
// (route, message) pairs per batch.
inline constexpr std::size_t kMaxRelayBatch = 1024;
// A route longer than this (relays stacked 8 deep and more) is refused.
inline constexpr std::size_t kMaxRouteBytes = 8 * 256;

// `hop` in front of `rest`; empty when hop is not a routing id (0 or more
// than 255 bytes) or the route would grow past kMaxRouteBytes.
inline std::string route_push(std::string_view hop, std::string_view rest) {
  if (hop.empty() || hop.size() > 255 || 1 + hop.size() + rest.size() > kMaxRouteBytes) return {};
  std::string r;
  r.reserve(1 + hop.size() + rest.size());
  r += static_cast<char>(hop.size());
  r.append(hop);
  r.append(rest);
  return r;
}

// The first hop of `route` and what follows it; false if malformed.
inline bool route_pop(std::string_view route, std::string_view* hop, std::string_view* rest) {
  if (route.empty()) return false;
  const std::size_t n = static_cast<unsigned char>(route[0]);
  if (n == 0 || route.size() < 1 + n) return false;
  *hop = route.substr(1, n);
  *rest = route.substr(1 + n);
  return true;
}

// Every hop of `route` well formed (1-255 bytes), at least one.
inline bool valid_route(std::string_view route) {
  if (route.empty()) return false;
  std::string_view hop, rest;
  while (!route.empty()) {
    if (!route_pop(route, &hop, &rest)) return false;
    route = rest;
  }
  return true;
}

// The allocator's name for an endpoint behind relays: '\0R', the relay's
// routing id, then the route it gave. ZeroMQ's own routing ids are 5 bytes
// starting with a zero byte, and by its rules a chosen one does not start
// with one; libzmq does not enforce that, so the allocator drops any
// connection whose id has this shape.
inline std::string relayed_peer(std::string_view relay_id, std::string_view route) {
  const std::string r = route_push(relay_id, route);
  return r.empty() ? std::string() : std::string("\0R", 2) + r;
}
inline bool is_relayed_peer(std::string_view peer) {
  return peer.size() > 5 && peer[0] == '\0' && peer[1] == 'R';
}
// The relay's routing id and the route below it; false if not relayed.
inline bool split_relayed_peer(std::string_view peer, std::string_view* relay_id,
                               std::string_view* route) {
  return is_relayed_peer(peer) && route_pop(peer.substr(2), relay_id, route);
}

}  // namespace flowtune::wire
