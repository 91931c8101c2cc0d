// libFuzzer differential target: arbitrary bytes drive a sequence of flow
// arrivals, departures and iterations on a small two-tier network, applied to
// two engines with the same block count, one iterated by BasicEngine (serial)
// and one by the multi-core ParallelDriver on a schedule the input picks (TBB,
// the persistent team on every iteration, the team that runs small engines
// alone on the team's layout, or alone on one block); in half the inputs
// the serial engine sweeps every link where the other visits only those in
// use (EngineConfig::sparse_links). Checked after every iteration:
//   - both engines give bit-identical rates and prices (same block order),
//     or, where the driver ran alone on one block, equal to 1e-6 relative
//     (the same sums in another order);
//   - every rate is finite and within the flow's cap and its path capacity;
//   - F-NORM keeps every link within capacity.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <limits>
#include <vector>

#include "flowtune/alloc/engine.h"
#include "flowtune/alloc/parallel.h"
#include "../core/fuzz_bytes.h"

namespace {

using namespace flowtune::alloc;

using Bytes = flowtune::testing::FuzzBytes;

void check(bool ok, const char* what) { flowtune::testing::fuzz_check(ok, "engine_diff_fuzz", what); }

const Topology& topology() {
  static const Topology t = [] {
    TwoTierSpec s;
    s.racks = 4;
    s.hosts_per_rack = 4;
    s.spines = 2;
    s.host_link_bps = 10e9;
    return Topology::two_tier(s);
  }();
  return t;
}

ParallelDriver& driver(std::uint8_t pick) {
  static ParallelDriver tbb(2, Schedule::kTbb);
  static ParallelDriver team(2, Schedule::kTeam);
  static ParallelDriver adaptive(2, Schedule::kPersistent, /*one_block_solo=*/false);
  static ParallelDriver one_block(2, Schedule::kPersistent);
  return pick == 0 ? tbb : pick == 1 ? team : pick == 2 ? adaptive : one_block;
}

// Alone on one block the sums run in another order; thousands of Gradient
// iterations carry that rounding further than NED's contraction does.
bool same(double a, double b, bool exact) {
  return exact ? a == b : std::fabs(a - b) <= 1e-6 * std::fabs(b) + 1e-12;
}

void compare(const Engine& serial, const Engine& parallel, const std::vector<FlowId>& ids,
             const std::vector<double>& caps, bool exact) {
  const Topology& t = topology();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    double r = serial.rate_bps(ids[i]);
    check(same(parallel.rate_bps(ids[i]), r, exact), "serial and parallel rates differ");
    check(same(parallel.raw_rate_bps(ids[i]), serial.raw_rate_bps(ids[i]), exact), "raw rates differ");
    check(std::isfinite(r) && r >= 0, "rate not finite");
    if (caps[i] > 0) check(r <= caps[i] * (1 + 1e-9), "rate above the flow's cap");
  }
  std::vector<double> alloc = serial.link_allocation_bps();
  for (LinkId l = 0; l < t.num_links(); ++l) {
    check(same(parallel.price(l), serial.price(l), exact), "serial and parallel prices differ");
    check(std::isfinite(serial.price(l)) && serial.price(l) >= 0, "price not finite");
    check(alloc[l] <= t.capacity_bps(l) * (1 + 1e-9), "F-NORM left a link over capacity");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Bytes in(data, size);
  const Topology& t = topology();
  EngineConfig cfg;
  const std::uint8_t first = in.u8();
  cfg.blocks = 1 + first % 3;
  cfg.algorithm = in.u8() % 4 == 0 ? Algorithm::kGradient : Algorithm::kNed;
  cfg.normalizer = Normalizer::kFNorm;
  const std::uint8_t schedule = in.u8() % 4;
  // The serial engine sweeps every link in half the inputs: visiting only
  // the links in use (and pruning blocks' dead copies) is the same update.
  EngineConfig serial_cfg = cfg;
  serial_cfg.sparse_links = (first / 3) % 2 == 0;
  Engine serial(t.capacities_bps(), t.num_sites(), serial_cfg);
  Engine parallel(t.capacities_bps(), t.num_sites(), cfg);
  std::vector<FlowId> ids;
  std::vector<double> caps;
  for (int op = 0; op < 256 && !in.empty(); ++op) {
    std::uint8_t kind = in.u8() % 4;
    if (kind <= 1 && ids.size() < 512) {  // arrival
      HostId src = in.u8() % t.num_hosts();
      HostId dst = in.u8() % t.num_hosts();
      if (src == dst) continue;
      FlowSpec f = make_flow(t, src, dst, in.u16(), 0.25 + (in.u8() % 16) * 0.5);
      f.max_bps = in.u8() % 4 == 0 ? 1e8 * (1 + in.u8() % 64) : 0;
      FlowId a = serial.add_flow(f);
      FlowId b = parallel.add_flow(f);
      check(a == b, "flow ids differ");
      // A newcomer's guess (what the daemon tells before iterating): the
      // same from both engines where their bits agree, finite, within its
      // cap and its path's smallest link.
      const double ea = serial.estimate_rate_bps(a), eb = parallel.estimate_rate_bps(b);
      check(std::isfinite(ea) && ea > 0, "estimate not finite and positive");
      if (schedule != 3) check(ea == eb, "estimates differ");
      double limit = f.max_bps > 0 ? f.max_bps : std::numeric_limits<double>::infinity();
      for (int j = 0; j < f.path.size; ++j) limit = std::min(limit, serial.capacity_bps(f.path.links[j]));
      check(ea <= limit * (1 + 1e-6), "estimate above the flow's cap or smallest link");
      ids.push_back(a);
      caps.push_back(f.max_bps);
    } else if (kind == 2 && !ids.empty()) {  // departure
      std::size_t i = in.u16() % ids.size();
      serial.remove_flow(ids[i]);
      parallel.remove_flow(ids[i]);
      ids[i] = ids.back();
      ids.pop_back();
      caps[i] = caps.back();
      caps.pop_back();
    } else {  // a few iterations
      int n = 1 + in.u8() % 8;
      for (int k = 0; k < n; ++k) {
        serial.iterate();
        driver(schedule).iterate(parallel);
      }
      compare(serial, parallel, ids, caps, schedule != 3);
      // Alone on one block the sums run in another order; where Gradient's
      // step is unstable an iteration multiplies that difference, so the
      // next batch starts from the serial engine's prices (the Clos
      // engine's fuzzer found such inputs at depth).
      if (schedule == 3) {
        for (LinkId l = 0; l < t.num_links(); ++l) parallel.set_price(l, serial.price(l));
      }
    }
  }
  return 0;
}
