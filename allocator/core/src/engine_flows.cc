// The engine's flow store: flows added, removed and re-limited, floors
// reserved on links, and FlowBlocks re-partitioned (BasicEngine's
// mutators). The iteration that reads what they leave is in engine.cc.
#include "flowtune/alloc/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>

#include "engine_block.h"
#include "flowtune/common/assert.h"
#include "kernels.h"

namespace flowtune::alloc {
namespace {

using detail::kMinCapGbps;
using detail::kNullSlots;
using detail::kUnitBps;

}  // namespace

template <typename Real>
FlowError BasicEngine<Real>::check_flow(const FlowSpec& f) const {
  if (f.path.size == 0) return FlowError::kEmptyPath;
  if (f.path.size > kMaxPathLinks) return FlowError::kPathTooLong;
  for (int i = 0; i < f.path.size; ++i) {
    if (f.path.links[i] >= capacity_.size()) return FlowError::kUnknownLink;
    for (int j = 0; j < i; ++j) {
      if (f.path.links[j] == f.path.links[i]) return FlowError::kRepeatedLink;
    }
  }
  if (FlowError e = check_limits(f.weight, f.max_bps); e != FlowError::kOk) return e;
  if (f.src_site >= num_sites_ || f.dst_site >= num_sites_) return FlowError::kBadSite;
  if (f.priority >= kNumClasses) return FlowError::kBadClass;
  const Block& k = *blocks_[block_of(f)];
  std::size_t fresh = 0;
  const int lay = layer_of_[f.priority];
  if (lay < 0) {
    fresh = static_cast<std::size_t>(f.path.size);  // a class not used yet: every pair is new
  } else {
    for (LinkId l : f.path) {
      const std::uint32_t v = virtual_link(static_cast<std::uint32_t>(lay), l);
      fresh += k.global_to_local.size() <= v || k.global_to_local[v] == 0;
    }
  }
  if (k.local_to_global.size() + fresh > detail::kMaxLocalLinks) return FlowError::kBlockFull;
  return FlowError::kOk;
}

template <typename Real>
double BasicEngine<Real>::min_path_capacity(const Path& p) const {
  double c = std::numeric_limits<double>::infinity();
  for (LinkId l : p) c = std::min(c, static_cast<double>(nominal_[l]));
  return c;
}

template <typename Real>
Path BasicEngine<Real>::path_of(const Block& k, std::size_t s) const {
  Path p;
  for (const auto& hop : k.path) {
    if (hop[s] >= kNullSlots) {
      p.push(static_cast<LinkId>(k.local_to_global[hop[s]] % capacity_.size()));
    }
  }
  return p;
}

template <typename Real>
void BasicEngine<Real>::refresh_cap(Block& k, std::size_t s) {
  const double cap =
      std::max(static_cast<double>(k.limit[s]) - static_cast<double>(k.floor[s]), kMinCapGbps);
  k.cap[s] = static_cast<Real>(cap);
  k.floor_price[s] = static_cast<Real>(utility_.marginal(static_cast<double>(k.weight[s]), cap));
}

template <typename Real>
void BasicEngine<Real>::set_reserved(LinkId l, double gbps) {
  const double nominal = static_cast<double>(nominal_[l]);
  // Floors added and removed in any order must leave an unreserved link
  // exactly at its capacity.
  if (gbps < nominal * 1e-12) gbps = 0;
  reserved_[l] = gbps;
  capacity_[l] = static_cast<Real>(nominal - gbps);
  inv_capacity_[l] = Real{1} / capacity_[l];
}

template <typename Real>
FlowError BasicEngine<Real>::set_limits(FlowId id, double weight, double max_bps) {
  FT_ASSERT(has_flow(id), id);
  if (FlowError e = check_limits(weight, max_bps); e != FlowError::kOk) return e;
  const Slot& sl = slots_[id];
  Block& k = *blocks_[sl.block];
  double limit = min_path_capacity(path_of(k, sl.index));
  if (max_bps > 0) limit = std::min(limit, max_bps / kUnitBps);
  // A floor never exceeds the limit (set_floor); a lower cap takes it down.
  if (static_cast<double>(k.floor[sl.index]) > limit) set_floor(id, limit * kUnitBps);
  k.weight[sl.index] = static_cast<Real>(weight);
  k.limit[sl.index] = static_cast<Real>(limit);
  refresh_cap(k, sl.index);
  return FlowError::kOk;
}

template <typename Real>
bool BasicEngine<Real>::set_floor(FlowId id, double floor_bps) {
  FT_ASSERT(has_flow(id), id);
  if (!(floor_bps >= 0) || !std::isfinite(floor_bps)) return false;
  const Slot& sl = slots_[id];
  Block& k = *blocks_[sl.block];
  const double g = floor_bps / kUnitBps;
  const double old = static_cast<double>(k.floor[sl.index]);
  if (g > static_cast<double>(k.limit[sl.index]) * (1 + 1e-12)) return false;
  const Path p = path_of(k, sl.index);
  for (LinkId l : p) {
    const double limit = static_cast<double>(nominal_[l]) * config_.max_reserved_share;
    if (g > old && reserved_[l] - old + g > limit * (1 + 1e-12)) return false;
  }
  for (LinkId l : p) set_reserved(l, reserved_[l] - old + g);
  k.floored = k.floored - (old > 0) + (g > 0);
  k.floor[sl.index] = static_cast<Real>(g);
  refresh_cap(k, sl.index);
  return true;
}

template <typename Real>
double BasicEngine<Real>::floor_bps(FlowId id) const {
  return flow_bps(id, &Block::floor);
}

template <typename Real>
double BasicEngine<Real>::reserved_bps(LinkId l) const {
  FT_ASSERT(l < reserved_.size(), l);
  return reserved_[l] * kUnitBps;
}

template <typename Real>
FlowId BasicEngine<Real>::add_flow(const FlowSpec& f) {
  FlowError err = check_flow(f);
  FT_ASSERT(err == FlowError::kOk, to_string(err));
  std::uint32_t b = block_of(f);
  Block& k = *blocks_[b];

  const std::uint32_t lay = layer(f.priority);
  bool created = false;
  const auto pad = static_cast<std::uint32_t>(k.size() % kNullSlots);
  for (int j = 0; j < kMaxPathLinks; ++j) {
    std::uint32_t loc =
        j < f.path.size ? k.local_of(virtual_link(lay, f.path.links[j]), price_.size(), &created)
                        : pad;
    k.path[j].push_back(static_cast<detail::LocalLink>(loc));
  }
  if (created) contributions_dirty_ = true;
  count_uses(f.path, true);

  // The flow never asks for more than its cap or its smallest link; flooring
  // its path price at U'(cap) enforces that and keeps every division finite
  // when the path price is zero.
  double cap = min_path_capacity(f.path);
  if (f.max_bps > 0) cap = std::min(cap, f.max_bps / kUnitBps);
  k.weight.push_back(static_cast<Real>(f.weight));
  k.cap.push_back(static_cast<Real>(cap));
  k.limit.push_back(static_cast<Real>(cap));
  k.floor.push_back(0);
  k.floor_price.push_back(static_cast<Real>(utility_.marginal(f.weight, cap)));
  k.x.push_back(0);
  k.xn.push_back(0);

  const FlowId id = ids_.acquire();
  if (id == slots_.size()) slots_.push_back({});
  k.id.push_back(id);
  slots_[id] = {b, static_cast<std::uint32_t>(k.size() - 1), f.src_site, f.dst_site};
  ++live_flows_;
  return id;
}

template <typename Real>
void BasicEngine<Real>::remove_flow(FlowId id) {
  FT_ASSERT(has_flow(id), id);
  set_floor(id, 0);  // its reservation goes with it
  Slot s = slots_[id];
  Block& k = *blocks_[s.block];
  count_uses(path_of(k, s.index), false);
  std::size_t last = k.size() - 1;
  auto move_last = [&](auto& v) {
    v[s.index] = v[last];
    v.pop_back();
  };
  for (auto& p : k.path) move_last(p);
  for (auto field : Block::per_slot()) move_last(k.*field);
  if (s.index != last) slots_[k.id[last]].index = s.index;
  move_last(k.id);
  slots_[id].index = kFreeSlot;
  ids_.release(id);
  --live_flows_;
}

template <typename Real>
void BasicEngine<Real>::compact() {
  ids_.trim();
  slots_.resize(ids_.issued());
  slots_.shrink_to_fit();
  for (auto& k : blocks_) k->shrink();
}

template <typename Real>
bool BasicEngine<Real>::set_blocks(std::uint32_t blocks) {
  if (blocks == 0 || blocks > 64) throw std::invalid_argument("blocks must be between 1 and 64");
  if (blocks == layout_) return true;
  if (blocks == 1 && capacity_.size() * kNumClasses > detail::kMaxLocalLinks - kNullSlots)
    return false;
  // Placed by the new count; layout_ changes only once the new blocks are
  // whole, so a refusal or a failed allocation leaves the engine as it was.
  const auto place = [&](const Slot& sl) { return block_in(blocks, sl.src_site, sl.dst_site); };
  std::vector<std::unique_ptr<Block>> fresh;
  for (std::size_t b = 0; b < std::size_t{blocks} * blocks; ++b)
    fresh.push_back(std::make_unique<Block>());
  // Sized once: growing a dozen arrays flow by flow would copy each again.
  std::vector<std::size_t> count(fresh.size(), 0);
  for (const auto& kp : blocks_) {
    for (FlowId id : kp->id) ++count[place(slots_[id])];
  }
  for (std::size_t b = 0; b < fresh.size(); ++b) {
    Block& n = *fresh[b];
    for (auto& p : n.path) p.reserve(count[b]);
    for (auto field : Block::per_slot()) (n.*field).reserve(count[b]);
    n.id.reserve(count[b]);
    if (count[b] > 0) n.global_to_local.assign(price_.size(), 0);  // as local_of() would
  }
  std::vector<Slot> moved(slots_.size());
  // Old blocks in order, slots in order: a block keeps its flows' relative
  // order, so the sums over them do not depend on where they came from.
  for (const auto& kp : blocks_) {
    const Block& k = *kp;
    for (std::size_t s = 0; s < k.size(); ++s) {
      const Slot& sl = slots_[k.id[s]];
      const std::uint32_t nb = place(sl);
      Block& n = *fresh[nb];
      bool created = false;
      const auto pad = static_cast<std::uint32_t>(n.size() % kNullSlots);
      for (int j = 0; j < kMaxPathLinks; ++j) {
        const auto hop = k.path[j][s];
        const std::uint32_t loc =
            hop >= kNullSlots ? n.local_of(k.local_to_global[hop], price_.size(), &created) : pad;
        n.path[j].push_back(static_cast<detail::LocalLink>(loc));
      }
      if (n.local_to_global.size() > detail::kMaxLocalLinks) return false;
      for (auto field : Block::per_slot()) (n.*field).push_back((k.*field)[s]);
      n.floored += k.floor[s] > 0;
      n.id.push_back(k.id[s]);
      moved[k.id[s]] = {nb, static_cast<std::uint32_t>(n.size() - 1), sl.src_site, sl.dst_site};
    }
  }
  for (const auto& k : fresh) {
    for (FlowId id : k->id) slots_[id] = moved[id];
  }
  blocks_ = std::move(fresh);
  layout_ = blocks;
  contributions_dirty_ = true;
  return true;
}

// A link's live flows, counted as flows come and go; the list of links in
// use is made again before the next iteration when one started or stopped
// being used.
template <typename Real>
void BasicEngine<Real>::count_uses(const Path& p, bool add) {
  for (LinkId l : p) {
    const bool edge = add ? uses_[l]++ == 0 : --uses_[l] == 0;
    if (edge) {
      used_bits_[l >> 6] ^= std::uint64_t{1} << (l & 63);
      used_dirty_ = true;
    }
  }
}

// engine.cc instantiates the class; these members are defined here.
#define FT_ENGINE_FLOW_STORE(Real)                                           \
  template FlowError BasicEngine<Real>::check_flow(const FlowSpec&) const;   \
  template FlowError BasicEngine<Real>::set_limits(FlowId, double, double);  \
  template bool BasicEngine<Real>::set_floor(FlowId, double);                \
  template double BasicEngine<Real>::floor_bps(FlowId) const;                \
  template double BasicEngine<Real>::reserved_bps(LinkId) const;             \
  template FlowId BasicEngine<Real>::add_flow(const FlowSpec&);              \
  template void BasicEngine<Real>::remove_flow(FlowId);                      \
  template void BasicEngine<Real>::compact();                                \
  template bool BasicEngine<Real>::set_blocks(std::uint32_t);                \
  template double BasicEngine<Real>::min_path_capacity(const Path&) const;   \
  template Path BasicEngine<Real>::path_of(const Block&, std::size_t) const; \
  template void BasicEngine<Real>::refresh_cap(Block&, std::size_t);         \
  template void BasicEngine<Real>::set_reserved(LinkId, double);             \
  template void BasicEngine<Real>::count_uses(const Path&, bool);
FT_ENGINE_FLOW_STORE(float)
FT_ENGINE_FLOW_STORE(double)
#undef FT_ENGINE_FLOW_STORE

}  // namespace flowtune::alloc
