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

template <typename Real>
const Kernels<Real> kTable = {&rate_pass_log<Real>, &accumulate<Real>, &fnorm<Real>,
                              FT_KERNEL_NAME};

}  // namespace
}  // namespace flowtune::alloc::detail::FT_KERNEL_NS
