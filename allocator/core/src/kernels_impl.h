// Kernel bodies, included by kernels_generic.cc and kernels_avx512.cc with
// FT_KERNEL_NS set to the variant's namespace. Plain loops over restrict
// pointers: the compiler vectorizes the gathers in rates_log and fnorm;
// accumulate stays scalar because its scatters conflict (many flows share a
// link) and one load/add/store of a (y, h) pair per hop is cheaper than
// conflict detection.
//
// One definition rule: this header is compiled twice, with and without
// -mavx512f, and the two copies must never be merged by the linker. Any
// inline function or template instantiation with external linkage is a weak
// symbol; if both objects emitted one under the same name (std::max<float>
// called from both, say, in a build that does not inline it), the linker
// would keep either copy, and the baseline engine could run AVX-512 code on a
// CPU without it. So everything below is in an anonymous namespace inside the
// ISA-named one (internal linkage: no symbol the other object can match),
// and the kernels call no inline library templates: max_of/min_of replace
// std::max/std::min, and <algorithm> is not included. The SSE2 intrinsics
// are always_inline and emit no symbol. The test kernel_symbols_test checks
// with nm that the AVX-512 object defines no weak symbol at all and shares
// none with the baseline one.
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kernels.h"

namespace flowtune::alloc::detail::FT_KERNEL_NS {
namespace {

template <typename Real>
inline Real max_of(Real a, Real b) {
  return a < b ? b : a;  // std::max's semantics: a when they compare equal
}
template <typename Real>
inline Real min_of(Real a, Real b) {
  return b < a ? b : a;  // std::min's semantics
}

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
    P = max_of(P, fl[s]);
    Real inv = Real{1} / P;
    Real xs = w[s] * inv;
    x[s] = xs;
    d[s - begin] = xs * inv;
  }
}

// acc[l] += (x, d) as one load/add/store of the pair: half the memory
// operations of two scalar updates, and one store-to-load chain per link.
inline void add_pair(LinkAcc<float>* a, float x, float d) {
#if defined(__SSE2__)
  static_assert(sizeof(LinkAcc<float>) == 8);
  // __m128i loads and stores may alias any type.
  auto* p = reinterpret_cast<__m128i*>(a);
  __m128 v = _mm_unpacklo_ps(_mm_set_ss(x), _mm_set_ss(d));
  __m128 o = _mm_castsi128_ps(_mm_loadl_epi64(p));
  _mm_storel_epi64(p, _mm_castps_si128(_mm_add_ps(o, v)));
#else
  a->y += x;
  a->h += d;
#endif
}

inline void add_pair(LinkAcc<double>* a, double x, double d) {
#if defined(__SSE2__)
  static_assert(sizeof(LinkAcc<double>) == 16);
  double* p = &a->y;  // y and h are adjacent doubles
  _mm_storeu_pd(p, _mm_add_pd(_mm_loadu_pd(p), _mm_set_pd(d, x)));
#else
  a->y += x;
  a->h += d;
#endif
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
    add_pair(acc + p0[s], xs, ds);
    add_pair(acc + p1[s], xs, ds);
    add_pair(acc + p2[s], xs, ds);
    add_pair(acc + p3[s], xs, ds);
  }
}

template <typename Real>
void rate_pass_log(const FlowArrays<Real>& f, const Real* __restrict price,
                   LinkAcc<Real>* __restrict acc) {
  alignas(64) Real d[kChunk];
  for (std::size_t begin = 0; begin < f.n; begin += kChunk) {
    const std::size_t end = min_of(f.n, begin + kChunk);
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
    Real m = max_of(max_of(ratio[p0[s]], ratio[p1[s]]), max_of(ratio[p2[s]], ratio[p3[s]]));
    // m >= x_s / c_l > 0 whenever x_s > 0; the guard only matters for x_s == 0.
    Real scaled = m > Real{0} ? x[s] / m : x[s];
    xn[s] = min_of(scaled, cap[s]);
  }
}

// ---- The Clos layout (clos_engine.cc). ----

// kFold: first F-NORM the previous iteration's x_s by the ratios its link
// step left (what clos_fnorm would have done), in the same pass.
template <typename Real, bool kFold>
inline void clos_rates_chunk(const ClosArrays<Real>& f, std::size_t begin, std::size_t end,
                             const Real* __restrict run_price, const Real* __restrict dst_price,
                             const Real* __restrict run_ratio, const Real* __restrict dst_ratio,
                             Real* __restrict d) {
  const std::uint32_t* __restrict run = f.run;
  const std::uint32_t* __restrict dst = f.dst;
  const Real* __restrict w = f.weight;
  const Real* __restrict fl = f.floor_price;
  Real* __restrict x = f.x;
  const Real* __restrict cap = f.cap;
  Real* __restrict xn = f.xn;
  for (std::size_t s = begin; s < end; ++s) {
    if constexpr (kFold) {
      const Real m = max_of(run_ratio[run[s]], dst_ratio[dst[s]]);
      const Real scaled = m > Real{0} ? x[s] / m : x[s];
      xn[s] = min_of(scaled, cap[s]);
    }
    Real P = run_price[run[s]] + dst_price[dst[s]];
    P = max_of(P, fl[s]);
    Real inv = Real{1} / P;
    Real xs = w[s] * inv;
    x[s] = xs;
    d[s - begin] = xs * inv;
  }
}

// A run's sum is carried in a register and stored after every flow, so the
// last store of a run leaves its total and no run entry is ever loaded (no
// store-to-load chain, no zeroing); the carry is dropped where the run id
// changes, by a mask rather than a branch (runs are a few flows long, so a
// branch would mispredict once a run).
struct RunCarry {
#if defined(__SSE2__)
  __m128d sum = _mm_setzero_pd();
#else
  double y = 0, h = 0;
#endif
  std::uint32_t run = ~0u;
};

inline void carry(RunCarry& c, LinkAcc<double>* __restrict run_acc, std::uint32_t r, double x,
                  double d) {
#if defined(__SSE2__)
  const __m128d keep = _mm_castsi128_pd(_mm_set1_epi64x(-static_cast<long long>(r == c.run)));
  c.sum = _mm_add_pd(_mm_and_pd(c.sum, keep), _mm_set_pd(d, x));
  _mm_storeu_pd(&run_acc[r].y, c.sum);
#else
  const double keep = r == c.run ? 1.0 : 0.0;
  c.y = c.y * keep + x;
  c.h = c.h * keep + d;
  run_acc[r] = {c.y, c.h};
#endif
  c.run = r;
}

inline void carry(RunCarry& c, LinkAcc<float>* __restrict run_acc, std::uint32_t r, float x,
                  float d) {
  // Sums in float, as the engine's accumulators in float are.
#if defined(__SSE2__)
  const __m128 keep = _mm_castsi128_ps(_mm_set1_epi32(-static_cast<int>(r == c.run)));
  __m128 prev = _mm_castpd_ps(c.sum);
  __m128 sum = _mm_add_ps(_mm_and_ps(prev, keep), _mm_unpacklo_ps(_mm_set_ss(x), _mm_set_ss(d)));
  c.sum = _mm_castps_pd(sum);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(run_acc + r), _mm_castps_si128(sum));
#else
  const float keep = r == c.run ? 1.0f : 0.0f;
  c.y = static_cast<float>(c.y) * keep + x;
  c.h = static_cast<float>(c.h) * keep + d;
  run_acc[r] = {static_cast<float>(c.y), static_cast<float>(c.h)};
#endif
  c.run = r;
}

template <typename Real, bool kFold>
void clos_pass(const ClosArrays<Real>& f, const Real* __restrict run_price,
               const Real* __restrict dst_price, const Real* __restrict run_ratio,
               const Real* __restrict dst_ratio, LinkAcc<Real>* __restrict run_acc,
               LinkAcc<Real>* __restrict dst_acc) {
  alignas(64) Real d[kChunk];
  RunCarry c;
  const std::uint32_t* __restrict run = f.run;
  const std::uint32_t* __restrict dst = f.dst;
  const Real* __restrict x = f.x;
  for (std::size_t begin = 0; begin < f.n; begin += kChunk) {
    const std::size_t end = min_of(f.n, begin + kChunk);
    clos_rates_chunk<Real, kFold>(f, begin, end, run_price, dst_price, run_ratio, dst_ratio, d);
    for (std::size_t s = begin; s < end; ++s) {
      const Real xs = x[s];
      const Real ds = d[s - begin];
      add_pair(dst_acc + dst[s], xs, ds);
      carry(c, run_acc, run[s], xs, ds);
    }
  }
}

template <typename Real>
void clos_rate_pass_log(const ClosArrays<Real>& f, const Real* __restrict run_price,
                        const Real* __restrict dst_price, LinkAcc<Real>* __restrict run_acc,
                        LinkAcc<Real>* __restrict dst_acc) {
  clos_pass<Real, false>(f, run_price, dst_price, nullptr, nullptr, run_acc, dst_acc);
}

template <typename Real>
void clos_fnorm_rate_pass_log(const ClosArrays<Real>& f, const Real* __restrict run_ratio,
                              const Real* __restrict dst_ratio, const Real* __restrict run_price,
                              const Real* __restrict dst_price, LinkAcc<Real>* __restrict run_acc,
                              LinkAcc<Real>* __restrict dst_acc) {
  clos_pass<Real, true>(f, run_price, dst_price, run_ratio, dst_ratio, run_acc, dst_acc);
}

template <typename Real>
void clos_fnorm(const ClosArrays<Real>& f, const Real* __restrict run_ratio,
                const Real* __restrict dst_ratio) {
  const std::uint32_t* __restrict run = f.run;
  const std::uint32_t* __restrict dst = f.dst;
  const Real* __restrict x = f.x;
  const Real* __restrict cap = f.cap;
  Real* __restrict xn = f.xn;
  for (std::size_t s = 0; s < f.n; ++s) {
    const Real m = max_of(run_ratio[run[s]], dst_ratio[dst[s]]);
    const Real scaled = m > Real{0} ? x[s] / m : x[s];
    xn[s] = min_of(scaled, cap[s]);
  }
}

template <typename Real>
const Kernels<Real> kTable = {&rate_pass_log<Real>, &accumulate<Real>, &fnorm<Real>,
                              &clos_rate_pass_log<Real>, &clos_fnorm<Real>,
                              &clos_fnorm_rate_pass_log<Real>, FT_KERNEL_NAME};

}  // namespace
}  // namespace flowtune::alloc::detail::FT_KERNEL_NS
