// A token bucket of messages per second, for rate-limiting peers. Time is an
// argument (µs on any monotonic clock), so tests drive it by hand.
#pragma once

#include <cstdint>

namespace flowtune {

class TokenBucket {
 public:
  // `rate_per_sec` tokens a second, 0 = unlimited; a burst of a tenth of a
  // second's worth (at least 1), or at least `min_burst`. Starts full at
  // `now_us`.
  explicit TokenBucket(double rate_per_sec = 0, std::uint64_t now_us = 0, double min_burst = 1)
      : rate_(rate_per_sec),
        burst_(rate_per_sec / 10 > min_burst ? rate_per_sec / 10 : min_burst),
        tokens_(burst_),
        at_us_(now_us) {}

  // Refills for the time since the last call and takes one token; false when
  // none is left. Time never runs backwards for it: an earlier now_us refills
  // nothing.
  // With `cost` > 1 the token taken weighs that much: it needs one token
  // left and may leave the bucket in debt (a large message passes, and
  // its sender waits the longer after it).
  bool take(std::uint64_t now_us, double cost = 1) {
    if (rate_ == 0) return true;
    if (now_us > at_us_) {
      const double refill = static_cast<double>(now_us - at_us_) * 1e-6 * rate_;
      tokens_ = tokens_ + refill < burst() ? tokens_ + refill : burst();
      at_us_ = now_us;
    }
    if (tokens_ < 1) return false;
    tokens_ -= cost;
    return true;
  }

  double tokens() const { return tokens_; }
  // Whether take(now_us) would find a token (nothing changes).
  bool has_token(std::uint64_t now_us) const {
    if (rate_ == 0) return true;
    const double refill = now_us > at_us_ ? static_cast<double>(now_us - at_us_) * 1e-6 * rate_ : 0;
    return (tokens_ + refill < burst_ ? tokens_ + refill : burst_) >= 1;
  }
  // Whether the bucket would be full at now_us (nothing owed, nothing taken
  // that has not come back).
  bool full_at(std::uint64_t now_us) const {
    if (rate_ == 0) return true;
    const double refill = now_us > at_us_ ? static_cast<double>(now_us - at_us_) * 1e-6 * rate_ : 0;
    return tokens_ + refill >= burst_;
  }
  double burst() const { return burst_; }

 private:
  double rate_;
  double burst_;
  double tokens_;
  std::uint64_t at_us_;
};

}  // namespace flowtune
