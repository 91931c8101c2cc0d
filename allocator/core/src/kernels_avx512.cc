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

// Plain functions, not template instantiations: those would be weak symbols,
// and this object defines none (see kernels_impl.h).
const Kernels<float>* avx512_kernels_table_float() { return &avx512::kTable<float>; }
const Kernels<double>* avx512_kernels_table_double() { return &avx512::kTable<double>; }

}  // namespace flowtune::alloc::detail
