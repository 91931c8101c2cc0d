// An application event on its way to the runtime thread, and the bounded
// lock-free queue that carries it (any thread in, the runtime thread out).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "flowtune/wire/messages.h"
#include "pacing.h"
#include "policy.h"

namespace flowtune::client {

struct Event {
  enum Kind : std::uint8_t { kRegister, kUnregister, kBegin, kSent, kWrote, kEnd, kUnsent };
  // kUnsent: an agent's client answered a look (bytes: unsent bytes).
  Kind kind = kBegin;
  SocketRef ref;
  std::uint64_t bytes = 0;
  // kBegin: the flowlet's (none: the socket's defaults); kRegister: the
  // socket's defaults.
  std::optional<FlowletPolicy> policy;
  wire::FiveTuple tuple;
  std::uint32_t mss = 0;
  bool writing = false;  // kUnsent: a write call was in progress
};

// Bounded multi-producer queue: each cell carries a sequence number that
// says whose turn it is (producer at pos, consumer at pos + 1), so producers
// claim cells with one CAS and never wait for each other's copies.
class EventQueue {
 public:
  explicit EventQueue(std::size_t capacity_pow2);
  bool push(const Event& e);  // any thread; false when full
  bool pop(Event* e);         // the runtime thread only
  bool empty() const;
  // Positions: events claimed by producers so far (any thread), and events
  // popped (the runtime thread). A cell claimed but not yet written stops
  // pop() there, so popped() can lag behind an event another thread has
  // already finished pushing.
  std::uint64_t claimed() const { return head_.load(std::memory_order_acquire); }
  std::uint64_t popped() const { return tail_.load(std::memory_order_relaxed); }

 private:
  struct Cell {
    std::atomic<std::uint64_t> seq;
    Event event;
  };
  std::unique_ptr<Cell[]> cells_;
  std::uint64_t mask_;
  alignas(64) std::atomic<std::uint64_t> head_{0};  // next push
  alignas(64) std::atomic<std::uint64_t> tail_{0};  // next pop
};

}  // namespace flowtune::client
