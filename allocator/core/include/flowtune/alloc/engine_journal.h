// Journals of engine changes, for mirrors: engines in other processes that
// hold the same flows (allocator/mpi, flowtune-allocator --mpi).
//
// The engine's mutators know nothing of mirrors. The caller that makes the
// changes holds a JournaledEngine instead of a BasicEngine: the same engine
// (it is one), whose seven mutators (add_flow, remove_flow, set_limits,
// set_floor, set_price, compact, set_blocks) append a record to the
// journal set with set_journal() and then make the change. Only the
// caller's own calls are recorded: a change the engine makes inside
// another (remove_flow's set_floor(id, 0)) is replayed by that one.
// Calls made through a BasicEngine reference are not recorded, so code
// that changes a journaled engine takes it by its own type (PolicyBook::
// apply is a template over the engine for this).
//
// replay_journal() makes the same changes on an engine built alike (same
// links, sites, config), which then holds the same flows under the same
// ids. Records are an op byte and its arguments, raw bytes of this build:
// for processes of one binary. replay_journal() is false, stopping there,
// at a record it cannot read or one that does not come out the same (an
// add that would get another id).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "flowtune/alloc/engine.h"

namespace flowtune::alloc {

template <typename Real>
bool replay_journal(BasicEngine<Real>& e, const std::uint8_t* data, std::size_t size);

template <typename Real>
class JournaledEngine : public BasicEngine<Real> {
 public:
  using BasicEngine<Real>::BasicEngine;

  // Where the changes go from now on; nullptr: nowhere (the default).
  void set_journal(std::vector<std::uint8_t>* journal) { journal_ = journal; }

  // BasicEngine's mutators, each recorded first (add_flow once it has its
  // id): the same arguments, results and guarantees.
  FlowId add_flow(const FlowSpec& f);
  void remove_flow(FlowId id);
  FlowError set_limits(FlowId id, double weight, double max_bps);
  bool set_floor(FlowId id, double floor_bps);
  void set_price(LinkId l, double p, std::uint8_t priority = kDefaultClass);
  void compact();
  bool set_blocks(std::uint32_t blocks);

  // replay_journal() on this engine.
  bool replay(const std::uint8_t* data, std::size_t size) {
    return replay_journal(*this, data, size);
  }

 private:
  template <typename... Args>
  void record(std::uint8_t op, const Args&... args);

  std::vector<std::uint8_t>* journal_ = nullptr;
};

extern template class JournaledEngine<float>;
extern template class JournaledEngine<double>;
extern template bool replay_journal(BasicEngine<float>&, const std::uint8_t*, std::size_t);
extern template bool replay_journal(BasicEngine<double>&, const std::uint8_t*, std::size_t);

}  // namespace flowtune::alloc
