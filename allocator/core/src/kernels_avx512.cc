// Compiled with AVX-512 flags (see CMakeLists.txt); only called after
// cpu_has_avx512() says the CPU runs it.
#define FT_KERNEL_NS avx512
#define FT_KERNEL_NAME "avx512"
#include "kernels_impl.h"

namespace flowtune::alloc::detail {

bool cpu_has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq");
}

template <typename Real>
const Kernels<Real>* avx512_kernels_table() {
  return &avx512::kTable<Real>;
}

template const Kernels<float>* avx512_kernels_table();
template const Kernels<double>* avx512_kernels_table();

}  // namespace flowtune::alloc::detail
