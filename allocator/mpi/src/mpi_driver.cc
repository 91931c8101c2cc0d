#include "flowtune/alloc/mpi_driver.h"

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mpi_internal.h"

namespace flowtune::alloc {

const char* to_string(Exchange x) {
  switch (x) {
    case Exchange::kLinkOwners: return "link-owners";
    case Exchange::kAllreduce: return "allreduce";
    case Exchange::kNeighbors: return "neighbors";
    case Exchange::kDiagonal: return "diagonal";
  }
  return "?";
}

bool parse_exchange(std::string_view s, Exchange& out) {
  for (Exchange x : {Exchange::kLinkOwners, Exchange::kAllreduce, Exchange::kNeighbors, Exchange::kDiagonal}) {
    if (s == to_string(x)) {
      out = x;
      return true;
    }
  }
  return false;
}

using mpi_detail::check;

bool MpiDriver::square_of_power_of_two(int ranks) {
  for (int n = 1; n * n <= ranks; n *= 2) {
    if (n * n == ranks) return true;
  }
  return false;
}

MpiDriver::MpiDriver(MPI_Comm comm, Exchange exchange) : impl_(std::make_unique<Impl>()) {
  impl_->exchange = exchange;
  int size = 1;
  check(MPI_Comm_size(comm, &size), "Comm_size");
  if (exchange == Exchange::kDiagonal && !square_of_power_of_two(size)) {
    throw std::invalid_argument("the diagonal exchange needs 4^k MPI ranks (1, 4, 16, 64, ...), not " +
                                std::to_string(size));
  }
  check(MPI_Comm_dup(comm, &impl_->comm), "Comm_dup");
  MPI_Comm_rank(impl_->comm, &impl_->rank);
  MPI_Comm_size(impl_->comm, &impl_->ranks);
  impl_->set_grid();
}

MpiDriver::~MpiDriver() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (impl_->graph != MPI_COMM_NULL) MPI_Comm_free(&impl_->graph);
  if (impl_->comm != MPI_COMM_NULL) MPI_Comm_free(&impl_->comm);
}

int MpiDriver::rank() const { return impl_->rank; }
int MpiDriver::ranks() const { return impl_->ranks; }
Exchange MpiDriver::exchange() const { return impl_->exchange; }
const MpiDriver::Times& MpiDriver::times() const { return impl_->times; }
void MpiDriver::reset_times() { impl_->times = {}; }

int MpiDriver::owner(std::size_t block, std::size_t num_blocks, int ranks) {
  return static_cast<int>(block * static_cast<std::size_t>(ranks) / num_blocks);
}

int MpiDriver::owner_of(std::size_t block, std::size_t num_blocks) const {
  return impl_->owner_of(block, num_blocks);
}

void MpiDriver::set_link_sites(std::vector<LinkSite> sites) {
  impl_->link_sites = std::move(sites);
  impl_->diag_links = 0;  // the LinkBlocks are made again at the next iteration
}

template <typename Real>
void MpiDriver::iterate(BasicEngine<Real>& e) {
  switch (impl_->exchange) {
    case Exchange::kAllreduce: iterate_allreduce(e); break;
    case Exchange::kDiagonal: iterate_diagonal(e); break;
    default: iterate_link_owners(e);
  }
}

template <typename Real>
std::uint64_t MpiDriver::solve(BasicEngine<Real>& e, std::uint64_t max_iterations) {
  return iterate_until_converged(e, max_iterations, [this](BasicEngine<Real>& x) { iterate(x); });
}

template void MpiDriver::iterate(BasicEngine<float>&);
template void MpiDriver::iterate(BasicEngine<double>&);
template std::uint64_t MpiDriver::solve(BasicEngine<float>&, std::uint64_t);
template std::uint64_t MpiDriver::solve(BasicEngine<double>&, std::uint64_t);

}  // namespace flowtune::alloc
