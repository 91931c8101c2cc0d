// The host's budget of flowlet events, shared among the agent's processes
// (docs/agent.md, "Fairness"). Every process's events reach the allocator
// through the agent's one session, which the allocator holds to a per-source
// input quota (--max-source-bytes-per-sec): a process that floods would
// spend it for the whole host, the allocator would drop the session's
// messages whole, and a neighbour's start would wait for the resync. So
// the agent forwards at most `per_sec` events a second for the host, and
// each process that sends events gets an equal share of it, as a token
// bucket; a process past its share is not read until its bucket refills,
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
  // A process's allowance. A new one starts full.
  struct Bucket {
    double tokens = 0;           // may be below zero: a debt
    std::uint64_t at_us = 0;     // when `tokens` was last brought up to date
    std::uint64_t spent_us = 0;  // its last spend (0: never)
    bool started = false;        // filled once, at its first use
  };
  // A process that spent within this long counts as sharing the budget.
  static constexpr std::uint64_t kActiveUs = 1'000'000;
  // A bucket holds this long of its share (and at least kMinBurst events),
  // so a process's burst is served at once and a flood's is short.
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

  // Whether the process may be read now (its balance is positive), after
  // bringing its bucket up to date.
  bool may_read(Bucket& b, std::uint64_t now_us) {
    if (unlimited()) return true;
    refill(b, now_us);
    return b.tokens > 0;
  }
  // What it sent: the balance may go below zero (a packet is read whole).
  void spend(Bucket& b, double cost, std::uint64_t now_us) {
    if (unlimited() || cost <= 0) return;
    refill(b, now_us);
    b.tokens -= cost;
    b.spent_us = now_us;
  }
  // Microseconds until the balance is positive again (0: it is).
  std::uint64_t wait_us(const Bucket& b) const {
    if (unlimited() || b.tokens > 0) return 0;
    return static_cast<std::uint64_t>((1 - b.tokens) / share_per_sec() * 1e6) + 1;
  }

 private:
  double capacity() const {
    return std::max(kMinBurst, share_per_sec() * static_cast<double>(kBurstUs) / 1e6);
  }
  void refill(Bucket& b, std::uint64_t now_us) {
    if (!b.started) {
      b.tokens = capacity();
      b.started = true;
    } else if (now_us > b.at_us) {
      b.tokens = std::min(capacity(),
                          b.tokens + static_cast<double>(now_us - b.at_us) * share_per_sec() / 1e6);
    }
    b.at_us = std::max(b.at_us, now_us);
  }

  double per_sec_;
  std::uint32_t active_ = 1;
};

}  // namespace flowtune::agent
