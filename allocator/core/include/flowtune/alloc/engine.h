// The rate engine: network utility maximization over a fixed set of links and a
// changing set of flows (paper §2-§4). One call to iterate() runs one
// iteration of NED (Algorithm 1) or Gradient projection (Appendix B) and then
// normalizes the rates with F-NORM or U-NORM (§3, eq. 5-6).
//
// Pure computation: no threads, sockets or clocks. Flows are partitioned into
// FlowBlocks by (source site block, destination site block), each with private
// copies of the links it touches (§4), so a driver (allocator/parallel) can run
// the per-block passes on many cores; iterate() runs them in order on the
// calling thread. The per-link aggregation always sums blocks in block order,
// so any driver produces bit-identical results for the same block count.
//
// Drivers that run those passes themselves reach into the engine through
// engine_driver.h; this header is what callers of the engine need.
//
// Strict priority classes (0 highest ... kNumClasses - 1): class k maximizes
// its utility on the capacity classes < k leave (lexicographic optimum).
// Each class in use has its own layer of link prices (a "virtual link" per
// class and link); one iteration updates the layers of a link in class order,
// each against the capacity the classes above it left, and F-NORM keeps the
// sum over all classes within every link (docs/policy.md). With one class in
// use (the default) the engine runs the single-layer loops unchanged.
//
// Units: the API speaks bits/s. Internally rates are Gbit/s (so prices start at
// 1 in a sensible range, as in the paper) stored as Real (float or double).
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "flowtune/alloc/topology.h"
#include "flowtune/alloc/utility.h"
#include "flowtune/common/aligned.h"
#include "flowtune/common/id_free_list.h"

namespace flowtune::alloc {
namespace detail {
template <typename Real>
struct Kernels;
template <typename Real>
struct LinkAcc;
}  // namespace detail
template <typename E>
class DriverView;

using FlowId = std::uint32_t;

enum class Algorithm { kNed, kGradient };
enum class Normalizer { kNone, kUNorm, kFNorm };

const char* to_string(Algorithm a);
const char* to_string(Normalizer n);

struct EngineConfig {
  Algorithm algorithm = Algorithm::kNed;
  Normalizer normalizer = Normalizer::kFNorm;
  // NED step size γ (Algorithm 1, eq. 4); the paper's simulations use 0.4.
  double gamma = 0.4;
  // Gradient step in price units per Gbit/s of over-allocation. Gradient must
  // step gently (Appendix B); this is stable for bottlenecks whose optimal
  // price exceeds ~gradient_step * capacity / 2.
  double gradient_step = 0.002;
  // Utility family parameter (1 = weighted log).
  double alpha = 1.0;
  // FlowBlocks per side: blocks*blocks FlowBlocks in all (paper §4, Fig. 4).
  std::uint32_t blocks = 1;
  // A link is converged when its KKT residual (see IterationStats) is below this.
  double tolerance = 1e-4;
  // Use the x86-64 baseline kernels even where AVX-512 ones would run (tests
  // compare the two; operators can rule out a CPU-specific path).
  bool portable_kernels = false;
  // The price update visits only the links that carry flows when they are
  // few (a big network carrying few flows); false visits every link
  // (benchmarks and tests compare the two: the same arithmetic).
  bool sparse_links = true;
  // Strict priority classes: the share of a link kept for each lower class
  // in use there, taken from the classes above it (docs/policy.md). A
  // starved class must still trickle: TCP paced at rate r sleeps len/r after
  // each send and a later, higher rate does not wake it (the kernel keeps
  // the departure time it computed), so a flow paced near 0 would stall for
  // minutes once its class is given the link back. In
  // [kMinResidualShare, kMaxClassReserve].
  double class_reserve = 0.02;
  // Floors (set_floor: tenant guarantees, deadlines) together may reserve at
  // most this share of any link, so unreserved flows always keep the rest.
  // In (0, kMaxReservedShare].
  double max_reserved_share = 0.9;
};

// Accepted ranges. They keep every internal quantity (rates in Gbit/s, prices
// = weight / rate, slopes = rate / price) a normal number in float and double.
inline constexpr double kMinWeight = 1e-6;
inline constexpr double kMaxWeight = 1e6;
inline constexpr double kMinRateBps = 1e3;   // 1 kbit/s
inline constexpr double kMaxRateBps = 1e15;  // 1 Pbit/s
// Strict priority classes: 0 is served first. Unmarked flows are in the
// middle, so operators can place traffic above and below them.
inline constexpr std::uint32_t kNumClasses = 8;
// Every link's price before any iteration (and a released host slot's again).
inline constexpr double kInitialPrice = 1.0;
inline constexpr std::uint8_t kDefaultClass = 4;
// The least class_reserve may be: it keeps prices and ratios finite.
inline constexpr double kMinResidualShare = 1e-9;
inline constexpr double kMaxClassReserve = 0.1;
inline constexpr double kMaxReservedShare = 0.99;

struct FlowSpec {
  Path path;
  double weight = 1.0;  // in [kMinWeight, kMaxWeight]
  // Upper bound on the flow's rate (a sender that cannot go faster), bits/s;
  // 0 = none, else in [kMinRateBps, kMaxRateBps].
  double max_bps = 0;
  // Sites (racks) of the endpoints, for FlowBlock partitioning only.
  std::uint32_t src_site = 0;
  std::uint32_t dst_site = 0;
  // Strict priority class, 0 (highest) .. kNumClasses - 1.
  std::uint8_t priority = kDefaultClass;
};

// The spec of a flow from src to dst on a host topology: its path (ECMP spine
// from flow_hash) and the sites that place it in a FlowBlock.
FlowSpec make_flow(const Topology& t, HostId src, HostId dst, std::uint64_t flow_hash,
                   double weight = 1.0);

enum class FlowError {
  kOk = 0,
  kEmptyPath,
  kPathTooLong,
  kUnknownLink,
  kRepeatedLink,
  kBadWeight,
  kBadMaxRate,
  kBadSite,
  kBlockFull,  // a FlowBlock may touch at most 65,519 distinct (class, link) pairs
  kBadClass,
};
const char* to_string(FlowError e);
// kBadWeight / kBadMaxRate for a weight or rate cap outside FlowSpec's
// ranges, else kOk (every engine checks limits by it).
FlowError check_limits(double weight, double max_bps);

// What the last iteration saw, over links that carry flows.
struct IterationStats {
  // Worst KKT residual: |G|/c on priced links, max(G,0)/c on free links, where
  // G = Σ raw rates - capacity. Zero at the optimum.
  double max_residual = 0;
  // Worst (Σ raw rates) / capacity, before normalization.
  double max_raw_utilization = 0;
  bool converged = false;
};

template <typename Real>
class BasicEngine {
 public:
  using value_type = Real;

  // Throws std::invalid_argument for a capacity outside [kMinRateBps,
  // kMaxRateBps] or a bad config.
  BasicEngine(std::vector<double> link_capacity_bps, std::uint32_t num_sites,
              const EngineConfig& config);
  ~BasicEngine();
  BasicEngine(const BasicEngine&) = delete;
  BasicEngine& operator=(const BasicEngine&) = delete;

  FlowError check_flow(const FlowSpec& f) const;
  // Changes a live flow's weight and rate cap (FlowSpec's meaning and
  // ranges; kBadWeight / kBadMaxRate and nothing changed otherwise). O(1):
  // policies that re-weight flows (tenants) call it between iterations.
  FlowError set_limits(FlowId id, double weight, double max_bps);
  // A floor: the flow gets floor_bps on top of its share of what floors leave
  // (rate = floor + the utility-maximizing rate on capacities less every
  // floor on them). Refused (false, nothing changed) when it exceeds the
  // flow's cap or would reserve more than max_reserved_share of a link on
  // its path; callers admit floors in the order they value them. 0 removes
  // the floor. O(path).
  bool set_floor(FlowId id, double floor_bps);
  double floor_bps(FlowId id) const;
  // Σ floors on link l, bits/s.
  double reserved_bps(LinkId l) const;
  // O(1) amortized. Requires check_flow(f) == kOk. The new flow's first rate
  // comes from the current prices at the next iterate().
  FlowId add_flow(const FlowSpec& f);
  // O(1): the block's last flow moves into the freed slot.
  void remove_flow(FlowId id);
  bool has_flow(FlowId id) const;

  // One optimizer iteration plus normalization (serial driver).
  void iterate();
  // iterate() until converged or max_iterations; returns iterations run.
  std::uint64_t solve(std::uint64_t max_iterations);

  // Normalized rate (what endpoints are told, its floor included), bits/s; 0
  // before the first iteration that saw the flow.
  double rate_bps(FlowId id) const;
  // Optimizer rate before normalization, bits/s (without the floor).
  double raw_rate_bps(FlowId id) const;
  // What the next iterate() would first give this flow if no price moved:
  // its rate at the current prices (floored at U'(cap)), normalized as the
  // last iteration's loads plus its own would normalize it (F-NORM: the
  // largest of (load + x) / capacity on its path; with several classes the
  // layer's capacity is taken as the link's, so the guess can be high by
  // the reserves), capped, plus its floor. O(path). A new flow's rate_bps
  // is 0 until an iteration sees it; the daemon tells this instead so a
  // start is answered before the turn's iteration (docs/allocator.md).
  double estimate_rate_bps(FlowId id) const;
  // Link l's price for class `priority` (per Gbit/s); 0 for a class no flow
  // has used yet.
  double price(LinkId l, std::uint8_t priority = kDefaultClass) const;
  void set_price(LinkId l, double p, std::uint8_t priority = kDefaultClass);
  // Classes in use (each has a layer of prices), highest first.
  std::vector<std::uint8_t> classes() const;
  // The link's capacity as given (floors are not subtracted).
  double capacity_bps(LinkId l) const;
  // Σ normalized rates on a link (bits/s); computed on demand, O(flows).
  std::vector<double> link_allocation_bps() const;

  // Re-partitions the flows into blocks*blocks FlowBlocks, keeping every
  // flow's id, limits, floor and rates and every price: O(flows + the
  // blocks' links). The next iterations compute what an engine built with
  // that block count would from the same state, up to the order of the
  // float sums. A driver uses it to run one block on one thread while that
  // is faster (allocator/parallel). Refused (false, nothing changed) where a
  // block would exceed the local link limit (FlowError::kBlockFull), or
  // for blocks = 1 where the links times the classes exceed it (so no later
  // flow can be refused for it); blocks outside [1, 64] throw.
  bool set_blocks(std::uint32_t blocks);

  // Hands back what a burst of flows left behind: the ids freed at the top
  // of the range (id_bound() falls to one past the highest live id, so
  // tables indexed by FlowId may shrink to it) and the blocks' spare
  // capacity. Live flows keep their ids; nothing else changes. O(free ids
  // log + flows): for an idle moment, not every turn.
  void compact();
  // Every live FlowId is below it.
  FlowId id_bound() const { return static_cast<FlowId>(slots_.size()); }

  std::size_t num_flows() const { return live_flows_; }
  std::size_t num_links() const { return capacity_.size(); }
  std::uint64_t iterations() const { return iterations_; }
  const IterationStats& stats() const { return stats_; }
  const EngineConfig& config() const { return config_; }
  const AlphaFair& utility() const { return utility_; }
  // Which compiled variant of the hot loops runs ("avx512" or "generic").
  const char* kernel_name() const;

  // FlowBlocks (paper §4): blocks_per_side() squared, config().blocks until
  // set_blocks() changes it; the flows in block b (for scheduling).
  std::size_t num_blocks() const { return blocks_.size(); }
  std::uint32_t blocks_per_side() const { return layout_; }
  std::size_t block_size(std::size_t b) const;

  // A FlowBlock's flow ids and normalized rates, slot-aligned, for a driver
  // that scans every rate after an iteration (the daemon's update check):
  // streaming these beats rate_bps(id) per flow. Rates are in units of
  // kRateUnitBps. Valid until the next add_flow/remove_flow.
  static constexpr double kRateUnitBps = 1e9;
  struct BlockRates {
    const FlowId* ids;
    const Real* rates;
    std::size_t size;
  };
  BlockRates block_rates(std::size_t b) const;

 private:
  // What drivers reach into: the steps of one iteration, the link sums and
  // the rates that processes exchange. DriverView (engine_driver.h) opens
  // them and says what each does.
  template <typename E>
  friend class DriverView;
  struct LinkPartial {
    double max_residual = 0;
    double max_raw_utilization = 0;
    double max_ratio = 0;
  };
  void prepare();
  void rate_pass(std::size_t b);
  LinkPartial update_links(std::size_t link_begin, std::size_t link_end);
  void finish_links(const LinkPartial& combined);
  void normalize_pass(std::size_t b);
  static LinkPartial combine(const LinkPartial& a, const LinkPartial& b);
  std::uint32_t class_mask() const;
  void use_classes(std::uint32_t mask);
  std::size_t num_layers() const { return layers_by_class_.size(); }
  std::uint8_t class_of_layer(std::uint32_t layer) const;
  struct BlockSums {
    const LinkId* links;
    const Real* yh;
    std::size_t size;
  };
  BlockSums block_sums(std::size_t b) const;
  void sum_blocks(Real* yh) const;
  LinkPartial update_links_from(std::size_t begin, std::size_t end, const Real* yh);
  LinkPartial update_listed_links_from(const LinkId* links, std::size_t n, const Real* yh);
  void save_links(const std::uint32_t* virtual_links, std::size_t n, Real* out) const;
  void load_links(const std::uint32_t* virtual_links, std::size_t n, const Real* in);
  std::uint32_t block_of_sites(std::uint32_t src_site, std::uint32_t dst_site) const {
    return block_in(layout_, src_site, dst_site);
  }
  void copy_block_rates(std::size_t b, Real* x, Real* xn) const;
  void load_block_rates(std::size_t b, const Real* x, const Real* xn);
  void load_block_rate(std::size_t b, std::size_t i, Real x, Real xn);

  struct Block;
  struct Slot {
    std::uint32_t block;
    std::uint32_t index;  // kFreeSlot when the id is unused
    std::uint32_t src_site, dst_site;  // what places it in a block (set_blocks)
  };
  static constexpr std::uint32_t kFreeSlot = std::numeric_limits<std::uint32_t>::max();

  std::uint32_t block_of(const FlowSpec& f) const { return block_in(layout_, f.src_site, f.dst_site); }
  // The FlowBlock of a flow between two sites with `layout` blocks per side.
  std::uint32_t block_in(std::uint32_t layout, std::uint32_t src_site, std::uint32_t dst_site) const;
  // A per-flow array of its block (Gbit/s), in bits/s.
  double flow_bps(FlowId id, AlignedVector<Real> Block::*field) const;
  // The layer of class c, created (prices 1) when c is first used.
  std::uint32_t layer(std::uint8_t c);
  std::uint32_t virtual_link(std::uint32_t layer, LinkId l) const {
    return layer * static_cast<std::uint32_t>(capacity_.size()) + l;
  }
  // update_links's bodies, with sum_of(i, l) giving the (y, h) sums of the
  // i-th layer in class order on link l.
  // Links is a range of link ids (every link of a range, or those in use).
  template <typename Links, typename Sum>
  LinkPartial update_single(const Links& links, Sum sum_of);
  template <typename Links, typename Sum>
  LinkPartial update_layered(const Links& links, Sum sum_of);
  // The price steps over `links` from sums in sum_blocks()'s layout.
  template <typename Links>
  LinkPartial update_from(const Links& links, const Real* yh);
  // Σ of the blocks' accumulators for virtual link v (in block order).
  detail::LinkAcc<Real> link_sum(std::size_t v) const;
  void rebuild_contributions();
  void count_uses(const Path& p, bool add);
  void refresh_used_links();
  double min_path_capacity(const Path& p) const;
  // The global links of flow slot s of block k.
  Path path_of(const Block& k, std::size_t s) const;
  // cap and floor_price of slot s from its weight, limit and floor.
  void refresh_cap(Block& k, std::size_t s);
  void set_reserved(LinkId l, double gbps);

  EngineConfig config_;
  std::uint32_t layout_;  // blocks per side now (set_blocks)
  AlphaFair utility_;
  std::uint32_t num_sites_;
  const detail::Kernels<Real>* kernels_;
  // Global link state (internal units: Gbit/s and price per Gbit/s).
  // capacity_ is what the optimizer sees: the nominal capacity less the
  // floors reserved on the link.
  AlignedVector<Real> nominal_;
  std::vector<double> reserved_;
  AlignedVector<Real> capacity_;
  AlignedVector<Real> inv_capacity_;
  // Per virtual link (layer * links + link): price, and the load ratio F-NORM
  // divides by (Σ raw rate / capacity with one class in use).
  AlignedVector<Real> price_;
  AlignedVector<Real> ratio_;
  // Layers: layer_of_[class] (-1: unused), and the layers in class order
  // (the order a link's layers are updated in; its size is their number).
  std::array<std::int8_t, kNumClasses> layer_of_;
  std::vector<std::uint32_t> layers_by_class_;
  std::vector<std::unique_ptr<Block>> blocks_;
  // For each global link, the blocks' private accumulators to sum, in block
  // order (CSR). Rebuilt when a block gains a local link, which is also the
  // only time a block's accumulator array can move.
  std::vector<std::uint32_t> contrib_begin_;
  std::vector<const detail::LinkAcc<Real>*> contrib_;
  // Links in use: live flows per link (any class), a bit per link with
  // flows, and those links ascending (made again in prepare() when a link
  // started or stopped being used). The others carry no flow; their ratio
  // is 0. A block's copies of links outlive its flows (until compact()), so
  // this is not what the blocks hold.
  std::vector<std::uint32_t> uses_;
  std::vector<std::uint64_t> used_bits_;
  std::vector<std::uint32_t> used_links_;
  bool used_dirty_ = false;
  bool contributions_dirty_ = true;
  // Stable flow ids.
  std::vector<Slot> slots_;
  IdFreeList<FlowId> ids_;
  std::size_t live_flows_ = 0;
  std::uint64_t iterations_ = 0;
  IterationStats stats_;
  Real max_ratio_ = 0;  // U-NORM's r* from the last update_links
};

extern template class BasicEngine<float>;
extern template class BasicEngine<double>;

// iterate(engine) until the engine's stats say converged or max_iterations
// ran; returns the iterations run. A driver passes its own iteration
// (allocator/parallel, allocator/mpi: there every rank sees the same
// stats); without one, engine.iterate() (any engine with iterate() and
// stats()).
template <typename E, typename Iterate>
std::uint64_t iterate_until_converged(E& engine, std::uint64_t max_iterations, Iterate&& iterate) {
  std::uint64_t n = 0;
  while (n < max_iterations) {
    iterate(engine);
    ++n;
    if (engine.stats().converged) break;
  }
  return n;
}
template <typename E>
std::uint64_t iterate_until_converged(E& engine, std::uint64_t max_iterations) {
  return iterate_until_converged(engine, max_iterations, [](E& x) { x.iterate(); });
}

// The precision the daemon and tools use (chosen by measurement: docs/engine.md).
using Engine = BasicEngine<double>;

}  // namespace flowtune::alloc
