// The per-flow memory operations that any layout of the Clos engine pays,
// timed alone (engine_bench BM_ClosFloor): compiled with AVX-512 where the
// compiler has it, as the engine's own kernels are (allocator/core), so the
// floor is measured with the same instructions. Each loop is one pass over
// n flows in float; dst is each flow's destination-half index in a table
// (what the Clos engine gathers and adds into), perm a permutation of the
// flows (what a pull in destination order gathers).
#include "floor_kernels.h"

#include <immintrin.h>

#include <algorithm>

namespace flowtune::bench::floor {

// Streams only: three arrays in, one out, one division.
float stream(std::size_t n, const float* __restrict w, const float* __restrict fl,
             float* __restrict x) {
  for (std::size_t s = 0; s < n; ++s) x[s] = w[s] / std::max(fl[s], 1.0f);
  return x[n / 2];
}

// One gather per flow (a price, or a ratio): the stream plus an index.
float gather(std::size_t n, const std::uint32_t* __restrict dst, const float* __restrict table,
             const float* __restrict w, const float* __restrict fl, float* __restrict x) {
  for (std::size_t s = 0; s < n; ++s) x[s] = w[s] / std::max(table[dst[s]], fl[s]);
  return x[n / 2];
}

// The arithmetic of a chunk of flows vectorizes; the adds into the table do
// not (two flows of a chunk may add into one entry), so they follow in a
// scalar loop over the chunk, as in the engine's kernels.
constexpr std::size_t kChunk = 512;

// One 8-byte load and store per add, as the engine's add_pair.
inline void add_pair(Pair* a, float x, float d) {
  auto* p = reinterpret_cast<__m128i*>(a);
  const __m128 v = _mm_unpacklo_ps(_mm_set_ss(x), _mm_set_ss(d));
  _mm_storel_epi64(p, _mm_castps_si128(_mm_add_ps(_mm_castsi128_ps(_mm_loadl_epi64(p)), v)));
}

void add_chunk(std::size_t begin, std::size_t end, const std::uint32_t* __restrict dst,
               const float* __restrict x, const float* __restrict d, Pair* __restrict acc) {
  for (std::size_t s = begin; s < end; ++s) add_pair(acc + dst[s], x[s], d[s - begin]);
}

// A gather and an 8-byte add into the same entry (the destination half's
// price and its (y, h) sums): the least a pushing layout does per flow.
float gather_add(std::size_t n, const std::uint32_t* __restrict dst, const float* __restrict table,
                 const float* __restrict w, const float* __restrict fl, float* __restrict x,
                 Pair* __restrict acc) {
  alignas(64) float d[kChunk];
  for (std::size_t begin = 0; begin < n; begin += kChunk) {
    const std::size_t end = std::min(n, begin + kChunk);
    for (std::size_t s = begin; s < end; ++s) {
      const float inv = 1.0f / std::max(table[dst[s]], fl[s]);
      x[s] = w[s] * inv;
      d[s - begin] = x[s] * inv;
    }
    add_chunk(begin, end, dst, x, d, acc);
  }
  return x[n / 2];
}

// gather_add with F-NORM folded in: the destination half's price and ratio
// kept as two tables gathered with one index, the previous x normalized by
// the ratio and capped, the new x computed and added: the least a pushing
// layout with a folded F-NORM does per flow on the destination side.
float fused(std::size_t n, const std::uint32_t* __restrict dst, const float* __restrict price,
            const float* __restrict ratio, const float* __restrict w, const float* __restrict fl,
            const float* __restrict cap, float* __restrict x, float* __restrict xn,
            Pair* __restrict acc) {
  alignas(64) float d[kChunk];
  for (std::size_t begin = 0; begin < n; begin += kChunk) {
    const std::size_t end = std::min(n, begin + kChunk);
    for (std::size_t s = begin; s < end; ++s) {
      const std::uint32_t i = dst[s];
      xn[s] = std::min(x[s] / ratio[i], cap[s]);
      const float inv = 1.0f / std::max(price[i], fl[s]);
      x[s] = w[s] * inv;
      d[s - begin] = x[s] * inv;
    }
    add_chunk(begin, end, dst, x, d, acc);
  }
  return xn[n / 2];
}

// The same two in one scalar loop each (divisions and all): no chunk
// buffer, which measured as fast or faster here; the floor is the faster.
float gather_add_scalar(std::size_t n, const std::uint32_t* __restrict dst,
                        const float* __restrict table, const float* __restrict w,
                        const float* __restrict fl, float* __restrict x, Pair* __restrict acc) {
  for (std::size_t s = 0; s < n; ++s) {
    const float inv = 1.0f / std::max(table[dst[s]], fl[s]);
    x[s] = w[s] * inv;
    add_pair(acc + dst[s], x[s], x[s] * inv);
  }
  return x[n / 2];
}

float fused_scalar(std::size_t n, const std::uint32_t* __restrict dst, const float* __restrict price,
                   const float* __restrict ratio, const float* __restrict w,
                   const float* __restrict fl, const float* __restrict cap, float* __restrict x,
                   float* __restrict xn, Pair* __restrict acc) {
  for (std::size_t s = 0; s < n; ++s) {
    const std::uint32_t i = dst[s];
    xn[s] = std::min(x[s] / ratio[i], cap[s]);
    const float inv = 1.0f / std::max(price[i], fl[s]);
    x[s] = w[s] * inv;
    add_pair(acc + i, x[s], x[s] * inv);
  }
  return xn[n / 2];
}

// A pull: each flow's x gathered in another order and summed into runs of
// that order (the carry dropped where the run changes, as the engine's run
// sums are), the alternative to gather_add's scattered adds.
float pull(std::size_t n, const std::uint32_t* __restrict perm, const std::uint32_t* __restrict run,
           const float* __restrict x, float* __restrict sums) {
  float carry = 0;
  std::uint32_t last = ~0u;
  for (std::size_t s = 0; s < n; ++s) {
    const std::uint32_t r = run[s];
    carry = (r == last ? carry : 0.0f) + x[perm[s]];
    sums[r] = carry;
    last = r;
  }
  return sums[0];
}

}  // namespace flowtune::bench::floor
