#include "flowtune/alloc/coflow.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace flowtune::alloc {

const char* to_string(CoflowPolicy p) {
  switch (p) {
    case CoflowPolicy::kNone: return "none";
    case CoflowPolicy::kStf: return "stf";
    case CoflowPolicy::kSebf: return "sebf";
    case CoflowPolicy::kBssi: return "bssi";
  }
  return "?";
}

bool parse_coflow_policy(std::string_view s, CoflowPolicy& out) {
  for (auto p : {CoflowPolicy::kNone, CoflowPolicy::kStf, CoflowPolicy::kSebf, CoflowPolicy::kBssi}) {
    if (s == to_string(p)) {
      out = p;
      return true;
    }
  }
  return false;
}

std::string_view check(const CoflowConfig& c) {
  if (!(c.ordered_share > 0 && c.ordered_share <= 1)) return "ordered share must be within (0, 1]";
  if (!(c.aging_s >= 0 && c.aging_s < kMaxAgingS)) return "aging must be within [0, 1e9) s";
  return "";
}

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::uint32_t kNoLocal = ~0u;
}  // namespace

void CoflowPlanner::group(std::span<const CoflowFlow> flows, double aging_s) {
  by_coflow_.resize(flows.size());
  std::iota(by_coflow_.begin(), by_coflow_.end(), 0u);
  const auto by_id = [&](std::uint32_t a, std::uint32_t b) {
    return flows[a].coflow < flows[b].coflow;
  };
  // Callers that keep flows grouped (the simulator) pay no sort.
  if (!std::is_sorted(by_coflow_.begin(), by_coflow_.end(), by_id)) {
    std::stable_sort(by_coflow_.begin(), by_coflow_.end(), by_id);
  }
  groups_.clear();
  for (std::uint32_t i = 0; i < by_coflow_.size();) {
    std::uint32_t j = i;
    double waited = 0;
    for (; j < by_coflow_.size() && flows[by_coflow_[j]].coflow == flows[by_coflow_[i]].coflow; ++j) {
      waited = std::max(waited, flows[by_coflow_[j]].waited_s);
    }
    const double weight = aging_s > 0 ? 1 + waited / aging_s : 1.0;
    groups_.push_back({flows[by_coflow_[i]].coflow, 0, weight, i, j});
    i = j;
  }
}

void CoflowPlanner::plan(const CoflowConfig& c, std::span<const double> avail_bps,
                         std::span<const CoflowFlow> flows, std::vector<double>& ordered) {
  ordered.assign(flows.size(), 0.0);
  order_ids_.clear();
  if (c.policy == CoflowPolicy::kNone || flows.empty()) return;
  group(flows, c.aging_s);
  cap_.assign(avail_bps.size(), 0.0);
  for (std::size_t l = 0; l < avail_bps.size(); ++l) cap_[l] = std::max(0.0, avail_bps[l]) * c.ordered_share;
  load_.assign(avail_bps.size(), 0.0);
  key_groups(c, flows);
  serve_in_order(c, flows, ordered);
}

// Only flows of known size are ordered; the others of a coflow get the
// shared part alone and do not hold their coflow back.
bool CoflowPlanner::sized(const CoflowFlow& f) { return f.remaining_bytes < kInf; }

// The coflow's bytes per link (load_, touched_), and its bottleneck time
// on `cap` (seconds; +inf when a loaded link has nothing left or no flow
// has a size). A capped flow is a bottleneck of its own.
double CoflowPlanner::bottleneck(std::span<const CoflowFlow> flows, const Group& g,
                                 const std::vector<double>& cap) {
  touched_.clear();
  double gamma = 0;
  bool any = false;
  for (std::uint32_t k = g.begin; k < g.end; ++k) {
    const CoflowFlow& f = flows[by_coflow_[k]];
    if (!sized(f)) continue;
    any = true;
    if (f.max_bps < kInf) gamma = std::max(gamma, 8 * f.remaining_bytes / f.max_bps);
    for (LinkId l : f.path) {
      if (load_[l] == 0) touched_.push_back(l);
      load_[l] += f.remaining_bytes;
    }
  }
  for (LinkId l : touched_) gamma = std::max(gamma, cap[l] > 0 ? 8 * load_[l] / cap[l] : kInf);
  return any ? gamma : kInf;
}

void CoflowPlanner::clear_load() {
  for (LinkId l : touched_) load_[l] = 0;
}

std::span<const std::uint32_t> CoflowPlanner::sized_members(std::span<const CoflowFlow> flows,
                                                            const Group& g) {
  all_.clear();
  for (std::uint32_t k = g.begin; k < g.end; ++k) {
    if (sized(flows[by_coflow_[k]])) all_.push_back(by_coflow_[k]);
  }
  return std::span<const std::uint32_t>(all_);
}

// Each group's key by the policy, per weight, and the groups in key order.
void CoflowPlanner::key_groups(const CoflowConfig& c, std::span<const CoflowFlow> flows) {
  const bool bssi = c.policy == CoflowPolicy::kBssi && order_bssi(flows);
  for (Group& g : groups_) {
    if (bssi) break;  // keyed by order_bssi
    if (c.policy == CoflowPolicy::kStf) {
      g.key = kInf;
      for (std::uint32_t k = g.begin; k < g.end; ++k) {
        const std::uint32_t i = by_coflow_[k];
        if (sized(flows[i])) g.key = (g.key < kInf ? g.key : 0) + flows[i].remaining_bytes;
      }
    } else {
      g.key = bottleneck(flows, g, cap_);
      clear_load();
    }
    g.key /= g.weight;
  }
  std::sort(groups_.begin(), groups_.end(), [](const Group& a, const Group& b) {
    return a.key != b.key ? a.key < b.key : a.id < b.id;
  });
}

// The ordered rates, coflow by coflow in key order, on what earlier ones
// left of cap_.
void CoflowPlanner::serve_in_order(const CoflowConfig& c, std::span<const CoflowFlow> flows,
                                   std::vector<double>& ordered) {
  for (const Group& g : groups_) {
    if (!(g.key < kInf)) break;  // no sized flow, or nothing left to give: shared part only
    order_ids_.push_back(g.id);
    if (c.policy != CoflowPolicy::kSebf) {
      fill(flows, sized_members(flows, g), cap_, ordered);
      continue;
    }
    // MADD: every flow at remaining ÷ Γ, Γ on what earlier coflows left.
    const double gamma = bottleneck(flows, g, cap_);
    if (gamma > 0 && gamma < kInf) {
      for (std::uint32_t k = g.begin; k < g.end; ++k) {
        const std::uint32_t i = by_coflow_[k];
        if (sized(flows[i])) ordered[i] = 8 * flows[i].remaining_bytes / gamma;
      }
      for (LinkId l : touched_) cap_[l] = std::max(0.0, cap_[l] - 8 * load_[l] / gamma);
    }
    clear_load();
  }
  if (c.policy != CoflowPolicy::kSebf) return;
  // Work conservation in the same order: what MADD left (links a coflow's
  // bottleneck kept it from filling) goes to the first coflows that can use it.
  for (const Group& g : groups_) {
    if (!(g.key < kInf)) break;
    fill(flows, sized_members(flows, g), cap_, ordered);
  }
}

bool CoflowPlanner::order_bssi(std::span<const CoflowFlow> flows) {
  // Each placement scans the busiest link's coflows: quadratic in the
  // coflows sharing a link. Past kMaxBssiCoflows the caller orders by SEBF.
  if (measure_work(flows) > kMaxBssiCoflows) return false;
  index_work();
  weight_.resize(groups_.size());
  for (std::uint32_t gi = 0; gi < groups_.size(); ++gi) weight_[gi] = groups_[gi].weight;
  std::size_t unplaced = 0;
  for (std::uint32_t gi = 0; gi < groups_.size(); ++gi) {
    groups_[gi].key = kInf;  // unsized coflows are never ordered
    unplaced += work_begin_[gi + 1] > work_begin_[gi];
  }
  place_from_the_back(unplaced);
  return true;
}

// order_bssi()'s work_: each sized coflow's seconds of work per link; the
// number of coflows with some.
std::size_t CoflowPlanner::measure_work(std::span<const CoflowFlow> flows) {
  // Each sized coflow's seconds of work per link on the order's capacity
  // (cap_); a link with nothing left to give counts as very slow, not as
  // infinitely so, so it still ranks its coflows.
  work_.clear();
  work_begin_.assign(groups_.size() + 1, 0);
  std::size_t sized_groups = 0;
  for (std::uint32_t gi = 0; gi < groups_.size(); ++gi) {
    const Group& g = groups_[gi];
    touched_.clear();
    for (std::uint32_t k = g.begin; k < g.end; ++k) {
      const CoflowFlow& f = flows[by_coflow_[k]];
      if (!(f.remaining_bytes < kInf) || !(f.remaining_bytes > 0)) continue;
      for (LinkId l : f.path) {
        if (load_[l] == 0) touched_.push_back(l);
        load_[l] += f.remaining_bytes;
      }
    }
    for (LinkId l : touched_) {
      work_.push_back({gi, l, 8 * load_[l] / std::max(cap_[l], 1.0)});
      load_[l] = 0;
    }
    work_begin_[gi + 1] = static_cast<std::uint32_t>(work_.size());
    sized_groups += !touched_.empty();
  }
  return sized_groups;
}

// order_bssi()'s index of work_ by link.
void CoflowPlanner::index_work() {
  // The work by link (indices into work_, each link's live ones first), and
  // each link's total over coflows not yet placed.
  link_work_begin_.assign(cap_.size() + 1, 0);
  for (const Work& w : work_) ++link_work_begin_[w.link + 1];
  for (std::size_t l = 0; l < cap_.size(); ++l) link_work_begin_[l + 1] += link_work_begin_[l];
  link_work_end_.assign(link_work_begin_.begin(), link_work_begin_.end() - 1);
  work_by_link_.resize(work_.size());
  work_pos_.resize(work_.size());
  link_left_.assign(cap_.size(), 0.0);
  busy_links_.clear();
  busy_pos_.assign(cap_.size(), 0);
  for (std::uint32_t wi = 0; wi < work_.size(); ++wi) {
    const Work& w = work_[wi];
    if (link_work_end_[w.link] == link_work_begin_[w.link]) {
      busy_pos_[w.link] = static_cast<std::uint32_t>(busy_links_.size());
      busy_links_.push_back(w.link);
    }
    link_left_[w.link] += w.seconds;
    work_pos_[wi] = link_work_end_[w.link];
    work_by_link_[link_work_end_[w.link]++] = wi;
  }
}

// order_bssi()'s placement of `unplaced` coflows, last place first.
void CoflowPlanner::place_from_the_back(std::size_t unplaced) {
  // From the back: the last place goes to the coflow with the most work
  // per weight on the most loaded link (ties: the lower link, the larger
  // coflow id, so the order does not depend on the flows' order).
  for (std::size_t place = unplaced; place-- > 0;) {
    LinkId b = busy_links_.front();
    for (LinkId l : busy_links_) {
      if (link_left_[l] > link_left_[b] || (link_left_[l] == link_left_[b] && l < b)) b = l;
    }
    std::uint32_t last = ~0u;
    double best = -1, d_last = 0;
    for (std::uint32_t p = link_work_begin_[b]; p < link_work_end_[b]; ++p) {
      const Work& w = work_[work_by_link_[p]];
      const double per_weight = weight_[w.group] > 0 ? w.seconds / weight_[w.group] : kInf;
      if (per_weight > best ||
          (per_weight == best && groups_[w.group].id > groups_[last].id)) {
        best = per_weight;
        last = w.group;
        d_last = w.seconds;
      }
    }
    // Scale: the others on b give up weight in proportion to their work there.
    if (d_last > 0) {
      for (std::uint32_t p = link_work_begin_[b]; p < link_work_end_[b]; ++p) {
        const Work& w = work_[work_by_link_[p]];
        if (w.group == last) continue;
        weight_[w.group] = std::max(0.0, weight_[w.group] - weight_[last] * w.seconds / d_last);
      }
    }
    groups_[last].key = static_cast<double>(place);
    // Its work leaves every link it was on; a link left with no coflow
    // leaves the busy list, whatever rounding left of its total.
    for (std::uint32_t wi = work_begin_[last]; wi < work_begin_[last + 1]; ++wi) {
      const LinkId l = work_[wi].link;
      link_left_[l] = std::max(0.0, link_left_[l] - work_[wi].seconds);
      const std::uint32_t at = work_pos_[wi], tail = --link_work_end_[l];
      work_by_link_[at] = work_by_link_[tail];
      work_pos_[work_by_link_[at]] = at;
      if (tail == link_work_begin_[l]) {
        link_left_[l] = 0;
        const std::uint32_t bp = busy_pos_[l];
        busy_links_[bp] = busy_links_.back();
        busy_pos_[busy_links_[bp]] = bp;
        busy_links_.pop_back();
      }
    }
  }
}

void CoflowPlanner::backfill(std::span<const double> capacity_bps,
                             std::span<const CoflowFlow> flows, std::vector<double>& rates) {
  cap_.assign(capacity_bps.begin(), capacity_bps.end());
  for (std::size_t i = 0; i < flows.size(); ++i) {
    for (LinkId l : flows[i].path) cap_[l] -= rates[i];
  }
  for (double& x : cap_) x = std::max(0.0, x);
  members_.resize(flows.size());
  std::iota(members_.begin(), members_.end(), 0u);
  fill(flows, members_, cap_, rates);
}

// Progressive filling: every unfrozen flow rises by the same amount until
// some link is full; that link's flows freeze; repeat. Links are numbered
// locally (only those the members touch), so a small coflow costs nothing
// for the links it does not touch; a capped flow has a link of its own
// (its headroom to the cap) that only it crosses.
void CoflowPlanner::fill(std::span<const CoflowFlow> flows,
                         std::span<const std::uint32_t> members, std::vector<double>& cap,
                         std::vector<double>& rates) {
  const std::size_t real = index_links(flows, members, cap, rates);
  const std::size_t nl = lcap_.size();
  // Scanning every link each round costs links x rounds; the heap, a log
  // per flow and link. Measured: the heap made a 50k-flow backfill over 300
  // links 5.5x slower; the scan suits few links, the heap many.
  const double rounds = static_cast<double>(std::min(nl, members.size()));
  const bool scan = fill_way_ == Fill::kAuto
                        ? static_cast<double>(nl) * rounds <=
                              8.0 * static_cast<double>(members.size()) *
                                  std::log2(static_cast<double>(nl) + 2)
                        : fill_way_ == Fill::kScan;
  if (scan) {
    fill_by_scan(flows, members, rates);
  } else {
    fill_by_heap(flows, members, rates);
  }
  for (std::size_t j = 0; j < real; ++j) {
    cap[links_[j]] = std::max(0.0, lcap_[j]);
    local_[links_[j]] = kNoLocal;
  }
}

// fill()'s local links: the members' links (the first ones, whose number
// it returns), then a capped member's own; each link's members (CSR), all
// unfrozen.
std::size_t CoflowPlanner::index_links(std::span<const CoflowFlow> flows,
                                       std::span<const std::uint32_t> members,
                                       const std::vector<double>& cap,
                                       const std::vector<double>& rates) {
  if (local_.size() < cap.size()) local_.resize(cap.size(), kNoLocal);
  links_.clear();
  lcap_.clear();
  own_.assign(members.size(), kNoLocal);
  for (std::uint32_t k = 0; k < members.size(); ++k) {
    const CoflowFlow& f = flows[members[k]];
    for (LinkId l : f.path) {
      if (local_[l] == kNoLocal) {
        local_[l] = static_cast<std::uint32_t>(links_.size());
        links_.push_back(l);
        lcap_.push_back(std::max(0.0, cap[l]));
      }
    }
  }
  const std::size_t real = links_.size();
  for (std::uint32_t k = 0; k < members.size(); ++k) {
    const CoflowFlow& f = flows[members[k]];
    if (!(f.max_bps < kInf)) continue;
    own_[k] = static_cast<std::uint32_t>(lcap_.size());
    lcap_.push_back(std::max(0.0, f.max_bps - rates[members[k]]));
  }
  const std::size_t nl = lcap_.size();
  link_begin_.assign(nl + 1, 0);
  for (std::uint32_t k = 0; k < members.size(); ++k) {
    each_link(flows, members, k, [&](std::uint32_t j) { ++link_begin_[j + 1]; });
  }
  for (std::size_t j = 0; j < nl; ++j) link_begin_[j + 1] += link_begin_[j];
  link_flows_.resize(link_begin_[nl]);
  unfrozen_.assign(nl, 0);
  for (std::uint32_t k = 0; k < members.size(); ++k) {
    each_link(flows, members, k, [&](std::uint32_t j) { link_flows_[link_begin_[j] + unfrozen_[j]++] = k; });
  }
  frozen_.assign(members.size(), 0);
  return real;
}

template <typename Fn>
void CoflowPlanner::each_link(std::span<const CoflowFlow> flows, std::span<const std::uint32_t> members,
                              std::uint32_t k, Fn&& fn) const {
  for (LinkId l : flows[members[k]].path) fn(local_[l]);
  if (own_[k] != kNoLocal) fn(own_[k]);
}

// Member k stops at `level`: its rate rises by it and touch(j) runs for
// each of its local links.
template <typename Fn>
void CoflowPlanner::freeze(std::span<const CoflowFlow> flows, std::span<const std::uint32_t> members,
                           std::uint32_t k, double level, std::vector<double>& rates, Fn&& touch) {
  frozen_[k] = 1;
  rates[members[k]] += level;
  each_link(flows, members, k, touch);
}

// fill() by scanning every link each round for the next to fill.
void CoflowPlanner::fill_by_scan(std::span<const CoflowFlow> flows,
                                 std::span<const std::uint32_t> members, std::vector<double>& rates) {
  const std::size_t nl = lcap_.size();
  double level = 0;
  std::size_t left = members.size();
  while (left > 0) {
    double inc = kInf;
    for (std::uint32_t j = 0; j < nl; ++j) {
      if (unfrozen_[j] > 0) inc = std::min(inc, lcap_[j] / unfrozen_[j]);
    }
    if (!(inc < kInf)) break;
    level += inc;
    full_.clear();
    for (std::uint32_t j = 0; j < nl; ++j) {
      if (unfrozen_[j] == 0) continue;
      const double before = lcap_[j];
      lcap_[j] -= inc * unfrozen_[j];
      if (lcap_[j] <= 1e-9 * before || lcap_[j] <= 1e-6) full_.push_back(j);
    }
    for (std::uint32_t j : full_) {
      lcap_[j] = 0;
      for (std::uint32_t p = link_begin_[j]; p < link_begin_[j + 1]; ++p) {
        const std::uint32_t k = link_flows_[p];
        if (frozen_[k]) continue;
        --left;
        freeze(flows, members, k, level, rates, [&](std::uint32_t m) { --unfrozen_[m]; });
      }
    }
  }
}

// fill() by a heap of the levels at which links fill; entries go stale
// when a link loses a flow (its version moves) and are skipped.
void CoflowPlanner::fill_by_heap(std::span<const CoflowFlow> flows,
                                 std::span<const std::uint32_t> members, std::vector<double>& rates) {
  const std::size_t nl = lcap_.size();
  base_.assign(nl, 0.0);
  version_.assign(nl, 0);
  heap_.clear();
  const auto later = [](const Due& a, const Due& b) { return a.level > b.level; };
  for (std::uint32_t j = 0; j < nl; ++j) heap_.push_back({lcap_[j] / unfrozen_[j], j, 0});
  std::make_heap(heap_.begin(), heap_.end(), later);
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    const Due d = heap_.back();
    heap_.pop_back();
    if (d.version != version_[d.link] || unfrozen_[d.link] == 0) continue;
    const double level = d.level;
    for (std::uint32_t p = link_begin_[d.link]; p < link_begin_[d.link + 1]; ++p) {
      const std::uint32_t k = link_flows_[p];
      if (frozen_[k]) continue;
      freeze(flows, members, k, level, rates, [&](std::uint32_t j) {
        lcap_[j] -= (level - base_[j]) * unfrozen_[j];
        base_[j] = level;
        if (--unfrozen_[j] > 0 && j != d.link) {
          heap_.push_back({level + std::max(0.0, lcap_[j]) / unfrozen_[j], j, ++version_[j]});
          std::push_heap(heap_.begin(), heap_.end(), later);
        }
      });
    }
    lcap_[d.link] = 0;  // full
  }
}

}  // namespace flowtune::alloc
