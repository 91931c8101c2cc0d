// libFuzzer differential target: arbitrary bytes pick a network (a two-tier
// Clos at full bisection, an oversubscribed one, or a big switch) and NED or
// Gradient, then drive arrivals, departures, limit changes, sorts and
// iterations on the Clos engine (clos_engine.h; for half the inputs with
// F-NORM folded into the next rate pass) and on the general engine
// (engine.h, one block), the reference. Checked after every batch of
// iterations (each batch starting from the reference's prices):
//   - both give the same ids, and rates, raw rates and prices equal to 1e-6
//     relative (the link sums are taken in another order);
//   - every rate is finite, non-negative and within the flow's cap;
//   - F-NORM keeps every link within capacity.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "flowtune/alloc/clos_engine.h"
#include "flowtune/alloc/engine.h"
#include "fuzz_bytes.h"

namespace {

using namespace flowtune::alloc;

using Bytes = flowtune::testing::FuzzBytes;

void check(bool ok, const char* what) { flowtune::testing::fuzz_check(ok, "clos_diff_fuzz", what); }

const Topology& topology(std::uint8_t pick) {
  static const Topology full = [] {
    TwoTierSpec s;
    s.racks = 4;
    s.hosts_per_rack = 4;
    s.spines = 2;
    s.host_link_bps = 10e9;
    return Topology::two_tier(s);
  }();
  static const Topology thin = [] {
    TwoTierSpec s;
    s.racks = 3;
    s.hosts_per_rack = 5;
    s.spines = 3;
    s.host_link_bps = 10e9;
    s.spine_link_bps = 4e9;
    return Topology::two_tier(s);
  }();
  static const Topology big = Topology::big_switch(9, 25e9);
  return pick == 0 ? full : pick == 1 ? thin : big;
}

bool close(double a, double b, double floor) {
  return std::fabs(a - b) <= 1e-6 * std::max(std::fabs(a), std::fabs(b)) + floor;
}

void check_close(double clos, double ref, double floor, const char* what, std::uint64_t item) {
  if (close(clos, ref, floor)) return;
  std::fprintf(stderr, "clos_diff_fuzz: %s differ at %llu: Clos %.17g, general %.17g\n", what,
               static_cast<unsigned long long>(item), clos, ref);
  std::abort();
}

void compare(const Topology& t, const Engine& ref, const ClosEngine& clos,
             const std::vector<FlowId>& ids, const std::vector<double>& caps) {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const double r = clos.rate_bps(ids[i]);
    check(std::isfinite(r) && r >= 0, "rate not finite");
    check_close(r, ref.rate_bps(ids[i]), 1e-3, "rates", ids[i]);
    check_close(clos.raw_rate_bps(ids[i]), ref.raw_rate_bps(ids[i]), 1e-3, "raw rates", ids[i]);
    if (caps[i] > 0) check(r <= caps[i] * (1 + 1e-9), "rate above the flow's cap");
  }
  const std::vector<double> alloc = ref.link_allocation_bps();
  for (LinkId l = 0; l < t.num_links(); ++l) {
    check(std::isfinite(clos.price(l)) && clos.price(l) >= 0, "price not finite");
    check_close(clos.price(l), ref.price(l), 1e-9, "prices", l);
    check(alloc[l] <= t.capacity_bps(l) * (1 + 1e-9), "F-NORM left a link over capacity");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Bytes in(data, size);
  const Topology& t = topology(in.u8() % 3);
  EngineConfig cfg;
  cfg.algorithm = in.u8() % 4 == 0 ? Algorithm::kGradient : Algorithm::kNed;
  const std::uint8_t kernels = in.u8();
  cfg.portable_kernels = kernels % 2 == 0;
  Engine ref(t.capacities_bps(), t.num_sites(), cfg);
  ClosEngine clos(t, cfg);
  // Half the inputs fold F-NORM into the next rate pass (from a bit of the
  // same byte, so the corpus keeps its meaning): rates read the same.
  clos.set_fold_fnorm((kernels >> 1) % 2 == 1);
  std::vector<FlowId> ids;
  std::vector<double> caps;
  for (int op = 0; op < 256 && !in.empty(); ++op) {
    const std::uint8_t kind = in.u8() % 6;
    if (kind <= 1 && ids.size() < 512) {  // arrival
      const HostId src = in.u8() % t.num_hosts();
      const HostId dst = in.u8() % t.num_hosts();
      if (src == dst) continue;
      FlowSpec f = make_flow(t, src, dst, in.u16(), 0.25 + (in.u8() % 16) * 0.5);
      f.max_bps = in.u8() % 4 == 0 ? 1e8 * (1 + in.u8() % 64) : 0;
      check(clos.check_flow(f) == FlowError::kOk, "a routed path refused");
      const FlowId a = ref.add_flow(f);
      check(clos.add_flow(f) == a, "flow ids differ");
      ids.push_back(a);
      caps.push_back(f.max_bps);
    } else if (kind == 2 && !ids.empty()) {  // departure
      const std::size_t i = in.u16() % ids.size();
      ref.remove_flow(ids[i]);
      clos.remove_flow(ids[i]);
      check(!clos.has_flow(ids[i]), "a removed flow is still there");
      ids[i] = ids.back();
      ids.pop_back();
      caps[i] = caps.back();
      caps.pop_back();
    } else if (kind == 3 && !ids.empty()) {  // new limits
      const std::size_t i = in.u16() % ids.size();
      const double w = 0.25 + (in.u8() % 16) * 0.5;
      const double cap = in.u8() % 2 == 0 ? 1e8 * (1 + in.u8() % 64) : 0;
      check(ref.set_limits(ids[i], w, cap) == FlowError::kOk, "reference refused limits");
      check(clos.set_limits(ids[i], w, cap) == FlowError::kOk, "Clos engine refused limits");
      caps[i] = cap;
    } else if (kind == 4) {
      clos.sort_flows();
    } else {  // a few iterations
      const int n = 1 + in.u8() % 8;
      for (int k = 0; k < n; ++k) {
        ref.iterate();
        clos.iterate();
      }
      compare(t, ref, clos, ids, caps);
      // The Clos engine starts the next batch from the reference's prices:
      // where Gradient's step is unstable (docs/engine.md) an iteration
      // multiplies a difference, and two orders of summation part ways
      // after a few hundred iterations (found at depth, corpus/
      // clos_diff_fuzz/gradient-*): the property is the same answer from
      // the same prices, up to a batch's rounding.
      for (LinkId l = 0; l < t.num_links(); ++l) clos.set_price(l, ref.price(l));
    }
  }
  check(clos.num_flows() == ids.size(), "flow counts differ");
  return 0;
}
