// What the allocator counts, for flowtune-ctl and the logs. Plain integers
// updated by the one thread that runs the protocol (no atomics needed).
#pragma once

#include <array>
#include <cstdint>

#include "flowtune/wire/codec.h"
#include "flowtune/wire/messages.h"

namespace flowtune::daemon {

// Why an input was refused. Decode failures and protocol errors share one
// list so every refusal is counted once, under one name.
enum class Cause : std::uint8_t {
  kTooLarge,
  kTruncated,
  kMalformed,
  kUnsupportedVersion,
  kBadValue,
  kNotRegistered,
  kUnknownFlow,
  kUnknownHost,
  kTooManyFlows,
  kTooManyEndpoints,
  kRateLimited,
  kBadFrames,  // a ZeroMQ message with an unexpected number of frames
  kStateMismatch,  // an endpoint's digest disagreed with its flows here: it resyncs
  kNotAuthorized,  // its key may not do this (another host's flows, a ctl-only key)
  kStandby,        // a message to an allocator standing by (--standby-of)
  kCount
};
inline constexpr std::size_t kNumCauses = static_cast<std::size_t>(Cause::kCount);
const char* to_string(Cause c);
Cause cause_of(wire::DecodeError e);
wire::ErrorCode error_code_of(Cause c);

// Durations in ns on a log scale with 8 buckets per power of two, so a
// quantile is exact to within 1/8 (12.5%) in any range, in fixed memory.
class LatencyHistogram {
 public:
  void record(std::uint64_t ns);
  std::uint64_t count() const { return count_; }
  // The sum of every recorded duration, ns (a Prometheus histogram's _sum).
  std::uint64_t sum_ns() const { return sum_ns_; }
  // Upper edge of the bucket holding quantile q (0..1), ns; 0 when empty.
  std::uint64_t quantile_ns(double q) const;
  // How many recorded durations were below 2^k ns, 0 <= k <= 64: exact,
  // since every power of two starts a bucket (a Prometheus bucket's count
  // with le = 2^k - 1 ns).
  std::uint64_t count_below_pow2(int k) const;

 private:
  static constexpr int kSubBits = 3;
  std::array<std::uint64_t, 64 << kSubBits> buckets_{};
  std::uint64_t count_ = 0;
  std::uint64_t sum_ns_ = 0;
};

struct Counters {
  std::uint64_t messages_in = 0;
  std::uint64_t bytes_in = 0;
  std::uint64_t hellos = 0;
  std::uint64_t starts = 0;
  std::uint64_t ends = 0;
  std::uint64_t heartbeats = 0;
  std::uint64_t resyncs = 0;
  std::uint64_t rate_requests = 0;  // events asking again for rates an endpoint lacks
  std::uint64_t progress = 0;  // progress events (each reporting one or more flowlets)
  std::uint64_t progress_flows = 0;  // flowlets whose size or progress a report updated
  std::uint64_t messages_out = 0;
  std::uint64_t bytes_out = 0;
  std::uint64_t send_failures = 0;  // peer gone or its queue full: message dropped
  std::uint64_t rate_updates = 0;
  std::uint64_t rate_updates_suppressed = 0;  // moved by less than the threshold
  // Iterations whose moved rates waited for a later one (update_interval_us).
  std::uint64_t rate_passes_deferred = 0;
  // Of rate_updates: starts told before the turn's iteration (early_rates),
  // and of those, how many the iteration then had to correct.
  std::uint64_t early_rates = 0;
  std::uint64_t early_rates_corrected = 0;
  std::uint64_t lease_refreshes = 0;
  std::uint64_t host_rate_updates = 0;  // messages telling a host pacer its host's rate
  std::uint64_t endpoints_timed_out = 0;
  std::uint64_t hosts_released = 0;  // added hosts whose slot went back once unused
  std::uint64_t flows_expired = 0;  // holds released with a timed-out endpoint
  std::uint64_t flows_joined = 0;   // starts that joined a live flow of the same socket
  std::uint64_t memory_trims = 0;   // freed heap handed back (Server::return_memory)
  std::uint64_t compactions = 0;    // tables shrunk after a burst (Allocator::compact_if_sparse)
  std::uint64_t classes_lowered = 0;  // starts and resync entries that asked above --top-class
  // Flows taken up (from starts and resyncs) per strict priority class.
  std::array<std::uint64_t, wire::kNumClasses> flows_by_class{};
  std::uint64_t deadlines_met = 0;    // flowlets with a deadline that ended by it
  std::uint64_t deadlines_missed = 0;  // ... that ended after it
  std::uint64_t iterations = 0;
  std::uint64_t control_requests = 0;
  std::uint64_t relay_batches = 0;  // batches from flowtune-relay (wire/relay.h)
  std::array<std::uint64_t, kNumCauses> errors{};
  LatencyHistogram iteration_ns;
  // A loop turn that received messages: from the first receive to the last
  // reply handed to ZeroMQ (receive + handle + one iteration + send), the
  // allocator's share of an endpoint's control-loop latency.
  LatencyHistogram turn_ns;
  // From the start of a turn that told early rates to their messages handed
  // to ZeroMQ: what a start waits in the daemon when its answer is early.
  LatencyHistogram early_answer_ns;
  // The loop's memory checks: weighing the heap, and trimming it when due.
  LatencyHistogram memory_check_ns;
  // Each on_timer call the loop makes: a slice of a tick's scan (lease
  // refreshes and timeouts: AllocatorConfig::timer_slice), or a planned
  // deadline passing.
  LatencyHistogram timer_ns;

  std::uint64_t events() const {
    return hellos + starts + ends + heartbeats + resyncs + rate_requests + progress;
  }
  void count(Cause c) { ++errors[static_cast<std::size_t>(c)]; }
};

}  // namespace flowtune::daemon
