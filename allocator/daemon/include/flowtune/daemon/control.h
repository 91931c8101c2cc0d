// Answers to flowtune-ctl: the allocator's state as JSON. Requests are one
// word, optionally followed by a limit: "status", "endpoints", "flows [N]",
// "links". An unknown request gets {"error": ...}. Requests that change
// state ("reload") are the server's (server.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "flowtune/daemon/allocator.h"

namespace flowtune::daemon {

// Authentication as the server sees it (CURVE on: docs/security.md).
struct AuthInfo {
  bool on = false;
  std::size_t endpoint_keys = 0, reader_keys = 0, admin_keys = 0;
  std::uint64_t accepted = 0;         // handshakes with an allowed key
  std::uint64_t unknown_keys = 0;     // handshakes with a key no list holds
  std::uint64_t unauthenticated = 0;  // peers without CURVE
  std::uint64_t bad_handshakes = 0;   // other failures (a wrong server key, garbage)
  std::uint64_t reloads = 0, reload_failures = 0;
  std::string last_reload_error;
  std::string public_key;            // the allocator's own, now (Z85)
  std::uint64_t key_rotations = 0;   // reloads that found a new --curve-secret
};

// The heap as the loop's last memory check weighed it (a walk of the heap:
// status reports these figures rather than walking it again).
struct HeapInfo {
  std::int64_t in_use_bytes = -1;  // -1: not weighed yet
  std::int64_t free_kept_bytes = -1;
  std::uint64_t weighed_at_us = 0;
};

// A hot standby pair (standby.h), as this allocator sees it.
struct HaInfo {
  std::string peer;            // empty: not one of a pair
  std::uint64_t term = 0;
  std::string peer_role;       // as last heard; empty: never heard
  double peer_heard_s_ago = -1;
  std::string witness;            // empty: no witness
  double witness_heard_s_ago = -1;
  double lease_left_s = 0;        // the witness's lease, as this allocator counts it
};

struct ServerInfo {
  std::string listen;
  std::uint64_t uptime_us = 0;
  AuthInfo auth;
  HeapInfo heap;
  HaInfo ha;
};

std::string control_reply(const Allocator& a, const ServerInfo& info, std::string_view request,
                          std::uint64_t now_us);

}  // namespace flowtune::daemon
