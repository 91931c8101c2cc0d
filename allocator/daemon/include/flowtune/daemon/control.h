// Answers to flowtune-ctl: the allocator's state as JSON. Requests are one
// word, optionally followed by a page's limit and start: "status",
// "endpoints", "flows", "links", "tenants" [LIMIT [FROM]], "histograms"
// (the latency histograms' buckets, for metrics.h). An unknown
// request gets {"error": ...}. Requests that change state ("reload") are
// the server's (server.h). Replies are built inside the allocator's loop,
// so none costs more than a page or one pass over the flows, and that pass
// is shared (ControlCache).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "flowtune/common/token_bucket.h"
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

// The sums over every flow that status, links and tenants show
// (Allocator::totals): one pass over the flow table, about 0.8 ms at
// 100,000 flows, which a status reply once made per request (with every
// tenant's name: 24 ms), so that a flood of 200 requests a second held the
// loop. Replies share one pass: a new one is made only when flows or rates
// have changed since (an iteration, a flow started, ended or replaced), and at most
// kPassesPerSec a second (a burst as large): a lone request after a change
// sees it, a flood costs the loop a few passes a second, fewer than its
// iterations, and its replies' sums may be that far behind (status:
// totals_age_s).
class ControlCache {
 public:
  static constexpr double kPassesPerSec = 4;
  explicit ControlCache(double passes_per_sec = kPassesPerSec)
      : passes_allowed_(passes_per_sec, 0, passes_per_sec) {}
  const FlowTotals& totals(const Allocator& a, std::uint64_t now_us);
  // How far behind the allocator the last pass is: 0 while nothing has
  // changed since it was made, else the seconds since it was.
  double age_s(const Allocator& a, std::uint64_t now_us) const;
  std::uint64_t passes() const { return passes_; }

 private:
  // What a pass's sums depend on: any change moves one of them (rates move
  // only in iterations; flows come, go and change class in flow_changes).
  struct Version {
    std::uint64_t epoch = 0, iterations = 0, flow_changes = 0;
    bool operator==(const Version&) const = default;
  };
  static Version version_of(const Allocator& a);
  TokenBucket passes_allowed_;
  FlowTotals totals_;
  bool valid_ = false;
  Version version_;
  std::uint64_t at_us_ = 0;
  std::uint64_t passes_ = 0;
};

std::string control_reply(const Allocator& a, const ServerInfo& info, std::string_view request,
                          std::uint64_t now_us, ControlCache& cache);

}  // namespace flowtune::daemon
