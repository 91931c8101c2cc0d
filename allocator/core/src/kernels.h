// The engine's per-flow hot loops as free functions over plain arrays, so they
// can be compiled twice: once for the x86-64 baseline and once with AVX-512
// (chosen at run time by cpu feature), without -march flags on the rest of
// the build. See engine.cc for what each loop computes and why it is laid out
// this way.
#pragma once

#include <cstddef>
#include <cstdint>

namespace flowtune::alloc::detail {

// Accumulators of one link in a block: Σ x and Σ -dx/dP, side by side so a
// flow's contribution to a link touches one cache line with one load/store pair.
template <typename Real>
struct LinkAcc {
  Real y;
  Real h;
};

// Local link index within a block: 16 bits halve the bytes a flow's path costs
// per pass, which decides the iteration time once flows outgrow L2.
using LocalLink = std::uint16_t;
inline constexpr std::size_t kMaxLocalLinks = 65535;

template <typename Real>
struct FlowArrays {
  std::size_t n;
  const LocalLink* path[4];
  const Real* weight;
  const Real* floor_price;
  const Real* cap;
  Real* x;
  Real* xn;
};

// The Clos engine's flows (clos_engine.h): a flow is a source half (its
// run: source host and spine, sorted so a run's flows are contiguous) and a
// destination half (spine and destination host, dst), each one table entry.
template <typename Real>
struct ClosArrays {
  std::size_t n;
  const std::uint32_t* run;
  const std::uint32_t* dst;
  const Real* weight;
  const Real* floor_price;
  const Real* cap;
  Real* x;
  Real* xn;
};

template <typename Real>
struct Kernels {
  // Log utility: x_s = w_s / max(Σ p, floor_s), d_s = x_s / P, and
  // acc[l] += (x_s, d_s) for every link l on each path.
  void (*rate_pass_log)(const FlowArrays<Real>& f, const Real* price, LinkAcc<Real>* acc);
  // acc[l] += (x_s, d_s) given d (for utilities computed outside the kernels).
  void (*accumulate)(const FlowArrays<Real>& f, const Real* d, LinkAcc<Real>* acc);
  // xn_s = min(x_s / max_{l∈L(s)} ratio_l, cap_s) (F-NORM, eq. 6).
  void (*fnorm)(const FlowArrays<Real>& f, const Real* ratio);
  // Clos layout, log utility: P_s = run_price[run_s] + dst_price[dst_s]
  // floored, x_s = w_s / P_s, d_s = x_s / P_s; dst_acc[dst_s] += (x_s, d_s);
  // run_acc[r] = Σ over run r's flows (stored, not added: runs are
  // contiguous and run ids never decrease along the flows).
  void (*clos_rate_pass_log)(const ClosArrays<Real>& f, const Real* run_price,
                             const Real* dst_price, LinkAcc<Real>* run_acc, LinkAcc<Real>* dst_acc);
  // xn_s = min(x_s / max(run_ratio[run_s], dst_ratio[dst_s]), cap_s).
  void (*clos_fnorm)(const ClosArrays<Real>& f, const Real* run_ratio, const Real* dst_ratio);
  // clos_fnorm by the ratios given, then clos_rate_pass_log, in one pass
  // over the flows (each flow's old x_s is normalized before it is replaced).
  void (*clos_fnorm_rate_pass_log)(const ClosArrays<Real>& f, const Real* run_ratio,
                                   const Real* dst_ratio, const Real* run_price,
                                   const Real* dst_price, LinkAcc<Real>* run_acc,
                                   LinkAcc<Real>* dst_acc);
  const char* name;
};

// The best kernels this CPU runs.
template <typename Real>
const Kernels<Real>& kernels();

// Both variants, for tests and benchmarks (avx512 is null where unsupported).
template <typename Real>
const Kernels<Real>& generic_kernels();
template <typename Real>
const Kernels<Real>* avx512_kernels();

}  // namespace flowtune::alloc::detail
