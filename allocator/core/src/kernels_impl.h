// Kernel bodies, included by kernels_generic.cc and kernels_avx512.cc with
// FT_KERNEL_NS set to the variant's namespace. Plain loops over restrict
// pointers: the compiler vectorizes the gathers in rates_log and fnorm;
// accumulate stays scalar because its scatters conflict (many flows share a
// link) and one load/add/store of a (y, h) pair per hop is cheaper than
// conflict detection.
#include <algorithm>

#include "kernels.h"

namespace flowtune::alloc::detail::FT_KERNEL_NS {

// Flows are processed in chunks so the slopes d_s between the vectorized rate
// loop and the scalar scatter loop live in an L1-resident stack buffer.
inline constexpr std::size_t kChunk = 512;

template <typename Real>
inline void rates_chunk(const FlowArrays<Real>& f, std::size_t begin, std::size_t end,
                        const Real* __restrict price, Real* __restrict d) {
  const LocalLink* __restrict p0 = f.path[0];
  const LocalLink* __restrict p1 = f.path[1];
  const LocalLink* __restrict p2 = f.path[2];
  const LocalLink* __restrict p3 = f.path[3];
  const Real* __restrict w = f.weight;
  const Real* __restrict fl = f.floor_price;
  Real* __restrict x = f.x;
  for (std::size_t s = begin; s < end; ++s) {
    Real P = (price[p0[s]] + price[p1[s]]) + (price[p2[s]] + price[p3[s]]);
    P = std::max(P, fl[s]);
    Real inv = Real{1} / P;
    Real xs = w[s] * inv;
    x[s] = xs;
    d[s - begin] = xs * inv;
  }
}

template <typename Real>
inline void accumulate_range(const FlowArrays<Real>& f, std::size_t begin, std::size_t end,
                             const Real* __restrict d, LinkAcc<Real>* __restrict acc) {
  const LocalLink* __restrict p0 = f.path[0];
  const LocalLink* __restrict p1 = f.path[1];
  const LocalLink* __restrict p2 = f.path[2];
  const LocalLink* __restrict p3 = f.path[3];
  const Real* __restrict x = f.x;
  for (std::size_t s = begin; s < end; ++s) {
    const Real xs = x[s];
    const Real ds = d[s - begin];
    acc[p0[s]].y += xs;
    acc[p0[s]].h += ds;
    acc[p1[s]].y += xs;
    acc[p1[s]].h += ds;
    acc[p2[s]].y += xs;
    acc[p2[s]].h += ds;
    acc[p3[s]].y += xs;
    acc[p3[s]].h += ds;
  }
}

template <typename Real>
void rate_pass_log(const FlowArrays<Real>& f, const Real* __restrict price,
                   LinkAcc<Real>* __restrict acc) {
  alignas(64) Real d[kChunk];
  for (std::size_t begin = 0; begin < f.n; begin += kChunk) {
    std::size_t end = std::min(f.n, begin + kChunk);
    rates_chunk(f, begin, end, price, d);
    accumulate_range(f, begin, end, d, acc);
  }
}

template <typename Real>
void accumulate(const FlowArrays<Real>& f, const Real* __restrict d,
                LinkAcc<Real>* __restrict acc) {
  accumulate_range(f, 0, f.n, d, acc);
}

template <typename Real>
void fnorm(const FlowArrays<Real>& f, const Real* __restrict ratio) {
  const LocalLink* __restrict p0 = f.path[0];
  const LocalLink* __restrict p1 = f.path[1];
  const LocalLink* __restrict p2 = f.path[2];
  const LocalLink* __restrict p3 = f.path[3];
  const Real* __restrict x = f.x;
  const Real* __restrict cap = f.cap;
  Real* __restrict xn = f.xn;
  for (std::size_t s = 0; s < f.n; ++s) {
    Real m = std::max(std::max(ratio[p0[s]], ratio[p1[s]]), std::max(ratio[p2[s]], ratio[p3[s]]));
    // m >= x_s / c_l > 0 whenever x_s > 0; the guard only matters for x_s == 0.
    Real scaled = m > Real{0} ? x[s] / m : x[s];
    xn[s] = std::min(scaled, cap[s]);
  }
}

template <typename Real>
const Kernels<Real> kTable = {&rate_pass_log<Real>, &accumulate<Real>, &fnorm<Real>,
                              FT_KERNEL_NAME};

}  // namespace flowtune::alloc::detail::FT_KERNEL_NS
