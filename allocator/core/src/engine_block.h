// The engine's private layout, shared by engine.cc (the iteration) and
// engine_flows.cc (the flow store): its internal units and one
// FlowBlock's structure of arrays.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "flowtune/alloc/engine.h"
#include "flowtune/common/aligned.h"
#include "kernels.h"

namespace flowtune::alloc::detail {

// Internal rate unit: 1 Gbit/s.
inline constexpr double kUnitBps = 1e9;  // BasicEngine::kRateUnitBps
// Local links [0, kNullSlots) of every block are null links (price 0, ratio
// 0) that pad paths shorter than four hops, so the hot loops have no branch on
// path length. A flow pads with slot (index % kNullSlots): with a single null
// link every short flow would update the same accumulator, a store-to-load
// dependency chain through memory that serializes the scatter loop.
inline constexpr std::uint32_t kNullSlots = 16;
// The least rate cap a flow's optimizer share may have (a flow whose floor is
// its whole limit): keeps U'(cap) finite.
inline constexpr double kMinCapGbps = kMinRateBps / kUnitBps;

}  // namespace flowtune::alloc::detail

namespace flowtune::alloc {

// One FlowBlock: its flows as a structure of arrays (slot-indexed, dense), and
// private copies of every link its flows touch, addressed by local index.
template <typename Real>
struct BasicEngine<Real>::Block {
  // Flows. path[j][s] is the local index of flow s's j-th link (null slots pad).
  AlignedVector<detail::LocalLink> path[kMaxPathLinks];
  AlignedVector<Real> weight;
  AlignedVector<Real> floor_price;  // U'(cap): below it the flow would exceed cap
  AlignedVector<Real> cap;          // limit - floor (at least kMinCapGbps), Gbit/s
  AlignedVector<Real> limit;        // min(max rate, smallest path capacity), Gbit/s
  AlignedVector<Real> floor;        // reserved rate added after normalization, Gbit/s
  std::size_t floored = 0;          // slots with floor > 0
  AlignedVector<Real> x;            // raw optimizer rate, Gbit/s
  AlignedVector<Real> xn;           // normalized rate, Gbit/s
  AlignedVector<Real> d;            // scratch for non-log utilities: -dx/dP
  AlignedVector<FlowId> id;

  // Local links: copies of global price and ratio, private accumulators.
  std::vector<LinkId> local_to_global = std::vector<LinkId>(detail::kNullSlots, 0);
  std::vector<std::uint32_t> global_to_local;  // 0 = not present
  AlignedVector<Real> price = AlignedVector<Real>(detail::kNullSlots, Real{0});
  AlignedVector<Real> ratio = AlignedVector<Real>(detail::kNullSlots, Real{0});
  // Σ x and Σ -dx/dP (the Hessian diagonal's share) of this block's flows.
  AlignedVector<detail::LinkAcc<Real>> acc =
      AlignedVector<detail::LinkAcc<Real>>(detail::kNullSlots, detail::LinkAcc<Real>{});

  std::size_t size() const { return id.size(); }

  // The per-slot values a flow carries when it moves (path and id aside):
  // remove_flow and set_blocks move each of them alike.
  static constexpr auto per_slot() {
    return std::array{&Block::weight, &Block::floor_price, &Block::cap, &Block::limit,
                      &Block::floor,  &Block::x,           &Block::xn};
  }

  // Spare capacity back to the heap (after a burst of flows has gone).
  void shrink() {
    for (auto& p : path) p.shrink_to_fit();
    for (auto field : per_slot()) (this->*field).shrink_to_fit();
    d.shrink_to_fit();
    id.shrink_to_fit();
  }

  detail::FlowArrays<Real> arrays() {
    return {size(),        {path[0].data(), path[1].data(), path[2].data(), path[3].data()},
            weight.data(), floor_price.data(),
            cap.data(),    x.data(),
            xn.data()};
  }

  // Drops the copies of links none of its flows uses any more (the flows
  // that used them left) and numbers the rest again in order of first use
  // along the paths. Only between iterations: the copies' values are the
  // passes' scratch, carried over all the same. False if none went.
  bool prune() {
    const std::size_t n = local_to_global.size();
    std::vector<std::uint32_t> remap(n, 0);
    for (std::uint32_t i = 0; i < detail::kNullSlots; ++i) remap[i] = i;
    std::vector<LinkId> l2g(local_to_global.begin(), local_to_global.begin() + detail::kNullSlots);
    for (const auto& p : path) {
      for (const detail::LocalLink loc : p) {
        if (loc >= detail::kNullSlots && remap[loc] == 0) {
          remap[loc] = static_cast<std::uint32_t>(l2g.size());
          l2g.push_back(local_to_global[loc]);
        }
      }
    }
    if (l2g.size() == n) return false;
    for (auto& p : path) {
      for (detail::LocalLink& loc : p) loc = static_cast<detail::LocalLink>(remap[loc]);
    }
    for (std::size_t loc = detail::kNullSlots; loc < n; ++loc)
      global_to_local[local_to_global[loc]] = 0;
    AlignedVector<Real> new_price(l2g.size()), new_ratio(l2g.size());
    AlignedVector<detail::LinkAcc<Real>> new_acc(l2g.size());
    for (std::size_t loc = 0; loc < n; ++loc) {
      if (loc >= detail::kNullSlots && remap[loc] == 0) continue;
      new_price[remap[loc]] = price[loc];
      new_ratio[remap[loc]] = ratio[loc];
      new_acc[remap[loc]] = acc[loc];
    }
    for (std::size_t loc = detail::kNullSlots; loc < l2g.size(); ++loc) {
      global_to_local[l2g[loc]] = static_cast<std::uint32_t>(loc);
    }
    local_to_global = std::move(l2g);
    price = std::move(new_price);
    ratio = std::move(new_ratio);
    acc = std::move(new_acc);
    return true;
  }

  // l is a virtual link (layer * links + link); num_links counts them all.
  std::uint32_t local_of(std::uint32_t l, std::size_t num_links, bool* created) {
    if (global_to_local.size() < num_links) global_to_local.resize(num_links, 0);
    std::uint32_t& loc = global_to_local[l];
    if (loc == 0) {
      loc = static_cast<std::uint32_t>(local_to_global.size());
      local_to_global.push_back(l);
      price.push_back(0);
      ratio.push_back(0);
      acc.push_back({});
      *created = true;
    }
    return loc;
  }
};

}  // namespace flowtune::alloc
