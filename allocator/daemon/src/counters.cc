#include "flowtune/daemon/counters.h"

#include <bit>

namespace flowtune::daemon {

const char* to_string(Cause c) {
  switch (c) {
    case Cause::kTooLarge: return "too_large";
    case Cause::kTruncated: return "truncated";
    case Cause::kMalformed: return "malformed";
    case Cause::kUnsupportedVersion: return "unsupported_version";
    case Cause::kBadValue: return "bad_value";
    case Cause::kNotRegistered: return "not_registered";
    case Cause::kUnknownFlow: return "unknown_flow";
    case Cause::kUnknownHost: return "unknown_host";
    case Cause::kTooManyFlows: return "too_many_flows";
    case Cause::kTooManyEndpoints: return "too_many_endpoints";
    case Cause::kRateLimited: return "rate_limited";
    case Cause::kStateMismatch: return "state_mismatch";
    case Cause::kBadFrames: return "bad_frames";
    case Cause::kNotAuthorized: return "not_authorized";
    case Cause::kStandby: return "standby";
    case Cause::kCount: break;
  }
  return "unknown";
}

Cause cause_of(wire::DecodeError e) {
  switch (e) {
    case wire::DecodeError::kTooLarge: return Cause::kTooLarge;
    case wire::DecodeError::kTruncated: return Cause::kTruncated;
    case wire::DecodeError::kUnsupportedVersion: return Cause::kUnsupportedVersion;
    case wire::DecodeError::kBadValue: return Cause::kBadValue;
    case wire::DecodeError::kMalformed:
    case wire::DecodeError::kOk: break;
  }
  return Cause::kMalformed;
}

wire::ErrorCode error_code_of(Cause c) {
  switch (c) {
    case Cause::kUnsupportedVersion: return wire::ErrorCode::kUnsupportedVersion;
    case Cause::kBadValue:
    // A refused flowlet is sent unpaced either way; the text says why. (A
    // code of its own would be refused whole by endpoints of protocol 1.0.)
    case Cause::kNotAuthorized: return wire::ErrorCode::kBadValue;
    case Cause::kNotRegistered: return wire::ErrorCode::kNotRegistered;
    case Cause::kUnknownFlow: return wire::ErrorCode::kUnknownFlow;
    case Cause::kUnknownHost: return wire::ErrorCode::kUnknownHost;
    case Cause::kTooManyFlows:
    case Cause::kTooManyEndpoints: return wire::ErrorCode::kTooManyFlows;
    case Cause::kRateLimited: return wire::ErrorCode::kRateLimited;
    case Cause::kStateMismatch: return wire::ErrorCode::kStateMismatch;
    case Cause::kStandby: return wire::ErrorCode::kStandby;
    default: return wire::ErrorCode::kMalformed;
  }
}

// Bucket of v: its power of two (bit width) and the kSubBits bits below the
// leading one; values below 2^kSubBits get a bucket each.
void LatencyHistogram::record(std::uint64_t ns) {
  std::size_t b;
  const int width = static_cast<int>(std::bit_width(ns));
  if (width <= kSubBits) {
    b = static_cast<std::size_t>(ns);
  } else {
    const int shift = width - 1 - kSubBits;
    b = (static_cast<std::size_t>(shift + 1) << kSubBits) +
        static_cast<std::size_t>((ns >> shift) & ((1u << kSubBits) - 1));
  }
  ++buckets_[b];
  ++count_;
  sum_ns_ += ns;
}

// Values below 2^k fill the buckets before the first one of width k + 1:
// for k <= kSubBits those are buckets 0 .. 2^k - 1 (one value each), else
// the first (k - kSubBits + 1) << kSubBits (record() puts width w from
// bucket (w - kSubBits) << kSubBits on).
std::uint64_t LatencyHistogram::count_below_pow2(int k) const {
  if (k >= 64) return count_;
  const std::size_t end = k <= kSubBits ? (std::size_t{1} << k)
                                        : static_cast<std::size_t>(k - kSubBits + 1) << kSubBits;
  std::uint64_t n = 0;
  for (std::size_t b = 0; b < end && b < buckets_.size(); ++b) n += buckets_[b];
  return n;
}

std::uint64_t LatencyHistogram::quantile_ns(double q) const {
  if (count_ == 0) return 0;
  const auto rank = static_cast<std::uint64_t>(q * static_cast<double>(count_ - 1));
  std::uint64_t seen = 0;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    seen += buckets_[b];
    if (seen <= rank) continue;
    if (b < (std::size_t{1} << kSubBits)) return b;
    const int shift = static_cast<int>(b >> kSubBits) - 1;
    const std::uint64_t mantissa = (b & ((1u << kSubBits) - 1)) | (1u << kSubBits);
    return ((mantissa + 1) << shift) - 1;  // the bucket's largest value
  }
  return UINT64_MAX;
}

}  // namespace flowtune::daemon
