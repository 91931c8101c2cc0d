// What the MPI driver's files share (mpi_driver.cc, and one file per
// exchange: mpi_link_owners.cc with mpi_neighbors.cc, mpi_allreduce.cc,
// mpi_diagonal.cc, and the mirrors' mpi_mirror.cc): the driver's state
// (MpiDriver::Impl), the MPI error check, the link owners' entries and
// the stopwatch that splits an iteration's time.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "flowtune/alloc/mpi_driver.h"

namespace flowtune::alloc {
namespace mpi_detail {

inline void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw std::runtime_error(std::string("MPI ") + what + ": " + std::string(text, len));
}

template <typename Real>
MPI_Datatype mpi_type();
template <>
inline MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
inline MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}

// One block's sums for one link, on its way to the link's owner. key is
// the class (top bits) and the link: ranks may have made their layers in
// other orders. Shifts, not a division by the link count: the owner
// decodes one key per entry.
inline constexpr std::uint32_t kClassShift = 28;
inline constexpr std::uint32_t kLinkMask = (1u << kClassShift) - 1;
static_assert(kNumClasses <= (1u << (32 - kClassShift)), "classes must fit a key's top bits");
template <typename Real>
struct Entry {
  std::uint32_t key;
  Real y, h;
};

// Virtual link v as (layer, link) without a division where one class is in
// use (v < links): the packing loop runs once per block copy.
struct LayerLink {
  std::uint32_t layer, link;
};
inline LayerLink split(std::uint32_t v, std::uint32_t links) {
  if (v < links) return {0, v};
  const std::uint32_t lay = v / links;
  return {lay, v - lay * links};
}

// A rank's iteration: the part it computes and the part it waits in MPI.
class Stopwatch {
 public:
  // count: an iteration's watch (else a part of one, after it).
  explicit Stopwatch(MpiDriver::Times* t, bool count = true)
      : t_(t), count_(count), start_(now()) {}
  ~Stopwatch() {
    t_->compute_s += seconds(now() - start_) - in_mpi_;
    t_->exchange_s += in_mpi_;
    if (count_) ++t_->iterations;
  }
  template <typename F>
  void mpi(F&& call) {
    const auto t0 = now();
    call();
    in_mpi_ += seconds(now() - t0);
  }

 private:
  using Clock = std::chrono::steady_clock;
  static Clock::time_point now() { return Clock::now(); }
  static double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
  MpiDriver::Times* t_;
  bool count_;
  Clock::time_point start_;
  double in_mpi_ = 0;
};

}  // namespace mpi_detail

struct MpiDriver::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int ranks = 1;
  Exchange exchange;
  Times times;
  // The rank that owns each link (kLinkOwners): ranges [L·r/R, L·(r+1)/R).
  std::vector<std::int32_t> link_owner;
  std::vector<std::size_t> link_lo;  // ranks + 1 bounds
  // Scratch, kept between iterations.
  std::vector<int> counts_out, counts_in;  // per rank: entries, class mask
  std::vector<int> send_at, recv_at;       // entry offsets per rank (R + 1)
  std::vector<int> send_bytes, send_disp, recv_bytes, recv_disp, fill;
  // Entry<Real>[] out and in; (price, ratio) pairs back the other way.
  std::vector<char> out_entries, in_entries, answers_out, answers_in;
  std::vector<std::uint32_t> sent_links, recv_links;  // virtual links here, per entry
  // Per block, how many of its copies have had a current price from their
  // owners; the links asked for now, as keys and as virtual links here.
  std::vector<std::size_t> priced;
  std::vector<std::uint32_t> asked_keys, asked_links, keys_in;
  std::vector<char> yh;                   // Real[2 * layers * links], as bytes
  std::vector<char> rates_out, rates_in;  // Real[], as bytes (gather_rates)
  // Mirrors with a gather threshold: on a follower, the normalized rate it
  // last sent rank 0 per slot of its blocks (valid after a full gather).
  double gather_threshold = 0;
  std::vector<double> last_sent;
  bool last_sent_valid = false;
  std::vector<char> block_rates, moved_out;  // gather_moved_rates's scratch
  // kNeighbors: the counts last exchanged all to all (counts_in keeps what
  // came back), and the graph of the other ranks this rank trades with.
  std::vector<int> last_counts_out;
  bool counts_valid = false;
  MPI_Comm graph = MPI_COMM_NULL;
  std::vector<int> neighbors, want;  // want: update_graph's scratch
  std::vector<int> nb_send_bytes, nb_send_disp, nb_recv_bytes, nb_recv_disp;
  // The blocks each rank holds, in block order, for `held_blocks` blocks.
  std::vector<std::vector<std::uint32_t>> held;
  std::size_t held_blocks = 0;
  // kDiagonal: the grid's side, each link's LinkBlock, and for the layout
  // they were made for (links, blocks per side) this rank's two
  // LinkBlocks' links in id order and each link's place in its LinkBlock.
  int side = 1;
  std::vector<LinkSite> link_sites;
  std::size_t diag_links = 0;
  std::uint32_t diag_layout = 0;
  std::vector<LinkId> up_links, down_links;       // row's upward, column's downward
  std::vector<std::uint32_t> place;               // per link: index in its LinkBlock, or kNowhere
  std::vector<char> up_sums, down_sums, step_in;  // Real[2 * layers * size], as bytes
  std::vector<std::uint32_t> up_virtual, down_virtual;

  int row = 0, col = 0;  // this rank's cell (kDiagonal), set with side
  // The grid in Z order: a rank's bits alternate between its column's (even
  // bits) and its row's (odd), so every aligned 2m × 2m square of the grid
  // is 4m² consecutive ranks. mpirun places consecutive ranks on one
  // machine, so the first steps (16 cores: a 4 × 4 square) stay on it and
  // only the later ones cross the network, as in the paper's Fig. 5.
  int at(int r, int c) const {
    int z = 0;
    for (int b = 0; (1 << b) < side; ++b)
      z |= ((c >> b) & 1) << (2 * b) | ((r >> b) & 1) << (2 * b + 1);
    return z;
  }
  void set_grid() {
    while (side * side < ranks) side *= 2;
    for (int b = 0; (1 << b) < side; ++b) {
      row |= ((rank >> (2 * b + 1)) & 1) << b;
      col |= ((rank >> (2 * b)) & 1) << b;
    }
  }
  // The rank that holds FlowBlock `block` of num_blocks (owner_of()).
  int owner_of(std::size_t block, std::size_t num_blocks) const {
    if (exchange != Exchange::kDiagonal) return MpiDriver::owner(block, num_blocks, ranks);
    // num_blocks is layout² (blocks per side, squared); block = src · layout + dst.
    std::size_t layout = 1;
    while (layout * layout < num_blocks) ++layout;
    const auto n = static_cast<std::size_t>(side);
    return at(static_cast<int>(block / layout * n / layout),
              static_cast<int>(block % layout * n / layout));
  }
  // The blocks rank r holds of nb, in block order (kept per block count).
  const std::vector<std::uint32_t>& blocks_of(int r, std::size_t nb) {
    if (held_blocks != nb || held.size() != static_cast<std::size_t>(ranks)) {
      held.assign(static_cast<std::size_t>(ranks), {});
      for (std::size_t b = 0; b < nb; ++b) {
        held[static_cast<std::size_t>(owner_of(b, nb))].push_back(static_cast<std::uint32_t>(b));
      }
      held_blocks = nb;
    }
    return held[static_cast<std::size_t>(r)];
  }

  void set_links(std::size_t links) {
    if (link_owner.size() == links && !link_lo.empty()) return;
    link_owner.resize(links);
    link_lo.resize(static_cast<std::size_t>(ranks) + 1);
    for (int r = 0; r <= ranks; ++r) link_lo[r] = links * static_cast<std::size_t>(r) / ranks;
    for (int r = 0; r < ranks; ++r) {
      for (std::size_t l = link_lo[r]; l < link_lo[r + 1]; ++l) link_owner[l] = r;
    }
  }
  // One iteration of an exchange, its steps apart (mpi_link_owners.cc,
  // mpi_diagonal.cc).
  template <typename Real>
  struct OwnersRound;
  template <typename Real>
  struct DiagonalRound;

  // kNeighbors (mpi_neighbors.cc): whether any rank's counts differ from
  // what it last sent all to all (one Allreduce); if so, they are what it
  // sends now.
  bool counts_changed(mpi_detail::Stopwatch& watch);
  // Whether `mine` holds on some rank (collective).
  bool any_rank(mpi_detail::Stopwatch& watch, bool mine);
  // After the counts came all to all: the other ranks this one sends
  // entries to or hears them from (either way, so both ends list the
  // edge), and a new graph when that set changed on some rank.
  void update_graph(mpi_detail::Stopwatch& watch, int ints);
  // What alltoallv would do with send_/recv_bytes and _disp (per rank),
  // over the graph: this rank's own part copied, the neighbours' sent.
  void neighbor_alltoallv(mpi_detail::Stopwatch& watch, const void* out, void* in);
  template <typename Real>
  Real* sums(std::size_t n) {
    return room<Real>(yh, n);
  }
  // Scratch bytes kept between iterations, as at least n T's.
  template <typename T>
  static T* room(std::vector<char>& bytes, std::size_t n) {
    if (bytes.size() < n * sizeof(T)) bytes.resize(n * sizeof(T));
    return reinterpret_cast<T*>(bytes.data());
  }
};

}  // namespace flowtune::alloc
