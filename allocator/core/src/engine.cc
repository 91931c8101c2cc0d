#include "flowtune/alloc/engine.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <span>
#include <stdexcept>

#include "engine_block.h"
#include "flowtune/common/assert.h"
#include "kernels.h"
#include "price_step.h"

namespace flowtune::alloc {
namespace {

using detail::kNullSlots;
using detail::kUnitBps;

// The price update visits only the links in use when they are under three
// quarters of a range (engine_bench BM_SparseVsDense: at 70% in use it is
// still 5% faster; each costs a load of its id more than a sweep's step).
constexpr bool few_used(std::size_t used, std::size_t range) { return 4 * used < 3 * range; }
// Every link id of [b, e), as a range for the price update's loop (not
// std::views::iota, which clang 14 cannot compile against libstdc++ 12).
struct LinkIds {
  struct It {
    std::size_t l;
    std::size_t operator*() const { return l; }
    It& operator++() {
      ++l;
      return *this;
    }
    bool operator!=(const It& o) const { return l != o.l; }
  };
  std::size_t b, e;
  It begin() const { return {b}; }
  It end() const { return {e}; }
};
// Dead link copies a block may keep before it drops them (prepare()): a
// prune costs about one pass over the block, so it comes at most once per
// this many arrivals of new links.
constexpr std::size_t kPruneSlack = 64;

template <typename Real>
using Acc = detail::LinkAcc<Real>;

using detail::PriceStep;

}  // namespace

const char* to_string(Algorithm a) {
  switch (a) {
    case Algorithm::kNed: return "ned";
    case Algorithm::kGradient: return "gradient";
  }
  return "?";
}

const char* to_string(Normalizer n) {
  switch (n) {
    case Normalizer::kNone: return "none";
    case Normalizer::kUNorm: return "unorm";
    case Normalizer::kFNorm: return "fnorm";
  }
  return "?";
}

const char* to_string(FlowError e) {
  switch (e) {
    case FlowError::kOk: return "ok";
    case FlowError::kEmptyPath: return "path is empty";
    case FlowError::kPathTooLong: return "path has more than 4 links";
    case FlowError::kUnknownLink: return "path names an unknown link";
    case FlowError::kRepeatedLink: return "path visits a link twice";
    case FlowError::kBadWeight: return "weight must be between 1e-6 and 1e6";
    case FlowError::kBadMaxRate: return "max rate must be 0 (none) or between 1e3 and 1e15 bits/s";
    case FlowError::kBadSite: return "site out of range";
    case FlowError::kBlockFull:
      return "flow block touches too many (class, link) pairs (use more blocks)";
    case FlowError::kBadClass: return "class must be between 0 and 7";
  }
  return "?";
}

FlowSpec make_flow(const Topology& t, HostId src, HostId dst, std::uint64_t flow_hash,
                   double weight) {
  FlowSpec f;
  f.path = t.path(src, dst, flow_hash);
  f.weight = weight;
  f.src_site = t.site_of_host(src);
  f.dst_site = t.site_of_host(dst);
  return f;
}

template <typename Real>
BasicEngine<Real>::BasicEngine(std::vector<double> link_capacity_bps, std::uint32_t num_sites,
                               const EngineConfig& config)
    : config_(config),
      layout_(config.blocks),
      utility_(config.alpha),
      num_sites_(num_sites),
      kernels_(config.portable_kernels ? &detail::generic_kernels<Real>()
                                       : &detail::kernels<Real>()) {
  if (num_sites == 0) throw std::invalid_argument("num_sites must be >= 1");
  if (config.blocks == 0 || config.blocks > 64) {
    throw std::invalid_argument("blocks must be between 1 and 64");
  }
  // γ = 1 is a full Newton step; past it NED overshoots every price and
  // never converges (flowtune-sim solve at 1.2-1000: none did).
  if (!(config.gamma > 0 && config.gamma <= 1)) {
    throw std::invalid_argument("gamma must be within (0, 1]");
  }
  if (!(config.gradient_step > 0) || !std::isfinite(config.gradient_step)) {
    throw std::invalid_argument("gradient step must be a positive finite number");
  }
  // Beyond α = 10 the allocation is within a few percent of max-min anyway,
  // and U'(cap) = w·cap^-α would underflow.
  if (!(config.alpha >= 0.1 && config.alpha <= 10)) {
    throw std::invalid_argument("alpha must be between 0.1 and 10");
  }
  if (!(config.tolerance > 0)) throw std::invalid_argument("tolerance must be positive");
  if (!(config.class_reserve >= kMinResidualShare && config.class_reserve <= kMaxClassReserve)) {
    throw std::invalid_argument("class reserve must be between 1e-9 and 0.1 of a link");
  }
  if (!(config.max_reserved_share > 0 && config.max_reserved_share <= kMaxReservedShare)) {
    throw std::invalid_argument("max reserved share must be above 0 and at most 0.99 of a link");
  }
  capacity_.reserve(link_capacity_bps.size());
  for (double c : link_capacity_bps) {
    if (!(c >= kMinRateBps && c <= kMaxRateBps)) {
      throw std::invalid_argument("link capacities must be between 1e3 and 1e15 bits/s");
    }
    nominal_.push_back(static_cast<Real>(c / kUnitBps));
    capacity_.push_back(nominal_.back());
    inv_capacity_.push_back(Real{1} / capacity_.back());
  }
  reserved_.assign(capacity_.size(), 0.0);
  // Prices start at 1 once, when the allocator starts (Algorithm 1), and
  // persist across flow arrivals and departures.
  price_.assign(capacity_.size(), Real{kInitialPrice});
  ratio_.assign(capacity_.size(), Real{0});
  uses_.assign(capacity_.size(), 0);
  used_bits_.assign((capacity_.size() + 63) / 64, 0);
  // The default class's layer exists from the start: an engine whose flows
  // all carry the default class is the single-layer engine.
  layer_of_.fill(-1);
  layer_of_[kDefaultClass] = 0;
  layers_by_class_ = {0};
  std::size_t nb = std::size_t{config.blocks} * config.blocks;
  for (std::size_t b = 0; b < nb; ++b) blocks_.push_back(std::make_unique<Block>());
}

template <typename Real>
BasicEngine<Real>::~BasicEngine() = default;

FlowError check_limits(double weight, double max_bps) {
  if (!(weight >= kMinWeight && weight <= kMaxWeight)) return FlowError::kBadWeight;
  if (max_bps != 0 && !(max_bps >= kMinRateBps && max_bps <= kMaxRateBps)) {
    return FlowError::kBadMaxRate;
  }
  return FlowError::kOk;
}

template <typename Real>
double BasicEngine<Real>::flow_bps(FlowId id, AlignedVector<Real> Block::*field) const {
  FT_ASSERT(has_flow(id), id);
  const Slot& s = slots_[id];
  return static_cast<double>(((*blocks_[s.block]).*field)[s.index]) * kUnitBps;
}

template <typename Real>
std::uint32_t BasicEngine<Real>::block_in(std::uint32_t layout, std::uint32_t src_site,
                                          std::uint32_t dst_site) const {
  std::uint64_t nb = layout;
  std::uint64_t sb = std::uint64_t{src_site} * nb / num_sites_;
  std::uint64_t db = std::uint64_t{dst_site} * nb / num_sites_;
  return static_cast<std::uint32_t>(sb * nb + db);
}

template <typename Real>
std::uint32_t BasicEngine<Real>::layer(std::uint8_t c) {
  FT_ASSERT(c < kNumClasses, c);
  if (layer_of_[c] >= 0) return static_cast<std::uint32_t>(layer_of_[c]);
  const auto lay = static_cast<std::uint32_t>(layers_by_class_.size());
  layer_of_[c] = static_cast<std::int8_t>(lay);
  // Prices start at 1, as the first layer's did (Algorithm 1).
  price_.resize(price_.size() + capacity_.size(), Real{kInitialPrice});
  ratio_.resize(ratio_.size() + capacity_.size(), Real{0});
  layers_by_class_.clear();
  for (std::uint32_t k = 0; k < kNumClasses; ++k) {
    if (layer_of_[k] >= 0) layers_by_class_.push_back(static_cast<std::uint32_t>(layer_of_[k]));
  }
  contributions_dirty_ = true;
  return lay;
}

template <typename Real>
double BasicEngine<Real>::price(LinkId l, std::uint8_t c) const {
  FT_ASSERT(c < kNumClasses && l < capacity_.size(), l);
  if (layer_of_[c] < 0) return 0;
  return static_cast<double>(price_[virtual_link(static_cast<std::uint32_t>(layer_of_[c]), l)]);
}

template <typename Real>
void BasicEngine<Real>::set_price(LinkId l, double p, std::uint8_t c) {
  FT_ASSERT(l < capacity_.size(), l);
  price_[virtual_link(layer(c), l)] = static_cast<Real>(p);
}

template <typename Real>
std::vector<std::uint8_t> BasicEngine<Real>::classes() const {
  std::vector<std::uint8_t> v;
  for (std::uint8_t k = 0; k < kNumClasses; ++k) {
    if (layer_of_[k] >= 0) v.push_back(k);
  }
  return v;
}

template <typename Real>
bool BasicEngine<Real>::has_flow(FlowId id) const {
  return id < slots_.size() && slots_[id].index != kFreeSlot;
}

template <typename Real>
void BasicEngine<Real>::rebuild_contributions() {
  std::size_t nl = price_.size();  // virtual links: every layer's
  contrib_begin_.assign(nl + 1, 0);
  for (const auto& k : blocks_) {
    for (std::size_t loc = kNullSlots; loc < k->local_to_global.size(); ++loc) {
      ++contrib_begin_[k->local_to_global[loc] + 1];
    }
  }
  for (std::size_t l = 0; l < nl; ++l) contrib_begin_[l + 1] += contrib_begin_[l];
  contrib_.resize(contrib_begin_[nl]);
  std::vector<std::uint32_t> fill(contrib_begin_.begin(), contrib_begin_.end() - 1);
  for (std::uint32_t b = 0; b < blocks_.size(); ++b) {
    const auto& k = *blocks_[b];
    for (std::uint32_t loc = kNullSlots; loc < k.local_to_global.size(); ++loc) {
      std::uint32_t pos = fill[k.local_to_global[loc]]++;
      contrib_[pos] = &k.acc[loc];
    }
  }
  contributions_dirty_ = false;
}

// The ascending list of links in use, from the bit set. A link no flow uses
// any more carries nothing in any layer: every layer's ratio there is 0, as
// a sweep over every link would make it (a layer can have had ratio 1 there
// for a lower class's flows), and the price update passes it by.
template <typename Real>
void BasicEngine<Real>::refresh_used_links() {
  const std::size_t np = capacity_.size(), nl = price_.size();
  for (std::uint32_t l : used_links_) {
    if ((used_bits_[l >> 6] >> (l & 63) & 1) == 0) {
      for (std::size_t v = l; v < nl; v += np) ratio_[v] = 0;
    }
  }
  used_links_.clear();
  for (std::size_t w = 0; w < used_bits_.size(); ++w) {
    for (std::uint64_t bits = used_bits_[w]; bits != 0; bits &= bits - 1) {
      used_links_.push_back(static_cast<std::uint32_t>(64 * w + static_cast<std::size_t>(std::countr_zero(bits))));
    }
  }
  used_dirty_ = false;
}

template <typename Real>
void BasicEngine<Real>::prepare() {
  // A block whose copies outnumber what its flows can use (four links each)
  // by more than kPruneSlack drops the dead ones: the passes copy prices
  // and ratios into every copy, so a long-lived block that saw many hosts
  // come and go would otherwise pay for all of them each iteration.
  if (config_.sparse_links) {
    for (auto& k : blocks_) {
      if (k->local_to_global.size() > kNullSlots + kMaxPathLinks * k->size() + kPruneSlack &&
          k->prune()) {
        contributions_dirty_ = true;
      }
    }
  }
  if (contributions_dirty_) rebuild_contributions();
  if (used_dirty_) refresh_used_links();
}

template <typename Real>
std::size_t BasicEngine<Real>::block_size(std::size_t b) const {
  return blocks_[b]->size();
}

// Rate update (Algorithm 1, eq. 3) for one FlowBlock, and its share of each
// link's load and Hessian diagonal (eq. 4):
//   P_s = Σ_{l∈L(s)} p_l (floored at U'(cap_s)),  x_s = U'^-1(P_s),
//   y_l += x_s,  h_l += -dx_s/dP = x_s / (α P_s).
// Flows are a structure of arrays with paths padded to four local link ids,
// and the link arrays are this block's private copies, small enough to stay
// in L1/L2. The loop is split in two: rates (gathers of prices, vectorized)
// and accumulation (scalar scatter of (y, h) pairs); see kernels_impl.h.
template <typename Real>
void BasicEngine<Real>::rate_pass(std::size_t b) {
  Block& k = *blocks_[b];
  std::size_t nloc = k.local_to_global.size();
  for (std::size_t loc = kNullSlots; loc < nloc; ++loc) {
    k.price[loc] = price_[k.local_to_global[loc]];
  }
  std::fill(k.acc.begin(), k.acc.end(), Acc<Real>{});
  detail::FlowArrays<Real> f = k.arrays();
  if (utility_.is_log()) {
    kernels_->rate_pass_log(f, k.price.data(), k.acc.data());
    return;
  }
  k.d.resize(f.n);
  for (std::size_t s = 0; s < f.n; ++s) {
    Real P = (k.price[f.path[0][s]] + k.price[f.path[1][s]]) +
             (k.price[f.path[2][s]] + k.price[f.path[3][s]]);
    // The floor can underflow in float for large α: never divide by zero.
    P = std::max({P, f.floor_price[s], std::numeric_limits<Real>::min()});
    f.x[s] = std::min(utility_.rate(f.weight[s], P), f.cap[s]);
    k.d[s] = utility_.slope(f.x[s], P);
  }
  kernels_->accumulate(f, k.d.data(), k.acc.data());
}

// Price update (eq. 4 for NED; p += step·G for Gradient) over global links
// [begin, end): sums the blocks' private copies in block order, so the result
// does not depend on how a driver schedules blocks.
template <typename Real>
detail::LinkAcc<Real> BasicEngine<Real>::link_sum(std::size_t v) const {
  Acc<Real> a{0, 0};
  for (std::uint32_t c = contrib_begin_[v]; c < contrib_begin_[v + 1]; ++c) {
    a.y += contrib_[c]->y;
    a.h += contrib_[c]->h;
  }
  return a;
}

template <typename Real>
typename BasicEngine<Real>::LinkPartial BasicEngine<Real>::update_links(std::size_t begin,
                                                                        std::size_t end) {
  auto layered = [this](std::size_t pos, std::size_t l) {
    return link_sum(virtual_link(layers_by_class_[pos], static_cast<LinkId>(l)));
  };
  auto single = [this](std::size_t, std::size_t l) { return link_sum(l); };
  auto run = [&](const auto& links) {
    return layers_by_class_.size() > 1 ? update_layered(links, layered) : update_single(links, single);
  };
  // Where few links carry flows, visiting only those is the same update:
  // the rest have zero sums, keep their prices and have ratio 0 already.
  if (config_.sparse_links && few_used(used_links_.size(), end - begin)) {
    const auto lo = std::lower_bound(used_links_.begin(), used_links_.end(), begin);
    const auto hi = std::lower_bound(lo, used_links_.end(), end);
    return run(std::span<const std::uint32_t>(used_links_.data() + (lo - used_links_.begin()),
                                              static_cast<std::size_t>(hi - lo)));
  }
  return run(LinkIds{begin, end});
}

// The sums come from elsewhere: processes that each hold some FlowBlocks
// summed them (allocator/mpi). yh is indexed like sum_blocks() writes it.
template <typename Real>
template <typename Links>
typename BasicEngine<Real>::LinkPartial BasicEngine<Real>::update_from(const Links& links, const Real* yh) {
  const std::size_t nl = capacity_.size();
  auto sum = [yh, nl](std::size_t pos, std::size_t l) {
    const std::size_t k = 2 * (pos * nl + l);
    return Acc<Real>{yh[k], yh[k + 1]};
  };
  if (layers_by_class_.size() > 1) return update_layered(links, sum);
  return update_single(links, sum);
}

template <typename Real>
typename BasicEngine<Real>::LinkPartial BasicEngine<Real>::update_links_from(std::size_t begin,
                                                                             std::size_t end,
                                                                             const Real* yh) {
  return update_from(LinkIds{begin, end}, yh);
}

template <typename Real>
typename BasicEngine<Real>::LinkPartial BasicEngine<Real>::update_listed_links_from(const LinkId* links,
                                                                                    std::size_t n,
                                                                                    const Real* yh) {
  return update_from(std::span<const LinkId>(links, n), yh);
}

// One class in use: its layer is the first one made, so virtual link l is link l.
template <typename Real>
template <typename Links, typename Sum>
typename BasicEngine<Real>::LinkPartial BasicEngine<Real>::update_single(const Links& links,
                                                                         Sum sum_of) {
  LinkPartial part;
  const PriceStep<Real> step{static_cast<Real>(config_.gamma),
                             static_cast<Real>(config_.gradient_step),
                             config_.algorithm == Algorithm::kNed};
  Real max_residual = 0;
  Real max_util = 0;
  for (const std::size_t l : links) {
    const Acc<Real> a = sum_of(0, l);
    // One division per link (the Newton step); capacities are inverted once.
    const Real inv_cap = inv_capacity_[l];
    const Real r = a.y * inv_cap;
    ratio_[l] = r;
    // A link without flows has no information about its price: it keeps it.
    if (!(a.h > 0)) continue;
    max_residual = std::max(max_residual, step(price_[l], a.y, a.h, capacity_[l], inv_cap));
    max_util = std::max(max_util, r);
  }
  part.max_residual = static_cast<double>(max_residual);
  part.max_raw_utilization = static_cast<double>(max_util);
  part.max_ratio = part.max_raw_utilization;
  return part;
}

// update_links with several classes in use (sum_of(i, l): the sums of the
// i-th layer in class order on link l). For each link, its layers with
// flows in class order: class k's capacity there is what the classes above
// it kept, R_k = c - Σ_{j<k} min(y_j, K_j) (this iteration's raw loads), and
// its price takes the Newton step against R_k. It keeps at most
// K_k = R_k - f b_k, with f = class_reserve * c and b_k the classes with
// flows below it there: its F-NORM ratio is y_k / K_k, and at least 1 where a
// lower class crosses the link (a class with classes below it is never
// scaled up there). By induction R_k >= f (b_k + 1), so every class keeps at
// least f (a starved class still trickles) and the classes together never
// exceed c (the last one, b = 0, is held to the rest).
template <typename Real>
template <typename Links, typename Sum>
typename BasicEngine<Real>::LinkPartial BasicEngine<Real>::update_layered(const Links& links,
                                                                          Sum sum_of) {
  LinkPartial part;
  const PriceStep<Real> step{static_cast<Real>(config_.gamma),
                             static_cast<Real>(config_.gradient_step),
                             config_.algorithm == Algorithm::kNed};
  const std::size_t nlay = layers_by_class_.size();
  Real max_residual = 0, max_util = 0, max_ratio = 0;
  for (const std::size_t l : links) {
    const Real cap = capacity_[l];
    const Real inv_cap = inv_capacity_[l];
    const Real reserve = cap * static_cast<Real>(config_.class_reserve);
    Real total = 0;
    // The lowest layer with flows on this link, and how many have flows. A
    // layer has flows where its Hessian share is positive (every flow adds
    // x / (alpha P) > 0), not merely where some block keeps a copy of the
    // link: a block keeps the copies its departed flows used, and a class
    // that left a link must not hold a reserve there (nor may the answer
    // depend on how flows are spread over blocks).
    std::array<Acc<Real>, kNumClasses> sums;
    std::size_t last = 0, with_flows = 0;
    for (std::size_t i = 0; i < nlay; ++i) {
      sums[i] = sum_of(i, l);
      if (sums[i].h > 0) {
        last = i;
        ++with_flows;
      }
    }
    // avail: what the classes above left. A layer's prices step against all
    // of it (so a flow capped at its link is not held off its optimum), but
    // it is normalized against that less the reserves of the layers with
    // flows below it, and only what it keeps after that is taken from avail.
    Real avail = cap;
    std::size_t below = with_flows;
    for (std::size_t i = 0; i < nlay; ++i) {
      const std::uint32_t v = virtual_link(layers_by_class_[i], static_cast<LinkId>(l));
      const Acc<Real> a = sums[i];
      const bool has_flows = a.h > 0;
      if (has_flows) --below;
      const Real R = std::max(avail, reserve);
      const Real kept = std::max(R - reserve * static_cast<Real>(below), reserve);
      Real r = a.y / kept;
      if (i < last) r = std::max(r, Real{1});
      ratio_[v] = r;
      max_ratio = std::max(max_ratio, r);
      if (has_flows) avail -= std::min(a.y, kept);
      total += a.y;
      if (!(a.h > 0)) continue;
      max_residual = std::max(max_residual, step(price_[v], a.y, a.h, R, inv_cap));
    }
    max_util = std::max(max_util, total * inv_cap);
  }
  part.max_residual = static_cast<double>(max_residual);
  part.max_raw_utilization = static_cast<double>(max_util);
  part.max_ratio = static_cast<double>(max_ratio);
  return part;
}

template <typename Real>
typename BasicEngine<Real>::LinkPartial BasicEngine<Real>::combine(const LinkPartial& a,
                                                                   const LinkPartial& b) {
  return {std::max(a.max_residual, b.max_residual),
          std::max(a.max_raw_utilization, b.max_raw_utilization),
          std::max(a.max_ratio, b.max_ratio)};
}

template <typename Real>
void BasicEngine<Real>::finish_links(const LinkPartial& all) {
  stats_.max_residual = all.max_residual;
  stats_.max_raw_utilization = all.max_raw_utilization;
  stats_.converged = all.max_residual <= config_.tolerance;
  max_ratio_ = static_cast<Real>(all.max_ratio);
  ++iterations_;
}

// Normalization for one FlowBlock (§3). F-NORM (eq. 6) divides each flow by
// the largest load ratio r_l = y_l / c_l on its path: every flow on link l is
// divided by at least r_l, so no link exceeds capacity, and flows whose links
// are all under-used scale up. U-NORM (eq. 5) divides every flow by the
// global max ratio. Rates never exceed the flow's cap.
// Floors are added afterwards, by a pass only over blocks that hold one.
template <typename Real>
void BasicEngine<Real>::normalize_pass(std::size_t b) {
  Block& k = *blocks_[b];
  const std::size_t n = k.size();
  const Real* __restrict x = k.x.data();
  const Real* __restrict cap = k.cap.data();
  Real* __restrict xn = k.xn.data();
  if (config_.normalizer == Normalizer::kNone) {
    std::copy(x, x + n, xn);
  } else if (config_.normalizer == Normalizer::kUNorm) {
    const Real inv = max_ratio_ > 0 ? Real{1} / max_ratio_ : Real{1};
    for (std::size_t s = 0; s < n; ++s) xn[s] = std::min(x[s] * inv, cap[s]);
  } else {
    std::size_t nloc = k.local_to_global.size();
    for (std::size_t loc = kNullSlots; loc < nloc; ++loc) {
      k.ratio[loc] = ratio_[k.local_to_global[loc]];
    }
    kernels_->fnorm(k.arrays(), k.ratio.data());
  }
  if (k.floored == 0) return;
  const Real* __restrict fl = k.floor.data();
  for (std::size_t s = 0; s < n; ++s) xn[s] += fl[s];
}

template <typename Real>
std::uint32_t BasicEngine<Real>::class_mask() const {
  std::uint32_t mask = 0;
  for (std::uint32_t c = 0; c < kNumClasses; ++c) {
    if (layer_of_[c] >= 0) mask |= 1u << c;
  }
  return mask;
}

template <typename Real>
void BasicEngine<Real>::use_classes(std::uint32_t mask) {
  for (std::uint32_t c = 0; c < kNumClasses; ++c) {
    if ((mask >> c) & 1u) (void)layer(static_cast<std::uint8_t>(c));
  }
}

template <typename Real>
std::uint8_t BasicEngine<Real>::class_of_layer(std::uint32_t layer) const {
  FT_ASSERT(layer < layers_by_class_.size(), layer);
  std::uint8_t c = 0;
  while (layer_of_[c] != static_cast<std::int8_t>(layer)) ++c;
  return c;
}

template <typename Real>
typename BasicEngine<Real>::BlockSums BasicEngine<Real>::block_sums(std::size_t b) const {
  const Block& k = *blocks_[b];
  static_assert(sizeof(Acc<Real>) == 2 * sizeof(Real), "(y, h) pairs must be contiguous");
  return {k.local_to_global.data() + kNullSlots, reinterpret_cast<const Real*>(k.acc.data() + kNullSlots),
          k.local_to_global.size() - kNullSlots};
}

template <typename Real>
void BasicEngine<Real>::sum_blocks(Real* yh) const {
  const std::size_t nl = capacity_.size();
  for (std::size_t pos = 0; pos < layers_by_class_.size(); ++pos) {
    for (std::size_t l = 0; l < nl; ++l) {
      const Acc<Real> a = link_sum(virtual_link(layers_by_class_[pos], static_cast<LinkId>(l)));
      yh[2 * (pos * nl + l)] = a.y;
      yh[2 * (pos * nl + l) + 1] = a.h;
    }
  }
}

template <typename Real>
void BasicEngine<Real>::save_links(const std::uint32_t* virtual_links, std::size_t n, Real* out) const {
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = price_[virtual_links[i]];
    out[2 * i + 1] = ratio_[virtual_links[i]];
  }
}

template <typename Real>
void BasicEngine<Real>::load_links(const std::uint32_t* virtual_links, std::size_t n, const Real* in) {
  for (std::size_t i = 0; i < n; ++i) {
    price_[virtual_links[i]] = in[2 * i];
    ratio_[virtual_links[i]] = in[2 * i + 1];
  }
}

template <typename Real>
void BasicEngine<Real>::copy_block_rates(std::size_t b, Real* x, Real* xn) const {
  const Block& k = *blocks_[b];
  std::copy(k.x.begin(), k.x.end(), x);
  std::copy(k.xn.begin(), k.xn.end(), xn);
}

template <typename Real>
void BasicEngine<Real>::load_block_rates(std::size_t b, const Real* x, const Real* xn) {
  Block& k = *blocks_[b];
  std::copy(x, x + k.size(), k.x.begin());
  std::copy(xn, xn + k.size(), k.xn.begin());
}

template <typename Real>
void BasicEngine<Real>::load_block_rate(std::size_t b, std::size_t i, Real x, Real xn) {
  Block& k = *blocks_[b];
  FT_ASSERT(i < k.size(), i);
  k.x[i] = x;
  k.xn[i] = xn;
}

template <typename Real>
void BasicEngine<Real>::iterate() {
  prepare();
  for (std::size_t b = 0; b < blocks_.size(); ++b) rate_pass(b);
  finish_links(update_links(0, capacity_.size()));
  for (std::size_t b = 0; b < blocks_.size(); ++b) normalize_pass(b);
}

template <typename Real>
std::uint64_t BasicEngine<Real>::solve(std::uint64_t max_iterations) {
  return iterate_until_converged(*this, max_iterations);
}

template <typename Real>
typename BasicEngine<Real>::BlockRates BasicEngine<Real>::block_rates(std::size_t b) const {
  const Block& k = *blocks_[b];
  return {k.id.data(), k.xn.data(), k.size()};
}

template <typename Real>
double BasicEngine<Real>::rate_bps(FlowId id) const {
  return flow_bps(id, &Block::xn);
}

template <typename Real>
double BasicEngine<Real>::raw_rate_bps(FlowId id) const {
  return flow_bps(id, &Block::x);
}

template <typename Real>
double BasicEngine<Real>::estimate_rate_bps(FlowId id) const {
  FT_ASSERT(has_flow(id), id);
  const Slot& sl = slots_[id];
  const Block& k = *blocks_[sl.block];
  const std::size_t s = sl.index;
  std::array<std::uint32_t, kMaxPathLinks> v{};
  int n = 0;
  double P = 0;
  for (const auto& p : k.path) {
    if (p[s] < kNullSlots) continue;  // a null slot pads a short path
    v[n] = k.local_to_global[p[s]];
    P += static_cast<double>(price_[v[n]]);
    ++n;
  }
  P = std::max(P, static_cast<double>(k.floor_price[s]));
  const double x = utility_.rate(static_cast<double>(k.weight[s]), P);
  double m = 1;
  if (config_.normalizer != Normalizer::kNone) {
    m = 0;
    for (int j = 0; j < n; ++j) {
      const std::uint32_t l = v[j] % static_cast<std::uint32_t>(capacity_.size());
      m = std::max(m, static_cast<double>(ratio_[v[j]]) + x * static_cast<double>(inv_capacity_[l]));
    }
    if (config_.normalizer == Normalizer::kUNorm) m = std::max(m, static_cast<double>(max_ratio_));
  }
  const double xn = std::min(m > 0 ? x / m : x, static_cast<double>(k.cap[s]));
  return (xn + static_cast<double>(k.floor[s])) * kUnitBps;
}

template <typename Real>
const char* BasicEngine<Real>::kernel_name() const {
  return kernels_->name;
}

template <typename Real>
double BasicEngine<Real>::capacity_bps(LinkId l) const {
  return static_cast<double>(nominal_[l]) * kUnitBps;
}

template <typename Real>
std::vector<double> BasicEngine<Real>::link_allocation_bps() const {
  std::vector<double> alloc(capacity_.size(), 0.0);
  for (const auto& k : blocks_) {
    for (std::size_t s = 0; s < k->size(); ++s) {
      for (const auto& p : k->path) {
        if (p[s] >= kNullSlots) {
          alloc[k->local_to_global[p[s]] % capacity_.size()] +=
              static_cast<double>(k->xn[s]) * kUnitBps;
        }
      }
    }
  }
  return alloc;
}

template class BasicEngine<float>;
template class BasicEngine<double>;

}  // namespace flowtune::alloc
