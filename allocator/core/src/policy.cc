#include "flowtune/alloc/policy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "flowtune/common/assert.h"

namespace flowtune::alloc {
namespace {

bool rate_ok(double bps) { return bps == 0 || (bps >= kMinRateBps && bps <= kMaxRateBps); }

}  // namespace

std::string check(const TenantSpec& t) {
  if (!(t.weight >= kMinWeight && t.weight <= kMaxWeight)) {
    return "weight must be between 1e-6 and 1e6";
  }
  if (!rate_ok(t.guarantee_bps)) return "guarantee must be 0 (none) or between 1e3 and 1e15 bits/s";
  if (!rate_ok(t.cap_bps)) return "cap must be 0 (none) or between 1e3 and 1e15 bits/s";
  if (t.cap_bps > 0 && t.guarantee_bps > t.cap_bps) return "guarantee exceeds the cap";
  return "";
}

const char* to_string(DeadlineState s) {
  switch (s) {
    case DeadlineState::kNone: return "none";
    case DeadlineState::kReserved: return "reserved";
    case DeadlineState::kInfeasible: return "infeasible";
    case DeadlineState::kOverdue: return "overdue";
  }
  return "?";
}

PolicyBook::PolicyBook(double deadline_margin) : margin_(deadline_margin) {
  FT_ASSERT(deadline_margin >= 0 && deadline_margin <= 1, deadline_margin);
  tenants_.emplace_back();  // kNoTenant
}

TenantId PolicyBook::tenant(std::string_view name) {
  if (name.empty()) return kNoTenant;
  auto it = by_name_.find(std::string(name));
  if (it != by_name_.end()) return it->second;
  const auto id = static_cast<TenantId>(tenants_.size());
  tenants_.push_back({std::string(name), default_spec_, false, false, {}});
  by_name_.emplace(std::string(name), id);
  return id;
}

TenantId PolicyBook::find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? kNoTenant : it->second;
}

std::string_view PolicyBook::name(TenantId t) const { return tenants_.at(t).name; }
const TenantSpec& PolicyBook::spec(TenantId t) const { return tenants_.at(t).spec; }

void PolicyBook::set_spec(TenantId t, const TenantSpec& spec) {
  FT_ASSERT(t != kNoTenant && t < tenants_.size() && check(spec).empty(), t);
  tenants_[t].spec = spec;
  tenants_[t].named = true;
  mark(t);
}

void PolicyBook::reset_spec(TenantId t) {
  FT_ASSERT(t != kNoTenant && t < tenants_.size(), t);
  tenants_[t].spec = default_spec_;
  tenants_[t].named = false;
  mark(t);
}

void PolicyBook::set_default_spec(const TenantSpec& spec) {
  FT_ASSERT(check(spec).empty(), spec.weight);
  default_spec_ = spec;
  for (TenantId t = 1; t < tenants_.size(); ++t) {
    if (!tenants_[t].named) {
      tenants_[t].spec = spec;
      mark(t);
    }
  }
}

std::string_view PolicyBook::set_coflow(CoflowPolicy policy, double share, double aging_s) {
  CoflowConfig c{policy, share, aging_s};
  if (const auto why = check(c); !why.empty()) return why;
  FT_ASSERT(coflow_flows_.empty(), coflow_flows_.size());
  coflow_ = c;
  return "";
}

void PolicyBook::mark(TenantId t) {
  if (t == kNoTenant || tenants_[t].dirty) return;
  tenants_[t].dirty = true;
  dirty_tenants_.push_back(t);
}

void PolicyBook::compact() {
  std::size_t n = entries_.size();
  while (n > 0 && !entries_[n - 1].live) --n;
  entries_.resize(n);
  entries_.shrink_to_fit();
  deadline_flows_.shrink_to_fit();
  floored_.shrink_to_fit();
  coflow_flows_.shrink_to_fit();
}

void PolicyBook::add(FlowId id, const FlowPolicy& p, std::uint64_t now_us) {
  const bool deadline = p.deadline_at_us != 0 && p.bytes != 0;
  const bool coflow = coflow_.policy != CoflowPolicy::kNone;
  if (p.tenant == kNoTenant && !deadline && !coflow) return;
  FT_ASSERT(p.tenant < tenants_.size(), p.tenant);
  if (entries_.size() <= id) entries_.resize(std::size_t{id} + 1);
  Entry& e = entries_[id];
  FT_ASSERT(!e.live, id);
  e = Entry{};
  e.live = true;
  e.p = p;
  e.cap_bps = p.max_bps;
  e.progress_us = now_us;
  e.started_us = now_us;
  if (p.tenant != kNoTenant) {
    Tenant& t = tenants_[p.tenant];
    e.member_pos = static_cast<std::uint32_t>(t.members.size());
    t.members.push_back(id);
    mark(p.tenant);
  }
  if (deadline) {
    e.in_deadlines = true;
    e.deadline_pos = static_cast<std::uint32_t>(deadline_flows_.size());
    deadline_flows_.push_back(id);
    replan_ = true;
  }
  if (coflow) {
    e.in_coflows = true;
    e.coflow_pos = static_cast<std::uint32_t>(coflow_flows_.size());
    coflow_flows_.push_back(id);
    replan_ = true;
  }
}

void PolicyBook::remove(FlowId id) {
  if (id >= entries_.size() || !entries_[id].live) return;
  Entry& e = entries_[id];
  if (e.p.tenant != kNoTenant) {
    auto& m = tenants_[e.p.tenant].members;
    m[e.member_pos] = m.back();
    entries_[m[e.member_pos]].member_pos = e.member_pos;
    m.pop_back();
    mark(e.p.tenant);
  }
  if (e.in_deadlines) {
    deadline_flows_[e.deadline_pos] = deadline_flows_.back();
    entries_[deadline_flows_[e.deadline_pos]].deadline_pos = e.deadline_pos;
    deadline_flows_.pop_back();
    replan_ = true;
  }
  if (e.in_coflows) {
    coflow_flows_[e.coflow_pos] = coflow_flows_.back();
    entries_[coflow_flows_[e.coflow_pos]].coflow_pos = e.coflow_pos;
    coflow_flows_.pop_back();
    replan_ = true;
  }
  if (e.guarantee_bps > 0) replan_ = true;
  // The engine drops the flow's floor with the flow; floored_ may still
  // name the id until the next plan, which skips dead entries.
  e.live = false;
}

void PolicyBook::add_bytes(FlowId id, std::uint64_t bytes) {
  if (id >= entries_.size() || !entries_[id].live || bytes == 0) return;
  Entry& e = entries_[id];
  if (!e.in_deadlines && !e.in_coflows) return;
  e.p.bytes += bytes;
  replan_ = true;
}

void PolicyBook::progress(FlowId id, std::uint64_t bytes, std::uint64_t sent, std::uint64_t now_us) {
  if (id >= entries_.size() || !entries_[id].live) return;
  Entry& e = entries_[id];
  if (!e.in_deadlines && !e.in_coflows) return;
  e.p.bytes = std::max(e.p.bytes, bytes);
  // Applied by the next advance(), which has the rates to bring the
  // estimate up to the report's time; what was handed over only grows, so
  // an older report never lowers a newer one.
  e.reported_sent = std::max(e.reported_sent, static_cast<double>(sent));
  e.reported_us = std::max(now_us, e.progress_us);
  replan_ = true;
}

void PolicyBook::grow(FlowId id, std::uint64_t bytes) {
  if (id >= entries_.size() || !entries_[id].live) return;
  Entry& e = entries_[id];
  if ((!e.in_deadlines && !e.in_coflows) || bytes <= e.p.bytes) return;
  e.p.bytes = bytes;
  replan_ = true;
}

DeadlineState PolicyBook::deadline_state(FlowId id) const {
  if (id >= entries_.size() || !entries_[id].live) return DeadlineState::kNone;
  return entries_[id].state;
}

template <typename E>
void PolicyBook::reweigh(E& engine, Tenant& t) {
  t.dirty = false;
  double sum = 0;
  for (FlowId id : t.members) sum += entries_[id].p.weight;
  for (FlowId id : t.members) {
    Entry& e = entries_[id];
    const double share = e.p.weight / sum;
    const double w = std::clamp(t.spec.weight * share, kMinWeight, kMaxWeight);
    double cap = e.p.max_bps;
    if (t.spec.cap_bps > 0) {
      const double c = std::max(t.spec.cap_bps * share, kMinRateBps);
      cap = cap > 0 ? std::min(cap, c) : c;
    }
    e.cap_bps = cap;
    const double g = t.spec.guarantee_bps * share;
    if (g != e.guarantee_bps) replan_ = true;
    e.guarantee_bps = g;
    const FlowError err = engine.set_limits(id, w, cap);
    FT_ASSERT(err == FlowError::kOk, to_string(err));
  }
}

// Floors from scratch: every guarantee first (operators' contracts), then
// deadlines by EDF. A flow's progress is estimated from the rate it had since
// the last plan (rates hold between plans: they change when flows come and go).
// The estimate runs ahead of the bytes (a new connection ramps, a rate takes a
// round trip to apply, a busy host sends late), so a running flow keeps the
// floor of its last plan while it fits: the constant rate that meets the
// deadline from that plan on. When earlier deadlines leave no room for it,
// the flow gets the estimate if that fits, else it is infeasible; an overdue
// flow loses it. Measured in the testbed (bench/e2e/run deadlines), floors
// re-planned down from the estimate left transfers at about 0.8 of their
// floor; a plan could drop a floor to 0 with half the bytes still to go.
template <typename E>
void PolicyBook::replan(E& engine, std::uint64_t now_us) {
  replan_ = false;
  ++counters_.replans;
  for (FlowId id : floored_) {
    if (id < entries_.size() && entries_[id].live && engine.has_flow(id)) engine.set_floor(id, 0);
  }
  floored_.clear();
  for (TenantId ti = 1; ti < tenants_.size(); ++ti) {
    for (FlowId id : tenants_[ti].members) {
      const Entry& e = entries_[id];
      if (e.guarantee_bps <= 0) continue;
      if (engine.set_floor(id, e.guarantee_bps)) {
        floored_.push_back(id);
      } else {
        ++counters_.guarantees_refused;
      }
    }
  }
  for (FlowId id : deadline_flows_) advance(engine, id, entries_[id], now_us);
  std::sort(deadline_flows_.begin(), deadline_flows_.end(), [&](FlowId a, FlowId b) {
    const auto da = entries_[a].p.deadline_at_us, db = entries_[b].p.deadline_at_us;
    return da != db ? da < db : a < b;
  });
  next_due_us_ = kNever;
  for (std::uint32_t i = 0; i < deadline_flows_.size(); ++i) {
    const FlowId id = deadline_flows_[i];
    Entry& e = entries_[id];
    e.deadline_pos = i;
    if (e.p.deadline_at_us <= now_us) {
      e.state = DeadlineState::kOverdue;
      continue;
    }
    next_due_us_ = std::min(next_due_us_, e.p.deadline_at_us);
    const double left_s = static_cast<double>(e.p.deadline_at_us - now_us) * 1e-6;
    const double remaining = std::max(static_cast<double>(e.p.bytes) - e.sent_bytes, 0.0);
    const double estimated = remaining * 8 / left_s * (1 + margin_);
    // The floor held from the last plan if it fits, else the estimate.
    double need = std::max(estimated, e.planned_bps);
    bool reserved = need > 0 && engine.set_floor(id, e.guarantee_bps + need);
    if (!reserved && estimated > 0 && estimated < need) {
      need = estimated;
      reserved = engine.set_floor(id, e.guarantee_bps + need);
    }
    if (reserved) {
      e.state = DeadlineState::kReserved;
      e.planned_bps = need;
      floored_.push_back(id);
    } else if (need > 0) {
      e.state = DeadlineState::kInfeasible;
      e.planned_bps = 0;  // earlier deadlines (or guarantees) left it no room
      if (!e.counted_infeasible) ++counters_.deadlines_infeasible;
      e.counted_infeasible = true;
    } else {
      e.state = DeadlineState::kReserved;  // all sent: the end is on its way
    }
  }
  if (coflow_.policy != CoflowPolicy::kNone && !coflow_flows_.empty()) plan_coflows(engine, now_us);
}

template <typename E>
void PolicyBook::advance(const E& engine, FlowId id, Entry& e,
                         std::uint64_t now_us) {
  const double bytes_per_us = engine.rate_bps(id) / 8 * 1e-6;
  if (e.reported_sent >= 0) {
    // An estimate past what the endpoint had handed over cannot have been
    // sent: the report replaces it, and the estimate goes on from there.
    e.sent_bytes += bytes_per_us * static_cast<double>(e.reported_us - e.progress_us);
    e.sent_bytes = std::min(e.sent_bytes, e.reported_sent);
    e.progress_us = e.reported_us;
    e.reported_sent = -1;
  }
  if (now_us <= e.progress_us) return;
  e.sent_bytes += bytes_per_us * static_cast<double>(now_us - e.progress_us);
  e.progress_us = now_us;
}

// Coflow order on what guarantees and deadlines left: a flow's floor becomes
// the larger of its ordered rate and the floor it has (a deadline's or a
// guarantee's), and the engine shares what floors leave (at least 1 - share
// of every link). Floors are reservations: a flow that sends less than its
// floor leaves the difference idle until the next plan. Flows without a
// coflow id are coflows of their own (their key has the top bit set; wire
// ids use the other 63). A flow without a size, or one the estimate says
// has sent it all (the estimate runs ahead of a flow that sends less than
// its rate), is not ordered: it shares the rest.
template <typename E>
void PolicyBook::plan_coflows(E& engine, std::uint64_t now_us) {
  constexpr std::uint64_t kOwn = std::uint64_t{1} << 63;
  constexpr double kUnknown = std::numeric_limits<double>::infinity();
  ++counters_.coflow_plans;
  planned_.clear();
  for (FlowId id : coflow_flows_) {
    Entry& e = entries_[id];
    advance(engine, id, e, now_us);
    const double left = double(e.p.bytes) - e.sent_bytes;
    planned_.push_back({e.p.coflow != 0 ? e.p.coflow & ~kOwn : kOwn | id,
                        e.p.bytes != 0 && left > 0 ? left : kUnknown, e.p.path,
                        e.cap_bps > 0 ? e.cap_bps : kUnknown,
                        1e-6 * static_cast<double>(now_us - std::min(now_us, e.started_us))});
  }
  const double share = std::min(coflow_.ordered_share, engine.config().max_reserved_share);
  avail_.resize(engine.num_links());
  for (LinkId l = 0; l < avail_.size(); ++l) {
    avail_[l] = std::max(0.0, share * engine.capacity_bps(l) - engine.reserved_bps(l));
  }
  planner_.plan({coflow_.policy, 1.0, coflow_.aging_s}, avail_, planned_, ordered_);
  counters_.coflows_ordered = planner_.order().size();
  for (std::size_t i = 0; i < planned_.size(); ++i) {
    const FlowId id = coflow_flows_[i];
    const double base = engine.floor_bps(id);
    if (ordered_[i] <= base) continue;
    // Rounding may put a full link a hair over the reserve: take a hair less.
    if (engine.set_floor(id, ordered_[i]) ||
        engine.set_floor(id, base + (ordered_[i] - base) * (1 - 1e-6))) {
      floored_.push_back(id);
    }
  }
}

template <typename E>
void PolicyBook::apply(E& engine, std::uint64_t now_us) {
  for (TenantId t : dirty_tenants_) reweigh(engine, tenants_[t]);
  dirty_tenants_.clear();
  // A deadline passing also re-plans: an overdue flow must not keep its floor.
  if (replan_ || now_us >= next_due_us_) replan(engine, now_us);
}

template void PolicyBook::apply(BasicEngine<float>&, std::uint64_t);
template void PolicyBook::apply(BasicEngine<double>&, std::uint64_t);
template void PolicyBook::apply(JournaledEngine<float>&, std::uint64_t);
template void PolicyBook::apply(JournaledEngine<double>&, std::uint64_t);

}  // namespace flowtune::alloc
