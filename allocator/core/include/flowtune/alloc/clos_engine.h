// The rate engine laid out by the topology's structure (docs/engine.md, "The
// Clos layout"). On a two-tier Clos or a big switch every path is a source
// half (host up, and ToR -> spine when it leaves the rack) and a destination
// half (spine -> ToR, host down). A flow is stored as two table indices, its
// run (source host, spine) and its destination (spine, destination host),
// and flows are kept sorted by source half, so one iteration touches per flow
// one price gather, one accumulator update and one ratio gather where the
// general engine (engine.h) touches four of each: the source half's loads
// are sums over contiguous runs and its prices one read per run.
//
// It computes what BasicEngine computes for the same flows (NED or
// Gradient, F-NORM, weighted log utility, one priority class, weights and
// rate caps, no floors), up to the order of the float sums: path prices are
// summed in the same grouping, (up + ToR up) + (ToR down + down), and F-NORM
// takes the same maximum, so only the link sums differ in rounding
// (tests/allocator/core/clos_engine_test.cc holds it to BasicEngine).
//
// Churn: a new flow is appended after the sorted flows as a run of its own
// (or joins the last run when it shares its source half); a departed flow
// leaves a hole of weight 0 that contributes nothing. iterate() sorts again
// (a counting sort by source half, O(flows + hosts x spines)) once the
// appended flows and holes outnumber an eighth of the flows, so the sort is
// paid once per flows/8 changes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "flowtune/alloc/engine.h"

namespace flowtune::alloc {

// detail::Kernels and detail::LinkAcc are declared in engine.h.
template <typename Real>
class BasicClosEngine {
 public:
  // Whether this engine can take flows on t (a two-tier Clos or a big switch).
  static bool supports(const Topology& t) { return t.kind() != TopologyKind::kExplicit; }
  // Whether it computes config's iteration: log utility (alpha 1), F-NORM.
  static bool supports(const EngineConfig& config);
  // Throws std::invalid_argument where !supports(t) or !supports(config).
  // capacity_bps: the links' capacities, one per link of t (as a scheduler
  // scales them); empty: t's own.
  BasicClosEngine(const Topology& t, const EngineConfig& config,
                  const std::vector<double>& capacity_bps = {});
  ~BasicClosEngine();
  BasicClosEngine(const BasicClosEngine&) = delete;
  BasicClosEngine& operator=(const BasicClosEngine&) = delete;

  // kOk for a path the topology routes (path_via of some spine), in the
  // default class, with limits in FlowSpec's ranges; kUnknownLink for any
  // other path, kBadClass for another class.
  FlowError check_flow(const FlowSpec& f) const;
  // Requires check_flow(f) == kOk. O(1) amortized.
  FlowId add_flow(const FlowSpec& f);
  // O(1): leaves a hole until the next sort.
  void remove_flow(FlowId id);
  bool has_flow(FlowId id) const;
  FlowError set_limits(FlowId id, double weight, double max_bps);

  // One NED (or Gradient) iteration and F-NORM; sorts first when due.
  void iterate();
  std::uint64_t solve(std::uint64_t max_iterations);
  // Sorts the flows by source half now (iterate() does when due).
  void sort_flows();

  // Every slot's flow id (kNoFlow for a hole) and normalized rate, in units
  // of kRateUnitBps, for a driver that scans every rate after an iteration:
  // streaming these beats rate_bps(id) per flow. Valid until the next change.
  static constexpr FlowId kNoFlow = ~FlowId{0};
  static constexpr double kRateUnitBps = 1e9;
  struct Rates {
    const FlowId* ids;
    const Real* rates;
    std::size_t size;
  };
  Rates rates() const {
    finish_fnorm();
    return {id_of_slot_.data(), xn_.data(), xn_.size()};
  }

  // Fold F-NORM into the next iteration's rate pass (default off): an
  // iteration leaves its normalized rates pending, and the next one
  // normalizes each flow's x in the pass that replaces it, one pass over
  // the flows per iteration instead of two. Whatever reads or changes what
  // F-NORM uses (rates, limits, the sort) finishes a pending one first, so
  // every rate read is the same, bit for bit, on or off. Off by default:
  // it measured 0.97-1.04x the separate pass (engine_bench
  // BM_ClosFoldVsSeparate; docs/engine.md), since the pass it saves streams
  // what the gathers it keeps already wait on.
  void set_fold_fnorm(bool on);
  bool fold_fnorm() const { return fold_fnorm_; }
  // With fold_fnorm(): the rates F-NORM gave the iteration before the last
  // one, as the last one's pass left them, without another pass (0 for a
  // flow added since). A driver that can publish rates one iteration late
  // reads these and never pays F-NORM's own pass.
  Rates lagged_rates() const { return {id_of_slot_.data(), xn_.data(), xn_.size()}; }

  double rate_bps(FlowId id) const;
  double raw_rate_bps(FlowId id) const;
  double price(LinkId l) const;
  void set_price(LinkId l, double p);

  std::size_t num_flows() const { return live_; }
  std::size_t num_links() const { return zero_link_; }
  std::uint64_t iterations() const { return iterations_; }
  std::uint64_t sorts() const { return sorts_; }
  const IterationStats& stats() const { return stats_; }
  const char* kernel_name() const;

 private:
  static constexpr std::uint32_t kFree = kNoFlow;
  // Source half s = host * ways_ + way, destination half d = way * hosts_ +
  // host, where way is the spine, or spines_ for a path that stays in the
  // rack (every path of a big switch).
  struct Halves {
    std::uint32_t src, dst;
  };
  bool halves_of(const Path& p, Halves* out) const;
  std::uint32_t src_links(std::uint32_t src_half, LinkId* out) const;
  std::uint32_t dst_links(std::uint32_t dst_half, LinkId* out) const;
  double limit_of(const Halves& h, double max_bps) const;
  void append(std::uint32_t src_half, std::uint32_t dst_half, Real weight, Real limit,
              Real floor_price, FlowId id);
  void push_run_links(std::uint32_t src_half);
  void refresh_tables();
  void link_step();
  void finish_fnorm() const;

  EngineConfig config_;
  const detail::Kernels<Real>* kernels_;
  std::uint32_t hosts_, racks_, spines_, ways_, hosts_per_rack_;
  // Links (Gbit/s, price per Gbit/s), as in BasicEngine, and one more: the
  // zero link (price 0, ratio 0) that a half of one link is paired with.
  LinkId zero_link_ = 0;
  AlignedVector<Real> capacity_, inv_capacity_, price_, ratio_;
  AlignedVector<detail::LinkAcc<Real>> link_acc_;
  // Flow slots: sorted by source half in [0, sorted_), appended after.
  AlignedVector<std::uint32_t> run_, dst_;
  AlignedVector<Real> weight_, floor_price_, cap_, x_;
  // Normalized rates: filled in on the first read after an iteration that
  // left them pending (fold_fnorm_).
  mutable AlignedVector<Real> xn_;
  bool fold_fnorm_ = false;
  mutable bool fnorm_pending_ = false;
  std::vector<FlowId> id_of_slot_;  // kFree for a hole
  // Runs: each run's source half and its two links (up, and ToR -> spine
  // or the zero link), and per iteration its sums, path price and ratio.
  std::vector<std::uint32_t> run_src_;
  AlignedVector<std::uint32_t> run_links_;
  AlignedVector<detail::LinkAcc<Real>> run_acc_;
  AlignedVector<Real> run_price_, run_ratio_;
  // Destination halves (ways_ * hosts_): their two links (spine -> ToR or
  // the zero link, down), sums, path price and ratio.
  AlignedVector<std::uint32_t> dst_links_;
  AlignedVector<detail::LinkAcc<Real>> dst_acc_;
  AlignedVector<Real> dst_price_, dst_ratio_;
  std::vector<std::uint32_t> slot_of_;  // by FlowId
  IdFreeList<FlowId> ids_;
  // Runs [0, sorted_runs_) are sorted: each source half once, in order.
  std::size_t live_ = 0, sorted_ = 0, sorted_runs_ = 0, holes_ = 0;
  std::uint64_t iterations_ = 0, sorts_ = 0;
  IterationStats stats_;
};

extern template class BasicClosEngine<float>;
extern template class BasicClosEngine<double>;

using ClosEngine = BasicClosEngine<double>;

}  // namespace flowtune::alloc
