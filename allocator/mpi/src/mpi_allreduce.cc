// The allreduce exchange (Exchange::kAllreduce): every rank sums its
// blocks over all links and one MPI_Allreduce adds the ranks' sums.
#include <cstddef>
#include <cstdint>

#include "mpi_internal.h"

namespace flowtune::alloc {

using mpi_detail::check;
using mpi_detail::mpi_type;
using mpi_detail::Stopwatch;

template <typename Real>
void MpiDriver::iterate_allreduce(BasicEngine<Real>& e) {
  Impl& m = *impl_;
  const DriverView d(e);
  Stopwatch watch(&m.times);
  std::uint32_t mask = d.class_mask(), all_mask = 0;
  watch.mpi([&] {
    check(MPI_Allreduce(&mask, &all_mask, 1, MPI_UINT32_T, MPI_BOR, m.comm), "Allreduce");
  });
  d.use_classes(all_mask);
  const std::size_t nb = e.num_blocks();
  d.prepare();
  for (std::size_t b = 0; b < nb; ++b) {
    if (m.owner_of(b, nb) == m.rank) d.rate_pass(b);
  }
  const std::size_t n = 2 * d.num_layers() * e.num_links();
  Real* yh = m.sums<Real>(n);
  d.sum_blocks(yh);
  watch.mpi([&] {
    check(MPI_Allreduce(MPI_IN_PLACE, yh, static_cast<int>(n), mpi_type<Real>(), MPI_SUM, m.comm),
          "Allreduce");
  });
  // An allreduce moves about 2·(R-1)/R of the vector out of each rank.
  m.times.bytes_sent += 2 * n * sizeof(Real) * static_cast<std::uint64_t>(m.ranks - 1) / m.ranks;
  d.finish_links(d.update_links_from(0, e.num_links(), yh));
  for (std::size_t b = 0; b < nb; ++b) {
    if (m.owner_of(b, nb) == m.rank) d.normalize_pass(b);
  }
}

template void MpiDriver::iterate_allreduce(BasicEngine<float>&);
template void MpiDriver::iterate_allreduce(BasicEngine<double>&);

}  // namespace flowtune::alloc
