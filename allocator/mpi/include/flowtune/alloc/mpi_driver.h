// The engine across processes (paper §4, over machines): FlowBlocks are
// spread over the ranks of an MPI communicator, each rank holding the flows
// of its blocks in an engine of its own over the same links, and every
// iteration the blocks' link sums meet by MPI collectives, so that every
// rank ends it with the same prices and ratios (docs/scale.md).
//
// Each rank builds the same BasicEngine (links, sites, config, blocks per
// side) and adds only the flows whose FlowBlock it owns (owns()); ranks own
// contiguous ranges of blocks in block order (under kDiagonal, the blocks
// of their grid cell: owner_of()). iterate() and solve() are
// collective: every rank calls them, in the same order. Engines make a
// class's layer of prices when a flow first uses it; the driver makes the
// ranks agree on the classes in use at every iteration. set_blocks() would
// move flows between ranks' blocks: it is not for an engine under this
// driver.
//
// Two ways for the sums to meet (Exchange), chosen by measurement
// (bench/mpi_bench, docs/scale.md):
//  - kLinkOwners: each rank owns a range of links. One MPI_Alltoallv takes
//    every block's (link, Σx, Σ-dx/dP) entries to the rank that owns the
//    link, which sums them in block order and takes the price step there;
//    a second, the other way, answers each entry with its link's new price
//    and ratio. A rank sends and hears only of the links its blocks touch,
//    so the bytes scale with the flows' paths, not with the network; and
//    the sums are the single-process engine's, term for term: rates are
//    bit-identical to BasicEngine::iterate() with the same block count.
//    A rank's engine holds current prices only for the links its blocks
//    touch and those it owns (owned_links()).
//  - kAllreduce: every rank sums its blocks over all links, one
//    MPI_Allreduce adds the ranks' sums, every rank steps every price. One
//    collective, but all links' bytes, and the sums are added in another
//    order: rates agree to rounding, not bit for bit.
//  - kNeighbors: kLinkOwners's sums and answers, bit for bit, with less
//    said per iteration. A rank compares what it would send in the counts
//    exchange with what it sent last; one MPI_Allreduce of "changed" stands
//    in for the MPI_Alltoall while no rank's counts change (a block's link
//    copies only grow, so they settle), and the entries and answers travel
//    by MPI_Neighbor_alltoallv over a graph of the ranks a rank trades
//    with, remade only when that set changes. The all-to-all steps pay for
//    all R peers; these for a rank's neighbours.
//  - kDiagonal: the paper's log-step exchange (§4, Fig. 5). R = n² ranks
//    form an n × n grid (in Z order: each aligned 2m × 2m square is 4m²
//    consecutive ranks, so on one machine's cores while it fits there);
//    rank (i, j) holds the FlowBlocks from site group
//    i to site group j, so its flows touch only the upward LinkBlock of
//    row i and the downward LinkBlock of column j (set_link_sites()). Each
//    rank sums its blocks into those two dense arrays; in log2 n steps
//    each 2m × 2m group of ranks adds its upward arrays onto its main
//    diagonal and its downward ones onto its secondary diagonal (each
//    rank sends at most one array and hears at most one per step); rank
//    (i, i) steps row i's upward prices, rank (n-1-j, j) column j's
//    downward ones, and the answers go back the same way. Every array has
//    its LinkBlock's size whatever the flows: bytes are fixed by the
//    network. The sums are added in another order: rates agree with the
//    single-process engine to rounding, as with kAllreduce.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "flowtune/alloc/engine.h"
#include "flowtune/alloc/engine_driver.h"
#include "flowtune/alloc/topology.h"

namespace flowtune::alloc {

enum class Exchange { kLinkOwners, kAllreduce, kNeighbors, kDiagonal };
const char* to_string(Exchange x);
// "link-owners", "allreduce", "neighbors", "diagonal"; false for anything else.
bool parse_exchange(std::string_view s, Exchange& out);

class MpiDriver {
 public:
  // The driver works on a duplicate of comm (its collectives never meet
  // the caller's). MPI must be initialized, and stay so while it lives.
  // kDiagonal needs 4^k ranks (1, 4, 16, ...): std::invalid_argument else.
  explicit MpiDriver(MPI_Comm comm, Exchange exchange = Exchange::kLinkOwners);
  // Whether the diagonal exchange takes this many ranks.
  static bool square_of_power_of_two(int ranks);
  ~MpiDriver();
  MpiDriver(const MpiDriver&) = delete;
  MpiDriver& operator=(const MpiDriver&) = delete;

  int rank() const;
  int ranks() const;
  Exchange exchange() const;

  // The rank that holds FlowBlock b of num_blocks among `ranks` in
  // contiguous ranges (every exchange but kDiagonal).
  static int owner(std::size_t block, std::size_t num_blocks, int ranks);
  // The rank that holds FlowBlock b of num_blocks under this driver's
  // exchange: owner(), or under kDiagonal the grid rank of its source and
  // destination block groups.
  int owner_of(std::size_t block, std::size_t num_blocks) const;
  // kDiagonal: each link's LinkBlock (Topology::link_sites()), set on every
  // rank alike before the first iteration; every flow's path must climb
  // its source site's upward links and descend its destination site's.
  void set_link_sites(std::vector<LinkSite> sites);
  // The links [first, second) whose prices this rank steps (kLinkOwners).
  std::pair<std::size_t, std::size_t> owned_links(std::size_t num_links) const {
    return {num_links * static_cast<std::size_t>(rank()) / static_cast<std::size_t>(ranks()),
            num_links * static_cast<std::size_t>(rank() + 1) / static_cast<std::size_t>(ranks())};
  }
  // Whether this rank holds f's FlowBlock in e (add f to e here if so).
  template <typename Real>
  bool owns(const BasicEngine<Real>& e, const FlowSpec& f) const {
    return owner_of(DriverView(e).block_of_sites(f.src_site, f.dst_site), e.num_blocks()) == rank();
  }

  // One iteration across the ranks (collective).
  template <typename Real>
  void iterate(BasicEngine<Real>& e);
  // iterate() until converged (every rank sees the same stats) or
  // max_iterations; returns iterations run (collective).
  template <typename Real>
  std::uint64_t solve(BasicEngine<Real>& e, std::uint64_t max_iterations);

  // Mirrors (flowtune-allocator --mpi): every rank's engine holds every
  // flow, rank 0's changes replayed from its journal (a JournaledEngine's,
  // engine_journal.h), each rank iterates its own blocks, and rank 0 gathers
  // the other blocks' rates, so its engine answers for every flow.
  // lead() on rank 0: sends the journal (then cleared), iterates with the
  // others and gathers their rates. follow() on every other rank: replays
  // and iterates at each lead() until finish(); false when a journal did
  // not replay (the mirror is no longer one: the caller must stop, and
  // rank 0 learns it at its next lead(), which throws).
  template <typename Real>
  void lead(BasicEngine<Real>& e, std::vector<std::uint8_t>* journal);
  template <typename Real>
  bool follow(BasicEngine<Real>& e);
  void finish();
  // The mirrors' gather (set on every rank alike): after an iteration that
  // followed no changes (an empty journal), a follower sends a flow's rates
  // only when its normalized rate moved by more than t, relative, since it
  // last sent them, so rank 0 holds every rate within t of the computed
  // one. After changes (flows come and go, so blocks' slots move) every
  // rate goes. 0, the default: every rate every iteration, bit for bit.
  void set_gather_threshold(double t);

  // Where this rank's iterations went since the last reset: its own passes
  // and price steps, and the time inside MPI calls (waiting for the other
  // ranks included), and the bytes it sent to other ranks.
  struct Times {
    std::uint64_t iterations = 0;
    double compute_s = 0;
    double exchange_s = 0;
    std::uint64_t bytes_sent = 0;
    // kLinkOwners, kNeighbors: (link, sums) entries this rank's blocks
    // sent, to itself too.
    std::uint64_t entries = 0;
    // Iterations that exchanged the counts all to all (kLinkOwners: every
    // one; kNeighbors: those after some rank's counts changed), and the
    // neighbour graphs made (kNeighbors).
    std::uint64_t counts_exchanges = 0;
    std::uint64_t graphs = 0;
    // kDiagonal: the LinkBlock arrays this rank sent, sums and answers.
    std::uint64_t arrays_sent = 0;
    // Mirrors: flows whose rates rank 0 received from the other ranks.
    std::uint64_t rates_received = 0;
  };
  const Times& times() const;
  void reset_times();

 private:
  template <typename Real>
  void iterate_link_owners(BasicEngine<Real>& e);
  template <typename Real>
  void iterate_allreduce(BasicEngine<Real>& e);
  template <typename Real>
  void iterate_diagonal(BasicEngine<Real>& e);
  // every: all rates (after changes, or without a threshold), else those
  // that moved past the gather threshold.
  template <typename Real>
  void gather_rates(BasicEngine<Real>& e, bool intact, bool every);
  template <typename Real>
  void gather_moved_rates(BasicEngine<Real>& e, bool intact);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

extern template void MpiDriver::iterate(BasicEngine<float>&);
extern template void MpiDriver::iterate(BasicEngine<double>&);
extern template std::uint64_t MpiDriver::solve(BasicEngine<float>&, std::uint64_t);
extern template std::uint64_t MpiDriver::solve(BasicEngine<double>&, std::uint64_t);
extern template void MpiDriver::lead(BasicEngine<float>&, std::vector<std::uint8_t>*);
extern template void MpiDriver::lead(BasicEngine<double>&, std::vector<std::uint8_t>*);
extern template bool MpiDriver::follow(BasicEngine<float>&);
extern template bool MpiDriver::follow(BasicEngine<double>&);

}  // namespace flowtune::alloc
