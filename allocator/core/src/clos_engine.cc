#include "flowtune/alloc/clos_engine.h"

#include <algorithm>
#include <stdexcept>

#include "flowtune/common/assert.h"
#include "kernels.h"
#include "price_step.h"

namespace flowtune::alloc {
namespace {

constexpr double kUnitBps = 1e9;  // internal rates in Gbit/s, as BasicEngine
// The flows appended or left as holes since the last sort may be this share
// of the live flows before iterate() sorts again (and at least kMinUnsorted).
constexpr std::size_t kUnsortedShareInv = 8;
constexpr std::size_t kMinUnsorted = 64;

template <typename Real>
using Acc = detail::LinkAcc<Real>;

template <typename Real>
void add(Acc<Real>& a, const Acc<Real>& b) {
  a.y += b.y;
  a.h += b.h;
}

}  // namespace

template <typename Real>
bool BasicClosEngine<Real>::supports(const EngineConfig& c) {
  return c.alpha == 1.0 && c.normalizer == Normalizer::kFNorm;
}

template <typename Real>
BasicClosEngine<Real>::BasicClosEngine(const Topology& t, const EngineConfig& config,
                                       const std::vector<double>& capacity_bps)
    : config_(config),
      kernels_(config.portable_kernels ? &detail::generic_kernels<Real>()
                                       : &detail::kernels<Real>()) {
  if (!supports(t)) throw std::invalid_argument("the Clos engine needs a two-tier or big-switch topology");
  if (!supports(config)) throw std::invalid_argument("the Clos engine computes log utility with F-NORM only");
  if (!(config.gamma > 0) || !(config.gradient_step > 0) || !(config.tolerance > 0)) {
    throw std::invalid_argument("gamma, gradient step and tolerance must be positive");
  }
  hosts_ = t.num_hosts();
  spines_ = t.kind() == TopologyKind::kTwoTier ? t.num_spines() : 0;
  ways_ = spines_ + 1;
  racks_ = t.kind() == TopologyKind::kTwoTier ? t.num_sites() : 1;
  hosts_per_rack_ = hosts_ / racks_;
  for (HostId h = 0; h < hosts_; ++h) {
    // Racks hold consecutive hosts (topology.cc): the link arithmetic below relies on it.
    FT_ASSERT(t.kind() != TopologyKind::kTwoTier || t.site_of_host(h) == h / hosts_per_rack_, h);
  }
  const std::size_t nl = t.num_links();
  FT_ASSERT(nl == 2 * std::size_t{hosts_} + 2 * std::size_t{racks_} * spines_, nl);
  if (!capacity_bps.empty() && capacity_bps.size() != nl) {
    throw std::invalid_argument("one capacity per link of the topology");
  }
  capacity_.resize(nl);
  inv_capacity_.resize(nl);
  for (std::size_t l = 0; l < nl; ++l) {
    const double c = capacity_bps.empty() ? t.capacity_bps(static_cast<LinkId>(l)) : capacity_bps[l];
    if (!(c >= kMinRateBps && c <= kMaxRateBps)) throw std::invalid_argument("link capacity out of range");
    capacity_[l] = static_cast<Real>(c / kUnitBps);
    inv_capacity_[l] = Real{1} / capacity_[l];
  }
  // One more link, the zero link: price 0, ratio 0, never stepped.
  zero_link_ = static_cast<LinkId>(nl);
  price_.assign(nl + 1, static_cast<Real>(kInitialPrice));
  price_[nl] = 0;
  ratio_.assign(nl + 1, Real{0});
  link_acc_.assign(nl + 1, Acc<Real>{0, 0});
  const std::size_t halves = std::size_t{ways_} * hosts_;
  dst_links_.resize(2 * halves);
  for (std::size_t d = 0; d < halves; ++d) {
    LinkId l[2];
    // Summed as BasicEngine sums a path's last two hops: ToR down + down.
    if (dst_links(static_cast<std::uint32_t>(d), l) == 2) {
      dst_links_[2 * d] = l[0];
      dst_links_[2 * d + 1] = l[1];
    } else {
      dst_links_[2 * d] = zero_link_;
      dst_links_[2 * d + 1] = l[0];
    }
  }
  dst_acc_.assign(halves, Acc<Real>{0, 0});
  dst_price_.assign(halves, Real{0});
  dst_ratio_.assign(halves, Real{0});
}

template <typename Real>
BasicClosEngine<Real>::~BasicClosEngine() = default;

// Link arithmetic (topology.cc): up h = h, down h = H + h, ToR r -> spine k =
// 2H + r S + k, spine k -> ToR r = 2H + R S + r S + k.
template <typename Real>
bool BasicClosEngine<Real>::halves_of(const Path& p, Halves* out) const {
  const std::uint64_t H = hosts_, S = spines_, RS = std::uint64_t{racks_} * spines_;
  if (p.size != 2 && p.size != 4) return false;
  const std::uint64_t up = p.links[0], down = p.links[p.size - 1];
  if (up >= H || down < H || down >= 2 * H || up == down - H) return false;
  const std::uint64_t a = up, b = down - H;
  const std::uint64_t ra = a / hosts_per_rack_, rb = b / hosts_per_rack_;
  std::uint64_t way = S;
  if (p.size == 2) {
    if (S > 0 && ra != rb) return false;  // leaving the rack takes a spine
  } else {
    if (S == 0 || ra == rb) return false;
    const std::uint64_t tu = p.links[1], td = p.links[2];
    if (tu < 2 * H || tu >= 2 * H + RS || td < 2 * H + RS || td >= 2 * H + 2 * RS) return false;
    way = (tu - 2 * H) % S;
    if ((tu - 2 * H) / S != ra || td != 2 * H + RS + rb * S + way) return false;
  }
  out->src = static_cast<std::uint32_t>(a * ways_ + way);
  out->dst = static_cast<std::uint32_t>(way * H + b);
  return true;
}

template <typename Real>
std::uint32_t BasicClosEngine<Real>::src_links(std::uint32_t src_half, LinkId* out) const {
  const std::uint32_t a = src_half / ways_, way = src_half % ways_;
  out[0] = a;
  if (way == spines_) return 1;
  out[1] = 2 * hosts_ + (a / hosts_per_rack_) * spines_ + way;
  return 2;
}

template <typename Real>
std::uint32_t BasicClosEngine<Real>::dst_links(std::uint32_t dst_half, LinkId* out) const {
  const std::uint32_t way = dst_half / hosts_, b = dst_half % hosts_;
  if (way == spines_) {
    out[0] = hosts_ + b;
    return 1;
  }
  out[0] = 2 * hosts_ + racks_ * spines_ + (b / hosts_per_rack_) * spines_ + way;
  out[1] = hosts_ + b;
  return 2;
}

template <typename Real>
double BasicClosEngine<Real>::limit_of(const Halves& h, double max_bps) const {
  LinkId l[4];
  std::uint32_t n = src_links(h.src, l);
  n += dst_links(h.dst, l + n);
  double c = static_cast<double>(capacity_[l[0]]);
  for (std::uint32_t i = 1; i < n; ++i) c = std::min(c, static_cast<double>(capacity_[l[i]]));
  if (max_bps > 0) c = std::min(c, max_bps / kUnitBps);
  return c;
}

template <typename Real>
FlowError BasicClosEngine<Real>::check_flow(const FlowSpec& f) const {
  Halves h;
  if (f.path.size == 0) return FlowError::kEmptyPath;
  if (!halves_of(f.path, &h)) return FlowError::kUnknownLink;
  if (FlowError e = check_limits(f.weight, f.max_bps); e != FlowError::kOk) return e;
  if (f.priority != kDefaultClass) return FlowError::kBadClass;
  return FlowError::kOk;
}

template <typename Real>
void BasicClosEngine<Real>::append(std::uint32_t src_half, std::uint32_t dst_half, Real weight,
                                   Real limit, Real floor_price, FlowId id) {
  const auto slot = static_cast<std::uint32_t>(run_.size());
  // Slots are in run order, so the last slot is in the last run.
  if (run_src_.empty() || run_src_.back() != src_half) {
    run_src_.push_back(src_half);
    push_run_links(src_half);
    run_acc_.push_back({0, 0});
    run_price_.push_back(0);
    run_ratio_.push_back(0);
  }
  run_.push_back(static_cast<std::uint32_t>(run_src_.size() - 1));
  dst_.push_back(dst_half);
  weight_.push_back(weight);
  cap_.push_back(limit);
  floor_price_.push_back(floor_price);
  x_.push_back(0);
  xn_.push_back(0);
  id_of_slot_.push_back(id);
  if (id >= slot_of_.size()) slot_of_.resize(std::size_t{id} + 1, kFree);
  slot_of_[id] = slot;
}

template <typename Real>
FlowId BasicClosEngine<Real>::add_flow(const FlowSpec& f) {
  FT_ASSERT(check_flow(f) == FlowError::kOk, to_string(check_flow(f)));
  Halves h;
  halves_of(f.path, &h);
  const double limit = limit_of(h, f.max_bps);
  const FlowId id = ids_.acquire();
  // U'(cap) for log utility, in double as BasicEngine computes it.
  append(h.src, h.dst, static_cast<Real>(f.weight), static_cast<Real>(limit),
         static_cast<Real>(f.weight / limit), id);
  ++live_;
  return id;
}

template <typename Real>
bool BasicClosEngine<Real>::has_flow(FlowId id) const {
  return id < slot_of_.size() && slot_of_[id] != kFree;
}

template <typename Real>
void BasicClosEngine<Real>::remove_flow(FlowId id) {
  FT_ASSERT(has_flow(id), id);
  const std::uint32_t s = slot_of_[id];
  // A hole: weight 0 sends 0 and adds 0 to its links; a positive floor price
  // keeps its division finite.
  weight_[s] = 0;
  floor_price_[s] = 1;
  cap_[s] = 0;
  x_[s] = 0;
  xn_[s] = 0;
  id_of_slot_[s] = kFree;
  slot_of_[id] = kFree;
  ids_.release(id);
  --live_;
  ++holes_;
}

template <typename Real>
FlowError BasicClosEngine<Real>::set_limits(FlowId id, double weight, double max_bps) {
  FT_ASSERT(has_flow(id), id);
  if (FlowError e = check_limits(weight, max_bps); e != FlowError::kOk) return e;
  finish_fnorm();  // it reads the old cap
  const std::uint32_t s = slot_of_[id];
  const double limit = limit_of({run_src_[run_[s]], dst_[s]}, max_bps);
  weight_[s] = static_cast<Real>(weight);
  cap_[s] = static_cast<Real>(limit);
  floor_price_[s] = static_cast<Real>(weight / limit);
  return FlowError::kOk;
}

// A stable counting sort of the live flows by source half: holes go, each
// source half becomes one run, and flows keep their relative order within it.
template <typename Real>
void BasicClosEngine<Real>::sort_flows() {
  finish_fnorm();  // its ratios are by run, which the sort renumbers
  const std::size_t n = run_.size();
  std::vector<std::uint32_t> start(std::size_t{ways_} * hosts_ + 1, 0);
  for (std::size_t s = 0; s < n; ++s) {
    if (id_of_slot_[s] != kFree) ++start[run_src_[run_[s]] + 1];
  }
  for (std::size_t i = 1; i < start.size(); ++i) start[i] += start[i - 1];
  std::vector<std::uint32_t> order(live_);
  for (std::size_t s = 0; s < n; ++s) {
    if (id_of_slot_[s] != kFree) order[start[run_src_[run_[s]]]++] = static_cast<std::uint32_t>(s);
  }
  auto permute = [&order](auto& v) {
    std::remove_reference_t<decltype(v)> out(order.size());
    for (std::size_t i = 0; i < order.size(); ++i) out[i] = v[order[i]];
    v.swap(out);
  };
  std::vector<std::uint32_t> src(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) src[i] = run_src_[run_[order[i]]];
  permute(dst_);
  permute(weight_);
  permute(floor_price_);
  permute(cap_);
  permute(x_);
  permute(xn_);
  permute(id_of_slot_);
  run_.resize(order.size());
  run_src_.clear();
  run_links_.clear();
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (run_src_.empty() || run_src_.back() != src[i]) {
      run_src_.push_back(src[i]);
      push_run_links(src[i]);
    }
    run_[i] = static_cast<std::uint32_t>(run_src_.size() - 1);
    slot_of_[id_of_slot_[i]] = static_cast<std::uint32_t>(i);
  }
  run_acc_.assign(run_src_.size(), Acc<Real>{0, 0});
  run_price_.assign(run_src_.size(), 0);
  run_ratio_.assign(run_src_.size(), 0);
  sorted_ = order.size();
  sorted_runs_ = run_src_.size();
  holes_ = 0;
  ++sorts_;
}

template <typename Real>
void BasicClosEngine<Real>::push_run_links(std::uint32_t src_half) {
  LinkId l[2];
  const std::uint32_t n = src_links(src_half, l);
  run_links_.push_back(l[0]);
  run_links_.push_back(n == 2 ? l[1] : zero_link_);
}

// Path prices of each half, summed as BasicEngine sums a path: (up + ToR up)
// + (ToR down + down); a half with one link pairs it with the zero link
// (price 0, ratio 0), which leaves its price and ratio exact.
template <typename Real>
void BasicClosEngine<Real>::refresh_tables() {
  const Real* __restrict p = price_.data();
  const std::uint32_t* __restrict rl = run_links_.data();
  Real* __restrict rp = run_price_.data();
  for (std::size_t r = 0, n = run_price_.size(); r < n; ++r) rp[r] = p[rl[2 * r]] + p[rl[2 * r + 1]];
  const std::uint32_t* __restrict dl = dst_links_.data();
  Real* __restrict dp = dst_price_.data();
  for (std::size_t d = 0, n = dst_price_.size(); d < n; ++d) dp[d] = p[dl[2 * d]] + p[dl[2 * d + 1]];
}

// Sums the halves into their links, steps every price, and leaves each
// half's F-NORM ratio (the larger of its links' load ratios). The sums avoid
// read-modify-write chains through one address: sorted runs carry a host's
// uplink sum in a register (its runs are adjacent), and destination halves,
// laid out spine-major, give each downlink a sum over one column and each
// spine -> ToR link a sum over one contiguous row of its rack's hosts.
template <typename Real>
void BasicClosEngine<Real>::link_step() {
  std::fill(link_acc_.begin(), link_acc_.end(), Acc<Real>{0, 0});
  Acc<Real>* __restrict acc = link_acc_.data();
  const std::uint32_t* __restrict rl = run_links_.data();
  const Acc<Real>* __restrict ra = run_acc_.data();
  const std::size_t runs = run_acc_.size();
  const std::size_t sorted_runs = std::min(sorted_runs_, runs);
  Acc<Real> up{0, 0};
  std::uint32_t up_link = zero_link_;
  for (std::size_t r = 0; r < sorted_runs; ++r) {
    if (rl[2 * r] != up_link) {
      acc[up_link] = up;
      up_link = rl[2 * r];
      up = {0, 0};
    }
    add(up, ra[r]);
    add(acc[rl[2 * r + 1]], ra[r]);
  }
  acc[up_link] = up;
  for (std::size_t r = sorted_runs; r < runs; ++r) {
    add(acc[rl[2 * r]], ra[r]);
    add(acc[rl[2 * r + 1]], ra[r]);
  }
  Acc<Real>* __restrict da = dst_acc_.data();
  Acc<Real>* __restrict down = acc + hosts_;
  for (std::uint32_t way = 0; way < ways_; ++way) {
    Acc<Real>* __restrict row = da + std::size_t{way} * hosts_;
    for (std::uint32_t b = 0; b < hosts_; ++b) add(down[b], row[b]);
    if (way == spines_) continue;
    const std::size_t tor_down = 2 * std::size_t{hosts_} + std::size_t{racks_} * spines_ + way;
    for (std::uint32_t rack = 0; rack < racks_; ++rack) {
      Acc<Real> sum{0, 0};
      const Acc<Real>* __restrict h = row + std::size_t{rack} * hosts_per_rack_;
      for (std::uint32_t i = 0; i < hosts_per_rack_; ++i) add(sum, h[i]);
      acc[tor_down + std::size_t{rack} * spines_] = sum;
    }
  }
  std::fill(dst_acc_.begin(), dst_acc_.end(), Acc<Real>{0, 0});
  const detail::PriceStep<Real> step{static_cast<Real>(config_.gamma),
                                     static_cast<Real>(config_.gradient_step),
                                     config_.algorithm == Algorithm::kNed};
  Real max_residual = 0, max_util = 0;
  for (std::size_t i = 0; i < zero_link_; ++i) {
    const Acc<Real> a = link_acc_[i];
    const Real r = a.y * inv_capacity_[i];
    ratio_[i] = r;
    if (!(a.h > 0)) continue;  // no flows: the price stays
    max_residual = std::max(max_residual, step(price_[i], a.y, a.h, capacity_[i], inv_capacity_[i]));
    max_util = std::max(max_util, r);
  }
  stats_.max_residual = static_cast<double>(max_residual);
  stats_.max_raw_utilization = static_cast<double>(max_util);
  stats_.converged = stats_.max_residual <= config_.tolerance;
  const Real* __restrict q = ratio_.data();
  Real* __restrict rr = run_ratio_.data();
  for (std::size_t r = 0, n = run_ratio_.size(); r < n; ++r) rr[r] = std::max(q[rl[2 * r]], q[rl[2 * r + 1]]);
  const std::uint32_t* __restrict dl = dst_links_.data();
  Real* __restrict dr = dst_ratio_.data();
  for (std::size_t d = 0, n = dst_ratio_.size(); d < n; ++d) dr[d] = std::max(q[dl[2 * d]], q[dl[2 * d + 1]]);
}

template <typename Real>
void BasicClosEngine<Real>::iterate() {
  const std::size_t unsorted = run_.size() - sorted_ + holes_;
  if (unsorted > std::max(kMinUnsorted, live_ / kUnsortedShareInv)) sort_flows();
  refresh_tables();
  const detail::ClosArrays<Real> f{run_.size(), run_.data(), dst_.data(), weight_.data(),
                                   floor_price_.data(), cap_.data(), x_.data(), xn_.data()};
  // Slots appended since the last link step have ratio 0 (a new run) or
  // x 0, which normalize to xn 0 as clos_fnorm would leave them.
  if (fnorm_pending_) {
    kernels_->clos_fnorm_rate_pass_log(f, run_ratio_.data(), dst_ratio_.data(), run_price_.data(),
                                       dst_price_.data(), run_acc_.data(), dst_acc_.data());
  } else {
    kernels_->clos_rate_pass_log(f, run_price_.data(), dst_price_.data(), run_acc_.data(),
                                 dst_acc_.data());
  }
  link_step();
  fnorm_pending_ = true;
  if (!fold_fnorm_) finish_fnorm();
  ++iterations_;
}

template <typename Real>
void BasicClosEngine<Real>::finish_fnorm() const {
  if (!fnorm_pending_) return;
  const detail::ClosArrays<Real> f{run_.size(), run_.data(), dst_.data(), weight_.data(),
                                   floor_price_.data(), cap_.data(),
                                   const_cast<Real*>(x_.data()), xn_.data()};
  kernels_->clos_fnorm(f, run_ratio_.data(), dst_ratio_.data());
  fnorm_pending_ = false;
}

template <typename Real>
void BasicClosEngine<Real>::set_fold_fnorm(bool on) {
  fold_fnorm_ = on;
  if (!on) finish_fnorm();
}

template <typename Real>
std::uint64_t BasicClosEngine<Real>::solve(std::uint64_t max_iterations) {
  return iterate_until_converged(*this, max_iterations);
}

template <typename Real>
double BasicClosEngine<Real>::rate_bps(FlowId id) const {
  FT_ASSERT(has_flow(id), id);
  finish_fnorm();
  return static_cast<double>(xn_[slot_of_[id]]) * kUnitBps;
}

template <typename Real>
double BasicClosEngine<Real>::raw_rate_bps(FlowId id) const {
  FT_ASSERT(has_flow(id), id);
  return static_cast<double>(x_[slot_of_[id]]) * kUnitBps;
}

template <typename Real>
double BasicClosEngine<Real>::price(LinkId l) const {
  FT_ASSERT(l < zero_link_, l);
  return static_cast<double>(price_[l]);
}

template <typename Real>
void BasicClosEngine<Real>::set_price(LinkId l, double p) {
  FT_ASSERT(l < zero_link_ && p >= 0, l, p);
  price_[l] = static_cast<Real>(p);
}

template <typename Real>
const char* BasicClosEngine<Real>::kernel_name() const {
  return kernels_->name;
}

template class BasicClosEngine<float>;
template class BasicClosEngine<double>;

}  // namespace flowtune::alloc
