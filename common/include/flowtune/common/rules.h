// The rules the allocator daemon and the flow-level simulator share, written
// once so the simulator cannot drift from what the daemon does: when an
// endpoint is told a new rate (the threshold test, paper §5.3.2), how a rate
// is rounded to what the endpoint applies, how much of each link the engine
// schedules, the lease defaults, and how ZeroMQ frames a message (the
// simulator prices control traffic with it). Pure functions of their
// arguments, header-only: common/ depends on nothing, and both the daemon and
// the simulator include it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace flowtune::rules {

// An endpoint is told a new rate when it moved by more than this fraction of
// what it was last told.
inline constexpr double kThreshold = 0.01;
inline constexpr double kMaxThreshold = 0.5;
// Fraction of every link left unscheduled for mice and external traffic
// (paper §6); none by default.
inline constexpr double kHeadroom = 0.0;
inline constexpr double kMaxHeadroom = 0.9;

// Leases, µs: a rate is valid for kLeaseUs; live leases are renewed every
// kLeaseRefreshUs; an endpoint silent for kEndpointTimeoutUs loses its flows
// (longer than the lease, so its rates lapse before its capacity is given
// away).
inline constexpr std::uint32_t kLeaseUs = 1'000'000;
inline constexpr std::uint64_t kLeaseRefreshUs = 300'000;
inline constexpr std::uint64_t kEndpointTimeoutUs = 3'000'000;

constexpr bool valid_threshold(double t) { return t >= 0 && t <= kMaxThreshold; }
constexpr bool valid_headroom(double h) { return h >= 0 && h <= kMaxHeadroom; }

// The fraction of each link's capacity the engine schedules. Rates held at
// endpoints lag the current ones by up to the threshold (a held h and the
// current r satisfy h <= r / (1 - threshold)), so scheduling (1 - threshold)
// of a link keeps what endpoints hold within it; headroom is kept on top.
constexpr double capacity_scale(double threshold, double headroom) {
  return (1.0 - threshold) * (1.0 - headroom);
}

// A rate as the endpoint applies it (SO_MAX_PACING_RATE, bytes/s): rounded
// down, so rounding never adds to a link, and never 0 (which would stop the
// socket).
constexpr std::uint64_t round_bytes_per_sec(double bytes_per_sec) {
  return bytes_per_sec < 1.0 ? 1 : static_cast<std::uint64_t>(bytes_per_sec);
}
constexpr std::uint64_t to_bytes_per_sec(double bits_per_sec) {
  return round_bytes_per_sec(bits_per_sec / 8.0);
}

enum class Update {
  kSame,        // the rate equals what the endpoint was told
  kSuppressed,  // it moved, by no more than the threshold: not worth a message
  kSend,        // new (nothing told yet: told == 0) or moved past the threshold
};

// The update rule. `rate` and `told` are rounded bytes/s (told == 0: nothing
// told yet).
constexpr Update update_decision(std::uint64_t rate, std::uint64_t told, double threshold) {
  if (rate == told) return Update::kSame;
  if (told == 0) return Update::kSend;
  const double moved = rate > told ? static_cast<double>(rate - told)
                                   : static_cast<double>(told - rate);
  return moved <= threshold * static_cast<double>(told) ? Update::kSuppressed : Update::kSend;
}

// Bytes a payload of `payload_bytes` takes in one ZeroMQ (ZMTP 3) frame: a
// flags byte and a 1-byte length below 256 bytes, an 8-byte length above.
constexpr std::size_t zmq_frame_bytes(std::size_t payload_bytes) {
  return payload_bytes + (payload_bytes < 256 ? 2 : 9);
}

}  // namespace flowtune::rules
