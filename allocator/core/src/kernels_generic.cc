#define FT_KERNEL_NS generic
#define FT_KERNEL_NAME "generic"
#include "kernels_impl.h"

#include <type_traits>

namespace flowtune::alloc::detail {

template <typename Real>
const Kernels<Real>& generic_kernels() {
  return generic::kTable<Real>;
}

#if defined(FT_HAVE_AVX512_KERNELS)
bool cpu_has_avx512();
const Kernels<float>* avx512_kernels_table_float();
const Kernels<double>* avx512_kernels_table_double();
template <typename Real>
const Kernels<Real>* avx512_kernels() {
  if (!cpu_has_avx512()) return nullptr;
  if constexpr (std::is_same_v<Real, float>) {
    return avx512_kernels_table_float();
  } else {
    return avx512_kernels_table_double();
  }
}
#else
template <typename Real>
const Kernels<Real>* avx512_kernels() {
  return nullptr;
}
#endif

template <typename Real>
const Kernels<Real>& kernels() {
  static const Kernels<Real>& best = [] () -> const Kernels<Real>& {
    const Kernels<Real>* k = avx512_kernels<Real>();
    return k ? *k : generic_kernels<Real>();
  }();
  return best;
}

template const Kernels<float>& generic_kernels();
template const Kernels<double>& generic_kernels();
template const Kernels<float>* avx512_kernels();
template const Kernels<double>* avx512_kernels();
template const Kernels<float>& kernels();
template const Kernels<double>& kernels();

}  // namespace flowtune::alloc::detail
