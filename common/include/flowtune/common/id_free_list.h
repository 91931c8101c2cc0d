// Dense integer ids with reuse: a table indexed by id stays as small as the
// most ids ever live at once. The engine's flow ids and the allocator's
// endpoint slots both use it; the caller owns the table and grows it when an
// id reaches its size. Freed ids are reused last-freed first, so a run is
// deterministic for a given sequence of calls.
#pragma once

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
  // Ids ever issued: every live id is below it.
  Id issued() const { return issued_; }
  std::size_t live() const { return static_cast<std::size_t>(issued_) - free_.size(); }

 private:
  std::vector<Id> free_;
  Id issued_ = 0;
};

}  // namespace flowtune
