// The neighbours' exchange (Exchange::kNeighbors): the link owners' sums
// and answers (mpi_link_owners.cc) over a graph of the ranks a rank trades
// with, and the all-to-all of the counts only when some rank's changed.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "mpi_internal.h"

namespace flowtune::alloc {

using mpi_detail::check;
using mpi_detail::Stopwatch;

// kNeighbors: whether any rank's counts differ from what it last sent all
// to all (one Allreduce); if so, they are what it sends now.
bool MpiDriver::Impl::counts_changed(Stopwatch& watch) {
  const bool any = any_rank(watch, !counts_valid || counts_out != last_counts_out);
  if (any) {
    last_counts_out = counts_out;
    counts_valid = true;
  }
  return any;
}

// Whether `mine` holds on some rank (collective).
bool MpiDriver::Impl::any_rank(Stopwatch& watch, bool mine) {
  int in = mine ? 1 : 0, any = 0;
  watch.mpi([&] { check(MPI_Allreduce(&in, &any, 1, MPI_INT, MPI_MAX, comm), "Allreduce"); });
  return any != 0;
}

// kNeighbors, after the counts came all to all: the other ranks this one
// sends entries to or hears them from (either way, so both ends list the
// edge), and a new graph when that set changed on some rank.
void MpiDriver::Impl::update_graph(Stopwatch& watch, int ints) {
  want.clear();
  for (int q = 0; q < ranks; ++q) {
    if (q != rank && (counts_out[ints * q] > 0 || counts_in[ints * q] > 0)) want.push_back(q);
  }
  if (!any_rank(watch, graph == MPI_COMM_NULL || want != neighbors)) return;
  if (graph != MPI_COMM_NULL) MPI_Comm_free(&graph);
  neighbors = want;
  const int n = static_cast<int>(neighbors.size());
  int none = 0;
  int* list = n > 0 ? neighbors.data() : &none;
  int* weights = n > 0 ? MPI_UNWEIGHTED : MPI_WEIGHTS_EMPTY;
  watch.mpi([&] {
    check(MPI_Dist_graph_create_adjacent(comm, n, list, weights, n, list, weights, MPI_INFO_NULL,
                                         /*reorder=*/0, &graph),
          "Dist_graph_create_adjacent");
  });
  ++times.graphs;
}

// What alltoallv would do with send_/recv_bytes and _disp (per rank),
// over the graph: this rank's own part copied, the neighbours' sent.
void MpiDriver::Impl::neighbor_alltoallv(Stopwatch& watch, const void* out, void* in) {
  if (send_bytes[rank] != recv_bytes[rank]) throw std::logic_error("MpiDriver: own entries differ");
  if (send_bytes[rank] > 0) {
    std::memcpy(static_cast<char*>(in) + recv_disp[rank],
                static_cast<const char*>(out) + send_disp[rank],
                static_cast<std::size_t>(send_bytes[rank]));
  }
  const std::size_t n = neighbors.size();
  // At least one element each: a rank with no neighbours still calls the
  // collective, with arrays that point somewhere.
  nb_send_bytes.resize(std::max<std::size_t>(n, 1));
  nb_send_disp.resize(std::max<std::size_t>(n, 1));
  nb_recv_bytes.resize(std::max<std::size_t>(n, 1));
  nb_recv_disp.resize(std::max<std::size_t>(n, 1));
  std::size_t k = 0;
  for (int q = 0; q < ranks; ++q) {
    if (k < n && neighbors[k] == q) {
      nb_send_bytes[k] = send_bytes[q];
      nb_send_disp[k] = send_disp[q];
      nb_recv_bytes[k] = recv_bytes[q];
      nb_recv_disp[k] = recv_disp[q];
      ++k;
    } else if (q != rank && (send_bytes[q] != 0 || recv_bytes[q] != 0)) {
      throw std::logic_error("MpiDriver: entries for a rank outside the graph");
    }
  }
  watch.mpi([&] {
    check(MPI_Neighbor_alltoallv(out, nb_send_bytes.data(), nb_send_disp.data(), MPI_BYTE, in,
                                 nb_recv_bytes.data(), nb_recv_disp.data(), MPI_BYTE, graph),
          "Neighbor_alltoallv");
  });
}

}  // namespace flowtune::alloc
