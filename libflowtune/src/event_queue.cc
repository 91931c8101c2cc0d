#include "event_queue.h"

namespace flowtune::client {

EventQueue::EventQueue(std::size_t capacity_pow2)
    : cells_(new Cell[capacity_pow2]), mask_(capacity_pow2 - 1) {
  for (std::size_t i = 0; i < capacity_pow2; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
}

bool EventQueue::push(const Event& e) {
  std::uint64_t pos = head_.load(std::memory_order_relaxed);
  for (;;) {
    Cell& c = cells_[pos & mask_];
    const std::uint64_t seq = c.seq.load(std::memory_order_acquire);
    if (seq == pos) {
      if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        c.event = e;
        c.seq.store(pos + 1, std::memory_order_release);
        return true;
      }
    } else if (seq < pos) {
      return false;  // the consumer has not freed this cell: full
    } else {
      pos = head_.load(std::memory_order_relaxed);
    }
  }
}

bool EventQueue::pop(Event* e) {
  const std::uint64_t pos = tail_.load(std::memory_order_relaxed);
  Cell& c = cells_[pos & mask_];
  if (c.seq.load(std::memory_order_acquire) != pos + 1) return false;
  *e = c.event;
  c.seq.store(pos + mask_ + 1, std::memory_order_release);
  tail_.store(pos + 1, std::memory_order_relaxed);
  return true;
}

bool EventQueue::empty() const {
  const std::uint64_t pos = tail_.load(std::memory_order_relaxed);
  return cells_[pos & mask_].seq.load(std::memory_order_seq_cst) != pos + 1;
}

}  // namespace flowtune::client
