// Floor kernels of engine_bench's BM_ClosFloor (floor_kernels.cc).
#pragma once

#include <cstddef>
#include <cstdint>

namespace flowtune::bench::floor {

struct Pair {
  float y, h;
};

float stream(std::size_t n, const float* w, const float* fl, float* x);
float gather(std::size_t n, const std::uint32_t* dst, const float* table, const float* w,
             const float* fl, float* x);
float gather_add(std::size_t n, const std::uint32_t* dst, const float* table, const float* w,
                 const float* fl, float* x, Pair* acc);
float fused(std::size_t n, const std::uint32_t* dst, const float* price, const float* ratio,
            const float* w, const float* fl, const float* cap, float* x, float* xn, Pair* acc);
float gather_add_scalar(std::size_t n, const std::uint32_t* dst, const float* table, const float* w,
                        const float* fl, float* x, Pair* acc);
float fused_scalar(std::size_t n, const std::uint32_t* dst, const float* price, const float* ratio,
                   const float* w, const float* fl, const float* cap, float* x, float* xn, Pair* acc);
float pull(std::size_t n, const std::uint32_t* perm, const std::uint32_t* run, const float* x,
           float* sums);

}  // namespace flowtune::bench::floor
