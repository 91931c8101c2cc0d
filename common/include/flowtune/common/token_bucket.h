// A token bucket of messages per second, for rate-limiting peers. Time is an
// argument (µs on any monotonic clock), so tests drive it by hand.
#pragma once

#include <cstdint>

namespace flowtune {

class TokenBucket {
 public:
  // `rate_per_sec` tokens a second, 0 = unlimited; a burst of a tenth of a
  // second's worth (at least 1). Starts full at `now_us`.
  explicit TokenBucket(double rate_per_sec = 0, std::uint64_t now_us = 0)
      : rate_(rate_per_sec), tokens_(burst()), at_us_(now_us) {}

  // Refills for the time since the last call and takes one token; false when
  // none is left. Time never runs backwards for it: an earlier now_us refills
  // nothing.
  bool take(std::uint64_t now_us) {
    if (rate_ == 0) return true;
    if (now_us > at_us_) {
      const double refill = static_cast<double>(now_us - at_us_) * 1e-6 * rate_;
      tokens_ = tokens_ + refill < burst() ? tokens_ + refill : burst();
      at_us_ = now_us;
    }
    if (tokens_ < 1) return false;
    tokens_ -= 1;
    return true;
  }

  double tokens() const { return tokens_; }
  double burst() const { return rate_ / 10 > 1 ? rate_ / 10 : 1; }

 private:
  double rate_;
  double tokens_;
  std::uint64_t at_us_;
};

}  // namespace flowtune
