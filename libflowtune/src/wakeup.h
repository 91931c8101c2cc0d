// The runtime thread's sleep/wake handshake with application threads, in one
// place so its memory ordering can be read (and stress-tested) on its own.
//
// The hazard: a producer publishes an event and then looks whether the
// consumer sleeps; the consumer says it sleeps and then looks for events.
// Each side is a store followed by a load of another location, and without
// a full fence on *both* sides the store can be delayed past the load
// (x86's store buffer does exactly this): both look too early, the producer
// sends no wake-up and the consumer blocks with an event queued. A release
// store or a seq_cst load alone does not forbid that reordering; a seq_cst
// fence between the store and the load does (Dekker's pattern).
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
    sleeping_.store(true, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!has_work()) return true;
    sleeping_.store(false, std::memory_order_relaxed);
    return false;
  }
  // Consumer, after it woke (for whatever reason).
  void woke() { sleeping_.store(false, std::memory_order_relaxed); }

  // Producer, after publishing: true if it must send the wake-up (exactly
  // one of the producers that see the consumer asleep gets true).
  bool should_wake() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return sleeping_.load(std::memory_order_relaxed) &&
           sleeping_.exchange(false, std::memory_order_relaxed);
  }

 private:
  std::atomic<bool> sleeping_{false};
};

}  // namespace flowtune::client
