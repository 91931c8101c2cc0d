// The runtime thread's sleep/wake handshake with application threads, in one
// place so its memory ordering can be read (and stress-tested) on its own.
//
// The hazard: a producer publishes an event and then looks whether the
// consumer sleeps; the consumer says it sleeps and then looks for events.
// Each side is a store followed by a load of another location, and without
// a full fence on *both* sides the store can be delayed past the load
// (x86's store buffer does exactly this): both look too early, the producer
// sends no wake-up and the consumer blocks with an event queued. A release
// store or a seq_cst load alone does not forbid that reordering.
//
// Here both sides make their store a read-modify-write of the one flag
// (acq_rel exchange). RMWs of one location are totally ordered, and each
// reads the one before it: if the producer's comes first, the consumer's
// exchange synchronizes with it and so sees the event published before it;
// if the consumer's comes first, the producer reads "sleeping" and wakes it.
// Unlike a pair of seq_cst fences (Dekker's pattern, equally correct), this
// is something TSan models. Cost: one locked instruction per urgent push, as
// a fence would be on x86.
#pragma once

#include <atomic>
#include <cstdint>

namespace flowtune::client {

class WakeFlag {
 public:
  // How the consumer sleeps. A nap ends by itself soon (the consumer's own
  // timer fires within its latency budget), so producers need not wake it:
  // their events wait for that look, and the producer saves a syscall. A
  // deep sleep lasts until a producer wakes it.
  enum class Sleep : std::uint8_t { kNap = 1, kDeep = 2 };

  // Consumer, before blocking. has_work() looks at whatever producers
  // publish (the queue). Returns true if the consumer may block: then any
  // producer that publishes after this returns sees how it sleeps, and
  // wakes it if the sleep is deep. Returns false if work is already there
  // (the consumer must not block).
  template <class HasWork>
  bool prepare_to_sleep(HasWork has_work, Sleep how = Sleep::kDeep) {
    (void)state_.exchange(static_cast<std::uint8_t>(how), std::memory_order_acq_rel);
    if (!has_work()) return true;
    (void)state_.exchange(kAwake, std::memory_order_acq_rel);
    return false;
  }
  // Consumer, after it woke (for whatever reason). An RMW too: every write
  // of the flag must be one, or a plain store would break the chain of
  // RMWs through which a producer's publish reaches the next sleep check.
  void woke() { (void)state_.exchange(kAwake, std::memory_order_acq_rel); }

  // Producer, after publishing: true if it must send the wake-up (exactly
  // one of the producers that see the consumer in a deep sleep gets true;
  // a napping consumer looks by itself).
  bool should_wake() {
    return state_.exchange(kAwake, std::memory_order_acq_rel) ==
           static_cast<std::uint8_t>(Sleep::kDeep);
  }

 private:
  static constexpr std::uint8_t kAwake = 0;
  std::atomic<std::uint8_t> state_{kAwake};
};

}  // namespace flowtune::client
