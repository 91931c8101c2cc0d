// The allocator's private records, shared by its source files (allocator.cc:
// dispatch, iterations, timers, outbox; allocator_events.cc: what each
// protocol event does to the flow table).
#pragma once

#include <cstddef>
#include <limits>

#include "flowtune/daemon/allocator.h"

namespace flowtune::daemon {

// Distinct tenant names the allocator keeps (operators' and endpoints').
inline constexpr std::size_t kMaxTenants = 1u << 16;

struct Allocator::Endpoint {
  EndpointIdx idx = 0;
  std::string peer;  // routing id of its current connection
  std::string id;    // from hello: unique per process incarnation
  std::string key;   // the CURVE key of its hello (Principal::key); empty: none
  std::string key_name;  // that key's name (Principal::name), for policy rules
  std::vector<std::string> via_keys;  // relays' keys that vouched for `key` (Principal::via)
  // Its sources for the quotas (Allocator::sources_): its host's, over TCP
  // its peer address's, and with CURVE (heard directly, not through a
  // relay) its key's; null: none.
  std::pair<const std::string, Allocator::Source>* host_source = nullptr;
  std::pair<const std::string, Allocator::Source>* address_source = nullptr;
  std::pair<const std::string, Allocator::Source>* key_source = nullptr;
  alloc::HostId host = 0;
  // Flow key -> engine id. Several keys (here or at other endpoints) may hold
  // one engine flow: see Allocator::Flow.
  std::unordered_map<std::uint64_t, alloc::FlowId> flows;
  wire::StateDigest digest;  // of `flows`' keys, kept as they come and go
  std::uint64_t last_seq = 0;  // seq of its last message handled
  std::uint64_t last_heard_us = 0;
  // Messages it may send (AllocatorConfig::max_messages_per_sec).
  TokenBucket tokens;
  // When it was last told it is over a rate limit: further refusals within
  // kRateLimitedQuietUs are counted, not answered (a flood's every message
  // would otherwise cost the loop a reply).
  std::uint64_t told_limited_us = 0;
  std::uint64_t messages = 0;
  std::uint64_t errors = 0;
  wire::AllocatorMessage out;  // owed to the endpoint
  bool dirty = false;
  // A send to it failed: the next lease refresh carries every current rate.
  bool resend_rates = false;
  // The host's aggregate pacer (flowtune-pacer): holds no flows; every
  // message to it carries its host's rate.
  bool pacer = false;
};

// One socket is one flow, whatever processes write to it: forked children
// that inherit a socket each open their own endpoint and each report its
// flowlets under the same 5-tuple. A flow started with a FiveTuple is
// identified by (source host, 5-tuple); a second holder (another endpoint, or
// the same endpoint under another key) joins the engine flow instead of adding
// one, and is told the same rates. The first holder lives in the Flow record
// (the update check touches nothing else for an unshared flow); the others, by
// engine id, in Allocator::co_holders_. The engine flow goes when its last
// holder does.
//
// A shared flow keeps the weight of the holder that started it (a joiner
// writes to the same socket and cannot re-weight it), and its bytes are the
// sum of the holders' reports (informational: the engine does not use them).
struct Allocator::Flow {
  static constexpr EndpointIdx kNone = std::numeric_limits<EndpointIdx>::max();
  EndpointIdx endpoint = kNone;  // first holder; kNone: the engine id is free
  std::uint64_t key = 0;         // the first holder's key
  std::uint32_t co_holders = 0;  // holders beyond the first (Allocator::co_holders_)
  // Ever held by more than one endpoint: its bytes and progress are the
  // holders' together, so one holder's progress report does not describe it.
  bool was_shared = false;
  bool has_socket = false;       // started with a FiveTuple: shareable, indexed by socket
  SocketId socket;
  alloc::HostId src = 0;
  alloc::HostId dst = 0;
  alloc::Path path;
  float weight = 1;
  std::uint8_t priority_class = alloc::kDefaultClass;  // as given to the engine
  std::uint64_t bytes = 0;
  std::uint64_t coflow_id = 0;
  std::string tenant;               // as the endpoint named it; empty: none
  alloc::TenantId tenant_id = alloc::kNoTenant;  // the policy's, set at its start
  std::uint64_t deadline_at_us = 0;  // 0: none
  std::uint64_t started_us = 0;
  bool live() const { return endpoint != kNone; }
  // What a start or resync entry reports of the flowlet beyond its identity
  // (a sole holder's report replaces the last one); the deadline arrives as
  // time left and is kept as a time.
  void take_report(const wire::FlowletStart& s, std::uint64_t now_us) {
    bytes = s.bytes;
    coflow_id = s.coflow_id;
    tenant = s.tenant;
    deadline_at_us = s.deadline_us != 0 ? now_us + s.deadline_us : 0;
  }
  // Time left to the deadline: 0 = none, negative (at least 1 µs) once overdue.
  std::int64_t deadline_left_us(std::uint64_t now_us) const {
    if (deadline_at_us == 0) return 0;
    const auto left = static_cast<std::int64_t>(deadline_at_us - now_us);
    return left != 0 ? left : -1;
  }
};

using rules::to_bytes_per_sec;

}  // namespace flowtune::daemon
