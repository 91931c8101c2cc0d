#include "flowtune/alloc/mpi_driver.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "flowtune/alloc/engine_journal.h"

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

namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw std::runtime_error(std::string("MPI ") + what + ": " + std::string(text, len));
}

template <typename Real>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }
template <>
MPI_Datatype mpi_type<double>() { return MPI_DOUBLE; }

// One block's sums for one link, on its way to the link's owner. key is
// the class (top bits) and the link: ranks may have made their layers in
// other orders. Shifts, not a division by the link count: the owner
// decodes one key per entry.
constexpr std::uint32_t kClassShift = 28;
constexpr std::uint32_t kLinkMask = (1u << kClassShift) - 1;
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
  explicit Stopwatch(MpiDriver::Times* t, bool count = true) : t_(t), count_(count), start_(now()) {}
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

}  // namespace

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
  std::vector<char> yh;  // Real[2 * layers * links], as bytes
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
  std::vector<LinkId> up_links, down_links;  // row's upward, column's downward
  std::vector<std::uint32_t> place;          // per link: index in its LinkBlock, or kNowhere
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
    for (int b = 0; (1 << b) < side; ++b) z |= ((c >> b) & 1) << (2 * b) | ((r >> b) & 1) << (2 * b + 1);
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
    return at(static_cast<int>(block / layout * n / layout), static_cast<int>(block % layout * n / layout));
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
  // kNeighbors: whether any rank's counts differ from what it last sent all
  // to all (one Allreduce); if so, they are what it sends now.
  bool counts_changed(Stopwatch& watch) {
    const bool any = any_rank(watch, !counts_valid || counts_out != last_counts_out);
    if (any) {
      last_counts_out = counts_out;
      counts_valid = true;
    }
    return any;
  }
  // Whether `mine` holds on some rank (collective).
  bool any_rank(Stopwatch& watch, bool mine) {
    int in = mine ? 1 : 0, any = 0;
    watch.mpi([&] { check(MPI_Allreduce(&in, &any, 1, MPI_INT, MPI_MAX, comm), "Allreduce"); });
    return any != 0;
  }
  // kNeighbors, after the counts came all to all: the other ranks this one
  // sends entries to or hears them from (either way, so both ends list the
  // edge), and a new graph when that set changed on some rank.
  void update_graph(Stopwatch& watch, int ints) {
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
  void neighbor_alltoallv(Stopwatch& watch, const void* out, void* in) {
    if (send_bytes[rank] != recv_bytes[rank]) throw std::logic_error("MpiDriver: own entries differ");
    if (send_bytes[rank] > 0) {
      std::memcpy(static_cast<char*>(in) + recv_disp[rank],
                  static_cast<const char*>(out) + send_disp[rank], static_cast<std::size_t>(send_bytes[rank]));
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
  std::uint64_t n = 0;
  while (n < max_iterations) {
    iterate(e);
    ++n;
    if (e.stats().converged) break;  // the same on every rank: stats are global
  }
  return n;
}

// One iteration with links owned by ranks:
//  1. MPI_Alltoall: how many entries go to each rank this iteration, each
//     rank's classes in use (all ranks then make the same layers), and the
//     links this rank's blocks have touched since the last iteration;
//  2. only if some rank has such links: an MPI_Alltoallv asks their owners
//     and a second brings their current prices (a new flow's first rate
//     must come from the price the single-process engine holds);
//  3. rate passes of this rank's blocks;
//  4. MPI_Alltoallv: every block's (link, Σx, Σ-dx/dP) entries, in block
//     order, to the owners of their links; each owner adds them in that
//     order (ranks hold blocks in rank order) and takes the price step;
//  5. MPI_Alltoallv back, the same counts reversed: for each entry, the
//     owner's new price and ratio of that link, loaded where it came from;
//  6. MPI_Allreduce of the owners' stats; normalization of this rank's blocks.
// A rank thus hears of the links its blocks touch and no others: the bytes
// scale with the flows' paths, not with the network.
template <typename Real>
void MpiDriver::iterate_link_owners(BasicEngine<Real>& e) {
  Impl& m = *impl_;
  Stopwatch watch(&m.times);
  const std::size_t links = e.num_links();
  const auto nl = static_cast<std::uint32_t>(links);
  const int R = m.ranks;
  if (links > kLinkMask) throw std::length_error("MpiDriver: more than 2^28 links");
  m.set_links(links);
  const std::size_t nb = e.num_blocks();
  const auto& mine = m.blocks_of(m.rank, nb);
  if (m.priced.size() != nb) m.priced.assign(nb, 0);

  // 1. What goes where. A block's copies only grow (links are added, never
  // dropped, while the block layout stays), so those past priced[b] are new.
  constexpr int kInts = 4;  // entries, class mask, requests, this rank's requests in all
  m.counts_out.assign(kInts * static_cast<std::size_t>(R), 0);
  int requests = 0;
  for (const std::size_t b : mine) {
    const auto s = e.block_sums(b);
    if (m.priced[b] > s.size) m.priced[b] = 0;
    for (std::size_t i = 0; i < s.size; ++i) {
      const int q = m.link_owner[split(s.links[i], nl).link];
      ++m.counts_out[kInts * q];
      if (i >= m.priced[b]) {
        ++m.counts_out[kInts * q + 2];
        ++requests;
      }
    }
  }
  for (int q = 0; q < R; ++q) {
    m.counts_out[kInts * q + 1] = static_cast<int>(e.class_mask());
    m.counts_out[kInts * q + 3] = requests;
  }
  const bool neighbors = m.exchange == Exchange::kNeighbors;
  if (!neighbors || m.counts_changed(watch)) {
    m.counts_in.resize(kInts * static_cast<std::size_t>(R));
    watch.mpi([&] {
      check(MPI_Alltoall(m.counts_out.data(), kInts, MPI_INT, m.counts_in.data(), kInts, MPI_INT, m.comm),
            "Alltoall");
    });
    ++m.times.counts_exchanges;
    if (neighbors) m.update_graph(watch, kInts);
  }
  std::uint32_t mask = 0;
  long all_requests = 0;
  for (int q = 0; q < R; ++q) {
    mask |= static_cast<std::uint32_t>(m.counts_in[kInts * q + 1]);
    all_requests += m.counts_in[kInts * q + 3];
  }
  e.use_classes(mask);
  std::array<std::uint32_t, kNumClasses> cls{}, pos_of{}, layer_of{};
  for (std::uint32_t lay = 0; lay < e.num_layers(); ++lay) {
    cls[lay] = e.class_of_layer(lay);
    layer_of[cls[lay]] = lay;
  }
  {
    std::uint32_t i = 0;
    for (std::uint8_t c : e.classes()) pos_of[c] = i++;
  }
  // MPI_Alltoallv of items of `unit` bytes, rank q's at item offsets
  // out_at[q]..out_at[q + 1] (sent) and in_at[q]..in_at[q + 1] (received).
  auto alltoallv = [&](const void* out, const std::vector<int>& out_at, void* in,
                       const std::vector<int>& in_at, int unit) {
    m.send_bytes.resize(R);
    m.send_disp.resize(R);
    m.recv_bytes.resize(R);
    m.recv_disp.resize(R);
    for (int q = 0; q < R; ++q) {
      m.send_bytes[q] = (out_at[q + 1] - out_at[q]) * unit;
      m.send_disp[q] = out_at[q] * unit;
      m.recv_bytes[q] = (in_at[q + 1] - in_at[q]) * unit;
      m.recv_disp[q] = in_at[q] * unit;
    }
    if (neighbors) {
      m.neighbor_alltoallv(watch, out, in);
      return;
    }
    watch.mpi([&] {
      check(MPI_Alltoallv(out, m.send_bytes.data(), m.send_disp.data(), MPI_BYTE, in,
                          m.recv_bytes.data(), m.recv_disp.data(), MPI_BYTE, m.comm),
            "Alltoallv");
    });
  };
  auto offsets = [&](const std::vector<int>& counts, int field, std::vector<int>* at) {
    at->assign(R + 1, 0);
    for (int q = 0; q < R; ++q) (*at)[q + 1] = (*at)[q] + counts[kInts * q + field];
  };
  auto key_of = [&](std::uint32_t v) {
    const LayerLink x = split(v, nl);
    return cls[x.layer] << kClassShift | x.link;
  };
  auto here = [&](std::uint32_t key) { return layer_of[key >> kClassShift] * nl + (key & kLinkMask); };

  // 2. Current prices of the links new to this rank's blocks.
  if (all_requests > 0) {
    offsets(m.counts_out, 2, &m.send_at);
    offsets(m.counts_in, 2, &m.recv_at);
    m.asked_keys.resize(static_cast<std::size_t>(m.send_at[R]));
    m.asked_links.resize(m.asked_keys.size());
    m.fill.assign(m.send_at.begin(), m.send_at.end() - 1);
    for (const std::size_t b : mine) {
      const auto s = e.block_sums(b);
      for (std::size_t i = m.priced[b]; i < s.size; ++i) {
        const int k = m.fill[m.link_owner[split(s.links[i], nl).link]]++;
        m.asked_keys[static_cast<std::size_t>(k)] = key_of(s.links[i]);
        m.asked_links[static_cast<std::size_t>(k)] = s.links[i];
      }
      m.priced[b] = s.size;
    }
    m.keys_in.resize(static_cast<std::size_t>(m.recv_at[R]));
    alltoallv(m.asked_keys.data(), m.send_at, m.keys_in.data(), m.recv_at, 4);
    for (std::uint32_t& k : m.keys_in) k = here(k);
    m.answers_out.resize(2 * m.keys_in.size() * sizeof(Real));
    m.answers_in.resize(2 * m.asked_links.size() * sizeof(Real));
    e.save_links(m.keys_in.data(), m.keys_in.size(), reinterpret_cast<Real*>(m.answers_out.data()));
    const int answer = static_cast<int>(2 * sizeof(Real));
    alltoallv(m.answers_out.data(), m.recv_at, m.answers_in.data(), m.send_at, answer);
    e.load_links(m.asked_links.data(), m.asked_links.size(), reinterpret_cast<const Real*>(m.answers_in.data()));
    for (int q = 0; q < R; ++q) {
      if (q == m.rank) continue;
      m.times.bytes_sent += static_cast<std::uint64_t>(m.counts_out[kInts * q + 2]) * 4 +
                            static_cast<std::uint64_t>(m.counts_in[kInts * q + 2]) * answer;
    }
  }

  // 3. Rates.
  for (const std::size_t b : mine) e.rate_pass(b);

  // 4. Entries to the links' owners, and the link each came from (where
  // its answer goes).
  offsets(m.counts_out, 0, &m.send_at);
  offsets(m.counts_in, 0, &m.recv_at);
  const auto sent = static_cast<std::size_t>(m.send_at[R]);
  const auto received = static_cast<std::size_t>(m.recv_at[R]);
  m.times.entries += sent;
  m.out_entries.resize(sent * sizeof(Entry<Real>));
  m.sent_links.resize(sent);
  m.fill.assign(m.send_at.begin(), m.send_at.end() - 1);
  auto* out = reinterpret_cast<Entry<Real>*>(m.out_entries.data());
  for (const std::size_t b : mine) {
    const auto s = e.block_sums(b);
    for (std::size_t i = 0; i < s.size; ++i) {
      const LayerLink v = split(s.links[i], nl);
      const int k = m.fill[m.link_owner[v.link]]++;
      out[k] = {cls[v.layer] << kClassShift | v.link, s.yh[2 * i], s.yh[2 * i + 1]};
      m.sent_links[static_cast<std::size_t>(k)] = s.links[i];
    }
  }
  m.in_entries.resize(received * sizeof(Entry<Real>));
  const int entry = static_cast<int>(sizeof(Entry<Real>));
  alltoallv(m.out_entries.data(), m.send_at, m.in_entries.data(), m.recv_at, entry);

  // This rank's links: the blocks' sums in block order, as the
  // single-process engine adds them; and each entry's link here.
  const std::size_t layers = e.num_layers();
  const std::size_t lo = m.link_lo[m.rank], hi = m.link_lo[m.rank + 1];
  Real* yh = m.sums<Real>(2 * layers * links);
  for (std::size_t i = 0; i < layers; ++i) {
    std::fill(yh + 2 * (i * links + lo), yh + 2 * (i * links + hi), Real{0});
  }
  m.recv_links.resize(received);
  const auto* in = reinterpret_cast<const Entry<Real>*>(m.in_entries.data());
  for (std::size_t k = 0; k < received; ++k) {
    const std::uint32_t c = in[k].key >> kClassShift;
    const std::uint32_t l = in[k].key & kLinkMask;
    const std::size_t idx = 2 * (pos_of[c] * links + l);
    yh[idx] += in[k].y;
    yh[idx + 1] += in[k].h;
    m.recv_links[k] = layer_of[c] * nl + l;
  }
  using Partial = typename BasicEngine<Real>::LinkPartial;
  const Partial part = e.update_links_from(lo, hi, yh);

  // The answers: for every entry received, its link's price and ratio.
  m.answers_out.resize(2 * received * sizeof(Real));
  m.answers_in.resize(2 * sent * sizeof(Real));
  e.save_links(m.recv_links.data(), received, reinterpret_cast<Real*>(m.answers_out.data()));
  const int answer = static_cast<int>(2 * sizeof(Real));
  alltoallv(m.answers_out.data(), m.recv_at, m.answers_in.data(), m.send_at, answer);
  std::array<double, 3> stats{part.max_residual, part.max_raw_utilization, part.max_ratio}, all{};
  watch.mpi([&] {
    check(MPI_Allreduce(stats.data(), all.data(), 3, MPI_DOUBLE, MPI_MAX, m.comm), "Allreduce");
  });
  for (int q = 0; q < R; ++q) {
    if (q == m.rank) continue;
    m.times.bytes_sent += static_cast<std::uint64_t>(m.counts_out[kInts * q]) * sizeof(Entry<Real>) +
                          static_cast<std::uint64_t>(m.counts_in[kInts * q]) * 2 * sizeof(Real);
  }
  e.load_links(m.sent_links.data(), sent, reinterpret_cast<const Real*>(m.answers_in.data()));
  e.finish_links({all[0], all[1], all[2]});
  for (const std::size_t b : mine) e.normalize_pass(b);
}

template <typename Real>
void MpiDriver::iterate_allreduce(BasicEngine<Real>& e) {
  Impl& m = *impl_;
  Stopwatch watch(&m.times);
  std::uint32_t mask = e.class_mask(), all_mask = 0;
  watch.mpi([&] {
    check(MPI_Allreduce(&mask, &all_mask, 1, MPI_UINT32_T, MPI_BOR, m.comm), "Allreduce");
  });
  e.use_classes(all_mask);
  const std::size_t nb = e.num_blocks();
  e.prepare();
  for (std::size_t b = 0; b < nb; ++b) {
    if (m.owner_of(b, nb) == m.rank) e.rate_pass(b);
  }
  const std::size_t n = 2 * e.num_layers() * e.num_links();
  Real* yh = m.sums<Real>(n);
  e.sum_blocks(yh);
  watch.mpi([&] {
    check(MPI_Allreduce(MPI_IN_PLACE, yh, static_cast<int>(n), mpi_type<Real>(), MPI_SUM, m.comm),
          "Allreduce");
  });
  // An allreduce moves about 2·(R-1)/R of the vector out of each rank.
  m.times.bytes_sent += 2 * n * sizeof(Real) * static_cast<std::uint64_t>(m.ranks - 1) / m.ranks;
  e.finish_links(e.update_links_from(0, e.num_links(), yh));
  for (std::size_t b = 0; b < nb; ++b) {
    if (m.owner_of(b, nb) == m.rank) e.normalize_pass(b);
  }
}

namespace {

constexpr std::uint32_t kNowhere = ~std::uint32_t{0};

// One step of the diagonal exchange for this rank (paper §4, Fig. 5): in
// its group of 2m × 2m ranks, made of four m × m quadrants whose own
// diagonals hold their sums, which array it sends to or hears from whom.
struct DiagonalStep {
  int send_up = -1, recv_up = -1, send_down = -1, recv_down = -1;  // ranks, or -1
};

template <typename At>
DiagonalStep diagonal_step(int row, int col, int m, At at) {
  DiagonalStep s;
  const int lr = row % (2 * m), lc = col % (2 * m);
  const bool top = lr < m, left = lc < m;
  const int sr = lr % m, sc = lc % m;
  // Upward sums gather on the main diagonal, within each row: the
  // off-diagonal quadrants' diagonals hand theirs across.
  if (sr == sc) {
    if (top != left) s.send_up = at(row, top ? col - m : col + m);
    else s.recv_up = at(row, top ? col + m : col - m);
  }
  // Downward sums gather on the secondary diagonal, within each column: the
  // diagonal quadrants' secondary diagonals hand theirs up or down.
  if (sr + sc == m - 1) {
    if (top == left) s.send_down = at(top ? row + m : row - m, col);
    else s.recv_down = at(top ? row + m : row - m, col);
  }
  return s;
}

}  // namespace

// One iteration over the grid: rate passes, the LinkBlocks summed onto the
// diagonals in log2(side) steps, the price steps there, and the answers
// back the same way; then the stats' Allreduce and normalization.
template <typename Real>
void MpiDriver::iterate_diagonal(BasicEngine<Real>& e) {
  Impl& m = *impl_;
  Stopwatch watch(&m.times);
  const std::size_t links = e.num_links();
  const auto nl = static_cast<std::uint32_t>(links);
  if (m.link_sites.size() != links) {
    throw std::logic_error("MpiDriver: the diagonal exchange needs every link's site (set_link_sites), " +
                           std::to_string(m.link_sites.size()) + " given for " + std::to_string(links) + " links");
  }
  std::uint32_t mask = e.class_mask(), all_mask = 0;
  watch.mpi([&] {
    check(MPI_Allreduce(&mask, &all_mask, 1, MPI_UINT32_T, MPI_BOR, m.comm), "Allreduce");
  });
  e.use_classes(all_mask);
  const std::size_t nb = e.num_blocks();
  const std::uint32_t layout = e.blocks_per_side();
  const int n = m.side, row = m.row, col = m.col;
  if (m.diag_links != links || m.diag_layout != layout) {
    // A site's group: its block along one side, scaled to the grid's.
    auto group = [&](std::uint32_t site) {
      return static_cast<int>(std::size_t{e.block_of_sites(site, site) / layout} * static_cast<std::size_t>(n) / layout);
    };
    m.up_links.clear();
    m.down_links.clear();
    m.place.assign(links, kNowhere);
    for (std::uint32_t l = 0; l < nl; ++l) {
      const LinkSite s = m.link_sites[l];
      std::vector<LinkId>& lb = s.up ? m.up_links : m.down_links;
      if (group(s.site) != (s.up ? row : col)) continue;
      m.place[l] = static_cast<std::uint32_t>(lb.size());
      lb.push_back(l);
    }
    m.diag_links = links;
    m.diag_layout = layout;
  }
  const std::size_t layers = e.num_layers(), nu = m.up_links.size(), nd = m.down_links.size();
  std::array<std::uint32_t, kNumClasses> pos_of{};
  {
    std::uint32_t i = 0;
    for (std::uint8_t c : e.classes()) pos_of[c] = i++;
  }
  // Both LinkBlocks' virtual links, layer by layer in class order (where
  // the answers load), and this rank's blocks' sums into them.
  m.up_virtual.resize(layers * nu);
  m.down_virtual.resize(layers * nd);
  for (std::uint32_t lay = 0; lay < layers; ++lay) {
    const std::size_t pos = pos_of[e.class_of_layer(lay)];
    for (std::size_t i = 0; i < nu; ++i) m.up_virtual[pos * nu + i] = lay * nl + m.up_links[i];
    for (std::size_t i = 0; i < nd; ++i) m.down_virtual[pos * nd + i] = lay * nl + m.down_links[i];
  }
  Real* up = Impl::room<Real>(m.up_sums, 2 * layers * nu);
  Real* down = Impl::room<Real>(m.down_sums, 2 * layers * nd);
  std::fill(up, up + 2 * layers * nu, Real{0});
  std::fill(down, down + 2 * layers * nd, Real{0});
  e.prepare();
  const auto& mine = m.blocks_of(m.rank, nb);
  for (const std::size_t b : mine) {
    e.rate_pass(b);
    const auto s = e.block_sums(b);
    for (std::size_t i = 0; i < s.size; ++i) {
      const LayerLink v = split(s.links[i], nl);
      const LinkSite site = m.link_sites[v.link];
      const std::uint32_t at = m.place[v.link];
      if (at == kNowhere) {
        throw std::logic_error("MpiDriver: a block holds link " + std::to_string(v.link) +
                               ", outside its row's upward and its column's downward LinkBlocks");
      }
      const std::size_t pos = pos_of[e.class_of_layer(v.layer)];
      Real* to = site.up ? up + 2 * (pos * nu + at) : down + 2 * (pos * nd + at);
      to[0] += s.yh[2 * i];
      to[1] += s.yh[2 * i + 1];
    }
  }
  // One step's sends and receives, `answers` the other way round: the
  // arrays are (sum or answer) pairs per layer and link, the same size at
  // both ends of a row's or a column's exchange.
  const int up_count = static_cast<int>(2 * layers * nu), down_count = static_cast<int>(2 * layers * nd);
  Real* up_in = Impl::room<Real>(m.step_in, static_cast<std::size_t>(up_count) + static_cast<std::size_t>(down_count));
  Real* down_in = up_in + up_count;
  auto exchange = [&](int group, bool answers) {
    DiagonalStep st = diagonal_step(row, col, group, [&m](int r, int c) { return m.at(r, c); });
    if (answers) {
      std::swap(st.send_up, st.recv_up);
      std::swap(st.send_down, st.recv_down);
    }
    // Sums land beside this rank's own (then added to them); answers over them.
    std::array<MPI_Request, 4> req{};
    int k = 0;
    constexpr int kUp = 1, kDown = 2;
    const MPI_Datatype type = mpi_type<Real>();
    watch.mpi([&] {
      if (st.recv_up >= 0) {
        check(MPI_Irecv(answers ? up : up_in, up_count, type, st.recv_up, kUp, m.comm, &req[k++]), "Irecv");
      }
      if (st.recv_down >= 0) {
        check(MPI_Irecv(answers ? down : down_in, down_count, type, st.recv_down, kDown, m.comm, &req[k++]), "Irecv");
      }
      if (st.send_up >= 0) check(MPI_Isend(up, up_count, type, st.send_up, kUp, m.comm, &req[k++]), "Isend");
      if (st.send_down >= 0) check(MPI_Isend(down, down_count, type, st.send_down, kDown, m.comm, &req[k++]), "Isend");
      check(MPI_Waitall(k, req.data(), MPI_STATUSES_IGNORE), "Waitall");
    });
    m.times.bytes_sent += static_cast<std::uint64_t>((st.send_up >= 0 ? up_count : 0) +
                                                     (st.send_down >= 0 ? down_count : 0)) * sizeof(Real);
    m.times.arrays_sent += static_cast<std::uint64_t>((st.send_up >= 0) + (st.send_down >= 0));
    if (answers) return;
    if (st.recv_up >= 0) {
      for (int i = 0; i < up_count; ++i) up[i] += up_in[i];
    }
    if (st.recv_down >= 0) {
      for (int i = 0; i < down_count; ++i) down[i] += down_in[i];
    }
  };
  for (int step = 1; step < n; step *= 2) exchange(step, false);

  // The diagonals' price steps: rank (i, i) holds row i's upward sums,
  // rank (n-1-j, j) column j's downward ones (both, where they meet).
  Real* yh = m.sums<Real>(2 * layers * links);
  typename BasicEngine<Real>::LinkPartial part;
  auto step_prices = [&](const std::vector<LinkId>& list, const Real* sums, Real* answers,
                         const std::vector<std::uint32_t>& virtual_links) {
    const std::size_t count = list.size();
    for (std::size_t pos = 0; pos < layers; ++pos) {
      for (std::size_t i = 0; i < count; ++i) {
        yh[2 * (pos * links + list[i])] = sums[2 * (pos * count + i)];
        yh[2 * (pos * links + list[i]) + 1] = sums[2 * (pos * count + i) + 1];
      }
    }
    part = BasicEngine<Real>::combine(part, e.update_listed_links_from(list.data(), count, yh));
    e.save_links(virtual_links.data(), virtual_links.size(), answers);
  };
  if (row == col) step_prices(m.up_links, up, up, m.up_virtual);
  if (row + col == n - 1) step_prices(m.down_links, down, down, m.down_virtual);
  for (int step = n / 2; step >= 1; step /= 2) exchange(step, true);
  e.load_links(m.up_virtual.data(), m.up_virtual.size(), up);
  e.load_links(m.down_virtual.data(), m.down_virtual.size(), down);

  std::array<double, 3> stats{part.max_residual, part.max_raw_utilization, part.max_ratio}, all{};
  watch.mpi([&] {
    check(MPI_Allreduce(stats.data(), all.data(), 3, MPI_DOUBLE, MPI_MAX, m.comm), "Allreduce");
  });
  e.finish_links({all[0], all[1], all[2]});
  for (const std::size_t b : mine) e.normalize_pass(b);
}

namespace {

// What lead() broadcasts first: the journal's length, or one of these.
constexpr std::uint64_t kFinish = ~std::uint64_t{0};
// A follower whose replay failed says so in the rate gather's first value.
constexpr double kMirrorBroken = -1;

}  // namespace

template <typename Real>
void MpiDriver::lead(BasicEngine<Real>& e, std::vector<std::uint8_t>* journal) {
  Impl& m = *impl_;
  if (m.rank != 0) throw std::logic_error("MpiDriver::lead runs on rank 0");
  std::uint64_t n = journal->size();
  check(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, m.comm), "Bcast");
  if (n > 0) check(MPI_Bcast(journal->data(), static_cast<int>(n), MPI_BYTE, 0, m.comm), "Bcast");
  journal->clear();
  iterate(e);
  gather_rates(e, true, n > 0);
}

void MpiDriver::set_gather_threshold(double t) {
  if (!(t >= 0 && t < 1)) throw std::invalid_argument("MpiDriver: a gather threshold is within [0, 1)");
  impl_->gather_threshold = t;
}

template <typename Real>
bool MpiDriver::follow(BasicEngine<Real>& e) {
  Impl& m = *impl_;
  std::vector<std::uint8_t> journal;
  bool intact = true;
  for (;;) {
    std::uint64_t n = 0;
    check(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, m.comm), "Bcast");
    if (n == kFinish) return intact;
    journal.resize(n);
    if (n > 0) check(MPI_Bcast(journal.data(), static_cast<int>(n), MPI_BYTE, 0, m.comm), "Bcast");
    if (intact && !replay_journal(e, journal.data(), journal.size())) intact = false;
    // A broken mirror still takes part (the collectives must meet), and says so.
    iterate(e);
    gather_rates(e, intact, n > 0);
  }
}

void MpiDriver::finish() {
  if (impl_->rank != 0) return;
  std::uint64_t n = kFinish;
  check(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, impl_->comm), "Bcast");
}

// The other ranks' blocks' raw and normalized rates to rank 0, in rank
// then block order (blocks_of), with a first
// value per rank that says whether its mirror is intact.
template <typename Real>
void MpiDriver::gather_rates(BasicEngine<Real>& e, bool intact, bool every) {
  Impl& m = *impl_;
  if (m.gather_threshold > 0 && !every && m.last_sent_valid) {
    gather_moved_rates(e, intact);
    return;
  }
  const std::size_t nb = e.num_blocks();
  const auto& held = m.blocks_of(m.rank, nb);
  std::size_t mine = 1;
  for (const std::size_t b : held) mine += 2 * e.block_size(b);
  m.rates_out.resize(mine * sizeof(Real));
  Real* out = reinterpret_cast<Real*>(m.rates_out.data());
  out[0] = intact ? Real{0} : static_cast<Real>(kMirrorBroken);
  {
    Real* to = out + 1;
    for (const std::size_t b : held) {
      const std::size_t n = e.block_size(b);
      e.copy_block_rates(b, to, to + n);
      to += 2 * n;
    }
  }
  std::vector<int> counts, disp;
  if (m.rank == 0) {
    counts.resize(m.ranks);
    disp.resize(m.ranks);
    int at = 0;
    for (int r = 0; r < m.ranks; ++r) {
      std::size_t n = 1;
      for (const std::size_t b : m.blocks_of(r, nb)) n += 2 * e.block_size(b);
      counts[r] = static_cast<int>(n);
      disp[r] = at;
      at += counts[r];
    }
    m.rates_in.resize(static_cast<std::size_t>(at) * sizeof(Real));
  }
  if (m.gather_threshold > 0) {
    // What rank 0 holds from now on: the normalized rates just packed. Every
    // rank notes that a full gather happened, so all pick the same next one.
    if (m.rank != 0) {
      m.last_sent.resize((mine - 1) / 2);
      const Real* from = out + 1;
      std::size_t k = 0;
      for (const std::size_t b : held) {
        const std::size_t n = e.block_size(b);
        for (std::size_t i = 0; i < n; ++i) m.last_sent[k++] = static_cast<double>(from[n + i]);
        from += 2 * n;
      }
    }
    m.last_sent_valid = true;
  }
  Stopwatch watch(&m.times, /*count=*/false);
  watch.mpi([&] {
    check(MPI_Gatherv(out, static_cast<int>(mine), mpi_type<Real>(), m.rates_in.data(),
                      counts.data(), disp.data(), mpi_type<Real>(), 0, m.comm),
          "Gatherv");
  });
  if (m.rank != 0) return;
  for (int r = 1; r < m.ranks; ++r) {
    const Real* in = reinterpret_cast<const Real*>(m.rates_in.data()) + disp[r];
    if (in[0] == static_cast<Real>(kMirrorBroken)) {
      throw std::runtime_error("MPI rank " + std::to_string(r) +
                               " could not replay the engine's changes: its mirror differs");
    }
    ++in;
    for (const std::size_t b : m.blocks_of(r, nb)) {
      const std::size_t n = e.block_size(b);
      e.load_block_rates(b, in, in + n);
      in += 2 * n;
      m.times.rates_received += n;
    }
  }
}

// A moved rate on its way to rank 0: its slot among the sender's blocks'
// (in block order), its raw and normalized rates.
template <typename Real>
struct Moved {
  std::uint32_t slot;
  Real x, xn;
};

// The rates that moved past the threshold since this follower last sent
// them, with how many first: MPI_Gather of (intact, count), MPI_Gatherv of
// the entries. Slots are where the last full gather left them: no flow
// came or went since (the journal was empty).
template <typename Real>
void MpiDriver::gather_moved_rates(BasicEngine<Real>& e, bool intact) {
  Impl& m = *impl_;
  const std::size_t nb = e.num_blocks();
  // At most every slot moved: room for them all, kept between iterations.
  Moved<Real>* moved = Impl::room<Moved<Real>>(m.moved_out, m.last_sent.size());
  std::size_t count = 0;
  if (m.rank != 0) {
    std::uint32_t slot = 0;
    for (const std::size_t b : m.blocks_of(m.rank, nb)) {
      const std::size_t n = e.block_size(b);
      Real* x = Impl::room<Real>(m.block_rates, 2 * n);
      Real* xn = x + n;
      e.copy_block_rates(b, x, xn);
      for (std::size_t i = 0; i < n; ++i, ++slot) {
        if (slot >= m.last_sent.size()) throw std::logic_error("MpiDriver: a slot past the last full gather");
        double& last = m.last_sent[slot];
        const double now = static_cast<double>(xn[i]);
        if (std::fabs(now - last) > m.gather_threshold * std::fabs(last)) {
          moved[count++] = {slot, x[i], xn[i]};
          last = now;
        }
      }
    }
  }
  int head[2] = {intact ? 1 : 0, static_cast<int>(count)};
  std::vector<int> heads(m.rank == 0 ? 2 * static_cast<std::size_t>(m.ranks) : 0);
  std::vector<int> bytes, disp;
  Stopwatch watch(&m.times, /*count=*/false);
  watch.mpi([&] {
    check(MPI_Gather(head, 2, MPI_INT, heads.data(), 2, MPI_INT, 0, m.comm), "Gather");
  });
  const int unit = static_cast<int>(sizeof(Moved<Real>));
  if (m.rank == 0) {
    bytes.resize(m.ranks);
    disp.resize(m.ranks);
    int at = 0;
    for (int r = 0; r < m.ranks; ++r) {
      bytes[r] = heads[2 * r + 1] * unit;
      disp[r] = at;
      at += bytes[r];
    }
    m.rates_in.resize(static_cast<std::size_t>(at));
  }
  watch.mpi([&] {
    check(MPI_Gatherv(moved, static_cast<int>(count) * unit, MPI_BYTE, m.rates_in.data(),
                      bytes.data(), disp.data(), MPI_BYTE, 0, m.comm),
          "Gatherv");
  });
  if (m.rank != 0) return;
  for (int r = 1; r < m.ranks; ++r) {
    if (heads[2 * r] == 0) {
      throw std::runtime_error("MPI rank " + std::to_string(r) +
                               " could not replay the engine's changes: its mirror differs");
    }
    const auto& held = m.blocks_of(r, nb);
    const auto* in = reinterpret_cast<const Moved<Real>*>(m.rates_in.data() + disp[r]);
    // Entries come in slot order: walk the blocks alongside.
    std::size_t i = 0, first = 0;
    for (int k = 0; k < heads[2 * r + 1]; ++k) {
      while (i < held.size() && in[k].slot >= first + e.block_size(held[i])) first += e.block_size(held[i++]);
      if (i == held.size()) throw std::runtime_error("MPI rank " + std::to_string(r) + " sent a rate past its blocks");
      e.load_block_rate(held[i], in[k].slot - first, in[k].x, in[k].xn);
    }
    m.times.rates_received += static_cast<std::uint64_t>(heads[2 * r + 1]);
  }
}

template void MpiDriver::iterate(BasicEngine<float>&);
template void MpiDriver::iterate(BasicEngine<double>&);
template std::uint64_t MpiDriver::solve(BasicEngine<float>&, std::uint64_t);
template std::uint64_t MpiDriver::solve(BasicEngine<double>&, std::uint64_t);
template void MpiDriver::lead(BasicEngine<float>&, std::vector<std::uint8_t>*);
template void MpiDriver::lead(BasicEngine<double>&, std::vector<std::uint8_t>*);
template bool MpiDriver::follow(BasicEngine<float>&);
template bool MpiDriver::follow(BasicEngine<double>&);


}  // namespace flowtune::alloc
