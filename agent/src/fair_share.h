// The host's budget of flowlet events, shared among the agent's processes
// (docs/agent.md, "Fairness"). Every process's events reach the allocator
// through the agent's one session, which the allocator holds to a per-source
// input quota (--max-source-bytes-per-sec): a process that floods would
// spend it for the whole host, the allocator would drop the session's
// messages whole, and a neighbour's start would wait for the resync. So
// the agent forwards about `per_sec` events a second for the host:
//   - each process that sends events has an equal share of it, as a token
//     bucket; while its bucket holds tokens it is read;
//   - the host has a bucket of the whole budget too, and a process past its
//     share may still be read while the host's bucket is more than half
//     full: a burst borrows what the others leave unused, and only a host
//     that spends its budget holds anyone to a share.
// A process that may not be read is not, until one of the buckets refills,
// and its own events back up in its own process.
//
// Pure: the server keeps a Bucket per process and gives the time; tests
// drive it with times of their own.
#pragma once

#include <algorithm>
#include <cstdint>

namespace flowtune::agent {

class FairShare {
 public:
  // An allowance: a process's, or the host's. A new one starts full.
  struct Bucket {
    double tokens = 0;           // may be below zero: a debt
    std::uint64_t at_us = 0;     // when `tokens` was last brought up to date
    std::uint64_t spent_us = 0;  // its last spend (0: never)
    bool started = false;        // filled once, at its first use
  };
  // A process that spent within this long counts as sharing the budget.
  static constexpr std::uint64_t kActiveUs = 1'000'000;
  // A bucket holds this long of its rate (and at least kMinBurst events),
  // so a burst is served at once and a flood's is short.
  static constexpr std::uint64_t kBurstUs = 100'000;
  static constexpr double kMinBurst = 64;

  // per_sec: the host's events a second; 0: unlimited (every read allowed).
  explicit FairShare(double per_sec) : per_sec_(per_sec) {}

  bool unlimited() const { return per_sec_ <= 0; }
  // The processes sharing the budget (the server counts them each tick).
  void set_active(std::uint32_t n) { active_ = std::max<std::uint32_t>(1, n); }
  bool active(const Bucket& b, std::uint64_t now_us) const {
    return b.spent_us != 0 && now_us - b.spent_us < kActiveUs;
  }
  double share_per_sec() const { return per_sec_ / active_; }

  // Whether the process may be read now: its own balance is positive, or
  // the host's bucket is more than half full.
  bool may_read(Bucket& b, std::uint64_t now_us) {
    if (unlimited()) return true;
    refill(b, share_per_sec(), now_us);
    refill(host_, per_sec_, now_us);
    return b.tokens > 0 || host_.tokens > capacity(per_sec_) / 2;
  }
  // What it sent, from its bucket and the host's (either may go below
  // zero: a packet is read whole).
  void spend(Bucket& b, double cost, std::uint64_t now_us) {
    if (unlimited() || cost <= 0) return;
    refill(b, share_per_sec(), now_us);
    refill(host_, per_sec_, now_us);
    b.tokens -= cost;
    host_.tokens -= cost;
    b.spent_us = host_.spent_us = now_us;
  }
  // Microseconds until may_read() can be true again (0: it is).
  std::uint64_t wait_us(const Bucket& b) const {
    const double half = capacity(per_sec_) / 2;
    if (unlimited() || b.tokens > 0 || host_.tokens > half) return 0;
    const double own = (1 - b.tokens) / share_per_sec();
    const double host = (half + 1 - host_.tokens) / per_sec_;
    return static_cast<std::uint64_t>(std::min(own, host) * 1e6) + 1;
  }

 private:
  static double capacity(double per_sec) {
    return std::max(kMinBurst, per_sec * static_cast<double>(kBurstUs) / 1e6);
  }
  static void refill(Bucket& b, double per_sec, std::uint64_t now_us) {
    if (!b.started) {
      b.tokens = capacity(per_sec);
      b.started = true;
    } else if (now_us > b.at_us) {
      b.tokens = std::min(capacity(per_sec),
                          b.tokens + static_cast<double>(now_us - b.at_us) * per_sec / 1e6);
    }
    b.at_us = std::max(b.at_us, now_us);
  }

  double per_sec_;
  std::uint32_t active_ = 1;
  Bucket host_;
};

}  // namespace flowtune::agent
