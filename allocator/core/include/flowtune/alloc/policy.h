// Tenants and deadlines on top of the engine (docs/policy.md). Pure: no
// clock (callers pass the time), no I/O. The engine stays a weighted NUM with
// floors; this book decides the weights, caps and floors:
//
// - Tenants: a tenant's flows share the tenant's weight W by their own
//   weights, w_f' = W·w_f / Σ_{g∈t} w_g, so opening more connections never
//   raises a tenant's total weight. A cap C becomes per-flow caps C·w_f/Σw,
//   a guarantee G per-flow floors G·w_f/Σw. Flows naming no tenant keep
//   their own weight (each is its own tenant).
// - Deadlines (D3's rule with EDF admission): a flow with a deadline gets a
//   floor of its remaining bytes over its time left (times 1 + margin) on top
//   of any guarantee; floors are admitted in order of deadline, earliest
//   first, and one the links cannot hold (engine::set_floor refuses) is
//   infeasible: reported and left its fair share, never taking from others'
//   floors.
//
// - Coflows (set_coflow, docs/coflows.md): with a coflow policy, every flow
//   is planned by CoflowPlanner after guarantees and deadlines, in coflow
//   order, and its ordered rate is added to its floor; the engine shares
//   what floors leave (at least 1 - share of every link) among all flows.
//   Remaining bytes are estimated from rates, as for deadlines.
//
// Weights and caps are rewritten only for tenants whose membership or spec
// changed, and floors re-planned only when a tenant or deadline flow comes or
// goes, once per apply(): flows without policy cost nothing, and rates still
// change only when flowlets come and go.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "flowtune/alloc/coflow.h"
#include "flowtune/alloc/engine.h"
#include "flowtune/alloc/engine_journal.h"

namespace flowtune::alloc {

struct TenantSpec {
  double weight = 1;         // the tenant's share of weight, in [kMinWeight, kMaxWeight]
  double guarantee_bps = 0;  // its flows' floors together; 0 = none
  double cap_bps = 0;        // its flows' caps together; 0 = none
};

// "" when the spec is valid, else why not.
std::string check(const TenantSpec& t);

using TenantId = std::uint32_t;
inline constexpr TenantId kNoTenant = 0;

struct FlowPolicy {
  TenantId tenant = kNoTenant;
  double weight = 1;               // the flow's own weight
  double max_bps = 0;              // its own cap; 0 = none
  std::uint64_t deadline_at_us = 0;  // 0 = none
  std::uint64_t bytes = 0;         // declared size (a deadline needs one)
  std::uint64_t coflow = 0;        // 0 = none (a coflow of its own)
  Path path;                       // as given to the engine (coflow planning)
};

enum class DeadlineState : std::uint8_t {
  kNone,        // no deadline, or no size to plan for
  kReserved,    // its floor is remaining ÷ time left (with margin)
  kInfeasible,  // the links could not hold it: fair share only
  kOverdue,     // the deadline has passed: fair share only
};
const char* to_string(DeadlineState s);

struct PolicyCounters {
  std::uint64_t replans = 0;
  std::uint64_t deadlines_infeasible = 0;  // flows found infeasible (once each)
  std::uint64_t guarantees_refused = 0;    // guarantee floors the links could not hold
  std::uint64_t coflow_plans = 0;          // plans with a coflow policy
  std::uint64_t coflows_ordered = 0;       // coflows given an ordered rate, last plan
};

class PolicyBook {
 public:
  // margin: deadline floors are (remaining ÷ time left) × (1 + margin), for
  // pacing below the rate and progress estimated from rates, not reported.
  explicit PolicyBook(double deadline_margin = 0.05);

  // Coflow planning for every flow added from now on (kNone: off, the
  // default). share: the most of a link coflow order may hand out, within
  // the engine's max_reserved_share, guarantees and deadlines first.
  // aging_s: CoflowConfig::aging_s (0: off), a coflow waiting from its
  // oldest live flow's start. Call before adding flows; "" when accepted,
  // else why not.
  std::string_view set_coflow(CoflowPolicy policy, double share, double aging_s = 0);
  CoflowPolicy coflow_policy() const { return coflow_.policy; }

  // A tenant by name, created with default_spec() on first use; "" is none.
  TenantId tenant(std::string_view name);
  // The tenant by name if it exists, else kNoTenant.
  TenantId find(std::string_view name) const;
  std::string_view name(TenantId t) const;
  const TenantSpec& spec(TenantId t) const;
  // Requires check(spec) == "". Marks the tenant's flows for re-weighting.
  void set_spec(TenantId t, const TenantSpec& spec);
  // Back to default_spec() (an operator's tenant dropped from the policy).
  void reset_spec(TenantId t);
  // The spec of tenants no set_spec named (an endpoint's own tenant names).
  void set_default_spec(const TenantSpec& spec);
  const TenantSpec& default_spec() const { return default_spec_; }
  std::size_t num_tenants() const { return tenants_.size() - 1; }

  // A flow the engine holds as `id`, added with its own weight and cap
  // (FlowSpec); a flow with no tenant and no deadline is not recorded.
  void add(FlowId id, const FlowPolicy& p, std::uint64_t now_us);
  void remove(FlowId id);
  // Spare room back after a burst: the table by FlowId ends at the highest
  // flow recorded (ids do not change).
  void compact();
  // A flowlet extended by another start (coalescing) has more bytes.
  void add_bytes(FlowId id, std::uint64_t bytes);
  // Its endpoint's report: the flowlet's size is now `bytes` (it never
  // shrinks), and `sent` of it were handed to the kernel by now_us, which
  // replaces the estimate from rates where that is higher (a flowlet that
  // sends less than its rate). Re-plans coflows and deadlines.
  void progress(FlowId id, std::uint64_t bytes, std::uint64_t sent, std::uint64_t now_us);
  // The flowlet's size is now `bytes` if that is larger (a resync's start),
  // with nothing said of its progress.
  void grow(FlowId id, std::uint64_t bytes);

  // Whether apply() at now_us has work to do.
  bool dirty(std::uint64_t now_us) const {
    return !dirty_tenants_.empty() || replan_ || now_us >= next_due_us_;
  }
  // Rewrites weights and caps of changed tenants, and re-plans floors if a
  // flow with a guarantee or deadline came or went or a planned deadline has
  // passed. Call between iterations. E: a BasicEngine or a JournaledEngine
  // (whose changes are then journaled).
  template <typename E>
  void apply(E& engine, std::uint64_t now_us);

  DeadlineState deadline_state(FlowId id) const;
  // When apply() must next run although nothing came or went: the earliest
  // deadline planned for (it may pass). ~0 when none.
  std::uint64_t next_due_us() const { return next_due_us_; }
  const PolicyCounters& counters() const { return counters_; }

 private:
  struct Tenant {
    std::string name;
    TenantSpec spec;
    bool named = false;  // set by set_spec
    bool dirty = false;
    std::vector<FlowId> members;
  };
  struct Entry {
    bool live = false;
    FlowPolicy p;
    std::uint32_t member_pos = 0;    // in its tenant's members
    bool in_deadlines = false;
    std::uint32_t deadline_pos = 0;  // in deadline_flows_
    double guarantee_bps = 0;        // its share of its tenant's guarantee
    double sent_bytes = 0;           // estimated from its rates
    double planned_bps = 0;          // its deadline floor at the last plan
    std::uint64_t progress_us = 0;   // when sent_bytes was last advanced
    std::uint64_t started_us = 0;    // when it was added (its coflow's age)
    double reported_sent = -1;       // the endpoint's last report, not applied yet; < 0: none
    std::uint64_t reported_us = 0;   // when it came
    DeadlineState state = DeadlineState::kNone;
    bool counted_infeasible = false;
    double cap_bps = 0;              // its cap as the engine holds it; 0 = none
    bool in_coflows = false;
    std::uint32_t coflow_pos = 0;  // in coflow_flows_
  };
  // Advances e's estimated bytes sent to now_us at its current rate.
  template <typename E>
  void advance(const E& engine, FlowId id, Entry& e, std::uint64_t now_us);
  template <typename E>
  void plan_coflows(E& engine, std::uint64_t now_us);
  void mark(TenantId t);
  template <typename E>
  void reweigh(E& engine, Tenant& t);
  template <typename E>
  void replan(E& engine, std::uint64_t now_us);

  double margin_;
  TenantSpec default_spec_;
  std::vector<Tenant> tenants_;  // [0] = no tenant
  std::unordered_map<std::string, TenantId> by_name_;
  std::vector<Entry> entries_;  // by engine FlowId
  std::vector<FlowId> deadline_flows_;
  std::vector<FlowId> floored_;  // flows given a floor at the last plan
  CoflowConfig coflow_{CoflowPolicy::kNone, 0.9};
  std::vector<FlowId> coflow_flows_;
  CoflowPlanner planner_;
  std::vector<CoflowFlow> planned_;
  std::vector<double> avail_, ordered_;
  std::vector<TenantId> dirty_tenants_;
  bool replan_ = false;
  static constexpr std::uint64_t kNever = ~std::uint64_t{0};
  std::uint64_t next_due_us_ = kNever;  // the earliest deadline planned for
  PolicyCounters counters_;
};

extern template void PolicyBook::apply(BasicEngine<float>&, std::uint64_t);
extern template void PolicyBook::apply(BasicEngine<double>&, std::uint64_t);
extern template void PolicyBook::apply(JournaledEngine<float>&, std::uint64_t);
extern template void PolicyBook::apply(JournaledEngine<double>&, std::uint64_t);

}  // namespace flowtune::alloc
