// Dense integer ids with reuse: a table indexed by id stays as small as the
// most ids ever live at once. The engine's flow ids and the allocator's
// endpoint slots both use it; the caller owns the table and grows it when an
// id reaches its size. Freed ids are reused last-freed first (until a
// trim), so a run is deterministic for a given sequence of calls.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "flowtune/common/assert.h"

namespace flowtune {

template <typename Id = std::uint32_t>
class IdFreeList {
 public:
  // A freed id if there is one, else the next never-issued id (== issued()
  // before the call: the caller's table grows by one).
  Id acquire() {
    if (!free_.empty()) {
      const Id id = free_.back();
      free_.pop_back();
      return id;
    }
    return issued_++;
  }
  // `id` must be live (issued and not freed since).
  void release(Id id) {
    FT_ASSERT(id < issued_ && free_.size() < issued_, id, issued_);
    free_.push_back(id);
  }
  // Takes the free ids at the top of the range back, so that issued() is
  // one past the highest live id and tables indexed by id may shrink to it
  // (after a burst: a flood's flows gone, the few left keep their ids).
  // The free ids left are reused lowest first from then on, which keeps
  // the live ones low for the next trim. O(free log free): for rare use.
  void trim() {
    std::sort(free_.begin(), free_.end(), [](Id a, Id b) { return a > b; });
    std::size_t top = 0;
    while (top < free_.size() && free_[top] == issued_ - 1 - top) ++top;
    issued_ -= static_cast<Id>(top);
    free_.erase(free_.begin(), free_.begin() + static_cast<std::ptrdiff_t>(top));
    free_.shrink_to_fit();
  }
  // Ids ever issued: every live id is below it.
  Id issued() const { return issued_; }
  std::size_t live() const { return static_cast<std::size_t>(issued_) - free_.size(); }

 private:
  std::vector<Id> free_;
  Id issued_ = 0;
};

}  // namespace flowtune
