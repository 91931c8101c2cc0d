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

namespace flowtune::client {

class WakeFlag {
 public:
  // Consumer, before blocking. has_work() looks at whatever producers
  // publish (the queue). Returns true if the consumer may block: then any
  // producer that publishes after this returns sees sleeping and wakes it.
  // Returns false if work is already there (the consumer must not block).
  template <class HasWork>
  bool prepare_to_sleep(HasWork has_work) {
    (void)sleeping_.exchange(true, std::memory_order_acq_rel);
    if (!has_work()) return true;
    (void)sleeping_.exchange(false, std::memory_order_acq_rel);
    return false;
  }
  // Consumer, after it woke (for whatever reason). An RMW too: every write
  // of the flag must be one, or a plain store would break the chain of
  // RMWs through which a producer's publish reaches the next sleep check.
  void woke() { (void)sleeping_.exchange(false, std::memory_order_acq_rel); }

  // Producer, after publishing: true if it must send the wake-up (exactly
  // one of the producers that see the consumer asleep gets true).
  bool should_wake() { return sleeping_.exchange(false, std::memory_order_acq_rel); }

 private:
  std::atomic<bool> sleeping_{false};
};

}  // namespace flowtune::client
