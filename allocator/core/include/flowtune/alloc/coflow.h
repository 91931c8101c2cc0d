// Coflow-aware allocation (docs/coflows.md). A coflow is every flow carrying
// one coflow id, from any hosts to any hosts; it ends with its last flow, so
// what its user waits for is the coflow completion time (CCT), not any one
// flow's rate. Pure: no clock, no I/O; the daemon (through PolicyBook) and
// the simulator run the same planner.
//
// plan() orders the coflows and hands out each link's capacity in that order:
// - kStf (smallest total remaining bytes first, as Creek's smallest-task-
//   first): a coflow's flows split what the coflows before it left max-min
//   fairly, each as fast as its path allows;
// - kSebf (smallest effective bottleneck first, Varys): the coflow whose
//   remaining bytes would take least time alone on its most loaded link goes
//   first, and its flows get rates that make them all finish together on
//   what is left (MADD: remaining ÷ Γ, Γ the coflow's bottleneck time on the
//   capacity left), so no flow takes capacity its coflow cannot use;
// - kBssi (Sincronia's Bottleneck-Select-Scale-Iterate): the order is built
//   from the back: on the most loaded link (remaining seconds of work over
//   the coflows not yet placed), the coflow with the most work there per
//   unit of its weight goes last, the others' weights shrink by what it
//   took, repeat; each coflow's flows then split what earlier ones left, as
//   with kStf. Sincronia bounds this order within 4x of the optimal average
//   CCT for coflows all present at once, served strictly in order on a
//   non-blocking switch; re-planned at every arrival, with a share left to
//   every flow, no bound carries over. Past kMaxBssiCoflows sized coflows
//   (each placement scans the busiest link's coflows) a plan orders by
//   SEBF's key instead.
// The order only hands out `ordered_share` of every link; what it leaves
// (that share's unused part, and the rest of the link) is shared by every
// flow, so the planner is work-conserving and no coflow starves: a large
// coflow always keeps its fair share of 1 - ordered_share. Aging
// (`aging_s`) is a second guard, for an order given whole links: a coflow's
// weight grows as 1 + waited / aging_s, its key (stf's bytes, sebf's
// bottleneck time) is divided by it and bssi starts from it, so a coflow
// with k times a newcomer's key goes before it once it has waited
// (k - 1) * aging_s. It reorders whenever coflows have waited, so it costs
// the mean CCT where nothing starves (docs/coflows.md). Flows with equal
// ids are one coflow (callers give a flow outside any coflow an id of its
// own); a flow of unknown size is never ordered and does not hold its
// coflow back.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

#include "flowtune/alloc/topology.h"

namespace flowtune::alloc {

enum class CoflowPolicy : std::uint8_t { kNone, kStf, kSebf, kBssi };
const char* to_string(CoflowPolicy p);
// "none", "stf", "sebf", "bssi"; false for anything else.
bool parse_coflow_policy(std::string_view s, CoflowPolicy& out);

inline constexpr std::size_t kMaxBssiCoflows = 2048;
inline constexpr double kMaxAgingS = 1e9;  // CoflowConfig::aging_s is below it

struct CoflowFlow {
  std::uint64_t coflow = 0;  // flows with equal ids form one coflow
  double remaining_bytes = 0;  // > 0; +infinity when unknown
  Path path;
  // The most the flow may get (its own or its tenant's cap), bits/s.
  double max_bps = std::numeric_limits<double>::infinity();
  // How long its coflow has waited, seconds (a coflow ages as its oldest
  // flow: the largest over its flows counts).
  double waited_s = 0;
};

struct CoflowConfig {
  CoflowPolicy policy = CoflowPolicy::kSebf;
  // The share of every link the order hands out, in (0, 1]; the rest is
  // shared by all flows (the starvation guard).
  double ordered_share = 0.9;
  // Aging: a coflow's weight is 1 + waited_s / aging_s; 0 = off.
  double aging_s = 0;
};

// "" when the config is valid, else why not.
std::string_view check(const CoflowConfig& c);

class CoflowPlanner {
 public:
  // ordered[i]: flow i's rate from the order, bits/s (0 for a flow the order
  // gave nothing). avail_bps: per link, what the order may use before the
  // ordered share is applied (the link's capacity less floors held by
  // others). Every link a flow names must be < avail_bps.size(). kNone gives
  // every flow 0. Flows grouped by id cost no sort (else one stable sort by
  // id); then each coflow's fill costs its own flows and links.
  void plan(const CoflowConfig& c, std::span<const double> avail_bps,
            std::span<const CoflowFlow> flows, std::vector<double>& ordered);

  // Adds to rates[i] a max-min fair share of what `rates` leave of
  // capacity_bps (progressive filling), so no link with a flow that could
  // use more is left idle. rates.size() == flows.size(). O(links × rounds +
  // flows × path).
  void backfill(std::span<const double> capacity_bps, std::span<const CoflowFlow> flows,
                std::vector<double>& rates);

  // How progressive filling finds the next full link: by cost (the
  // default), or always one way (tests compare the two).
  enum class Fill : std::uint8_t { kAuto, kScan, kHeap };
  void set_fill(Fill f) { fill_way_ = f; }

  // The coflows of the last plan(), in the order served (their ids).
  const std::vector<std::uint64_t>& order() const { return order_ids_; }

 private:
  struct Group {
    std::uint64_t id;
    double key;      // the order's key (bytes or seconds)
    double weight;   // 1, or more as it ages
    std::uint32_t begin, end;  // in by_coflow_
  };
  void group(std::span<const CoflowFlow> flows, double aging_s);
  // plan()'s steps: each group's key, then the ordered rates in key order.
  void key_groups(const CoflowConfig& c, std::span<const CoflowFlow> flows);
  void serve_in_order(const CoflowConfig& c, std::span<const CoflowFlow> flows,
                      std::vector<double>& ordered);
  static bool sized(const CoflowFlow& f);
  double bottleneck(std::span<const CoflowFlow> flows, const Group& g, const std::vector<double>& cap);
  void clear_load();
  std::span<const std::uint32_t> sized_members(std::span<const CoflowFlow> flows, const Group& g);
  // kBssi: sets each sized group's key to its place in the order; false
  // (keys untouched) past kMaxBssiCoflows.
  bool order_bssi(std::span<const CoflowFlow> flows);
  // order_bssi()'s steps: each coflow's work per link (returns how many
  // coflows have some), that work indexed by link, and the placement.
  std::size_t measure_work(std::span<const CoflowFlow> flows);
  void index_work();
  void place_from_the_back(std::size_t unplaced);
  // Water-fills `members` (flow indices) on cap (bits/s, consumed), adding
  // to rates.
  void fill(std::span<const CoflowFlow> flows, std::span<const std::uint32_t> members,
            std::vector<double>& cap, std::vector<double>& rates);
  // fill()'s steps: the local links and their members; progressive
  // filling by scanning the links or by a heap of their fill levels.
  std::size_t index_links(std::span<const CoflowFlow> flows, std::span<const std::uint32_t> members,
                          const std::vector<double>& cap, const std::vector<double>& rates);
  void fill_by_scan(std::span<const CoflowFlow> flows, std::span<const std::uint32_t> members,
                    std::vector<double>& rates);
  void fill_by_heap(std::span<const CoflowFlow> flows, std::span<const std::uint32_t> members,
                    std::vector<double>& rates);
  template <typename Fn>
  void each_link(std::span<const CoflowFlow> flows, std::span<const std::uint32_t> members,
                 std::uint32_t k, Fn&& fn) const;
  template <typename Fn>
  void freeze(std::span<const CoflowFlow> flows, std::span<const std::uint32_t> members,
              std::uint32_t k, double level, std::vector<double>& rates, Fn&& touch);

  std::vector<std::uint32_t> by_coflow_;  // flow indices grouped by coflow
  std::vector<Group> groups_;
  std::vector<std::uint64_t> order_ids_;
  std::vector<double> cap_, load_;
  std::vector<LinkId> touched_;
  // fill() scratch: links touched (local numbers), flows per link (CSR),
  // unfrozen counts, the level each link's cap is counted from, and a heap
  // of the levels at which links fill (stale entries skipped by version).
  struct Due {
    double level;
    std::uint32_t link;
    std::uint32_t version;
  };
  std::vector<std::uint32_t> local_, link_begin_, link_flows_, unfrozen_, version_, all_, members_;
  std::vector<std::uint32_t> own_;  // a capped member's own link
  std::vector<LinkId> links_;
  std::vector<std::uint32_t> full_;
  std::vector<double> lcap_, base_;
  std::vector<Due> heap_;
  // order_bssi() scratch: each coflow's seconds of work per link, by coflow
  // (CSR over groups_) and by link; per link the work not yet placed.
  struct Work {
    std::uint32_t group;
    LinkId link;
    double seconds;
  };
  std::vector<Work> work_;
  std::vector<std::uint32_t> work_begin_, link_work_begin_, link_work_end_, work_by_link_,
      work_pos_, busy_pos_;
  std::vector<double> link_left_, weight_;
  std::vector<LinkId> busy_links_;
  std::vector<std::uint8_t> frozen_;
  Fill fill_way_ = Fill::kAuto;
};

}  // namespace flowtune::alloc
