// The link owners' exchange (Exchange::kLinkOwners, and kNeighbors with
// mpi_neighbors.cc): each rank owns a range of links and steps their prices
// from every block's entries.
#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "mpi_internal.h"

namespace flowtune::alloc {

using mpi_detail::check;
using mpi_detail::Entry;
using mpi_detail::kClassShift;
using mpi_detail::kLinkMask;
using mpi_detail::LayerLink;
using mpi_detail::split;
using mpi_detail::Stopwatch;

namespace {

// Per destination rank in the counts exchange: entries, class mask,
// requests, and this rank's requests in all.
constexpr int kInts = 4;

}  // namespace

// One iteration of the link owners' exchange: what its steps share (the
// rank's blocks, the classes the ranks agreed on, the MPI_Alltoallv over
// the ranks or the neighbour graph) and the steps themselves.
template <typename Real>
struct MpiDriver::Impl::OwnersRound {
  using View = DriverView<BasicEngine<Real>>;
  using Partial = typename View::LinkPartial;

  Impl& m;
  BasicEngine<Real>& e;
  View d;
  Stopwatch& watch;
  std::size_t links;
  std::uint32_t nl;
  int R;
  const std::vector<std::uint32_t>& mine;
  bool neighbors;
  std::array<std::uint32_t, kNumClasses> cls{}, pos_of{}, layer_of{};
  long all_requests = 0;

  OwnersRound(Impl& impl, BasicEngine<Real>& engine, Stopwatch& w)
      : m(impl),
        e(engine),
        d(engine),
        watch(w),
        links(engine.num_links()),
        nl(static_cast<std::uint32_t>(links)),
        R(impl.ranks),
        mine(prepared(impl, engine)),
        neighbors(impl.exchange == Exchange::kNeighbors) {}

  static const std::vector<std::uint32_t>& prepared(Impl& m, const BasicEngine<Real>& e) {
    if (e.num_links() > kLinkMask) throw std::length_error("MpiDriver: more than 2^28 links");
    m.set_links(e.num_links());
    const std::size_t nb = e.num_blocks();
    if (m.priced.size() != nb) m.priced.assign(nb, 0);
    return m.blocks_of(m.rank, nb);
  }

  // 1. What goes where. A block's copies only grow (links are added, never
  // dropped, while the block layout stays), so those past priced[b] are new.
  void count_entries() {
    m.counts_out.assign(kInts * static_cast<std::size_t>(R), 0);
    int requests = 0;
    for (const std::size_t b : mine) {
      const auto s = d.block_sums(b);
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
      m.counts_out[kInts * q + 1] = static_cast<int>(d.class_mask());
      m.counts_out[kInts * q + 3] = requests;
    }
  }

  // The counts all to all (kNeighbors: only when some rank's changed), and
  // the classes every rank then uses, in the same layers.
  void exchange_counts() {
    if (!neighbors || m.counts_changed(watch)) {
      m.counts_in.resize(kInts * static_cast<std::size_t>(R));
      watch.mpi([&] {
        check(MPI_Alltoall(m.counts_out.data(), kInts, MPI_INT, m.counts_in.data(), kInts, MPI_INT,
                           m.comm),
              "Alltoall");
      });
      ++m.times.counts_exchanges;
      if (neighbors) m.update_graph(watch, kInts);
    }
    std::uint32_t mask = 0;
    for (int q = 0; q < R; ++q) {
      mask |= static_cast<std::uint32_t>(m.counts_in[kInts * q + 1]);
      all_requests += m.counts_in[kInts * q + 3];
    }
    d.use_classes(mask);
    for (std::uint32_t lay = 0; lay < d.num_layers(); ++lay) {
      cls[lay] = d.class_of_layer(lay);
      layer_of[cls[lay]] = lay;
    }
    std::uint32_t i = 0;
    for (std::uint8_t c : e.classes()) pos_of[c] = i++;
  }

  // MPI_Alltoallv of items of `unit` bytes, rank q's at item offsets
  // out_at[q]..out_at[q + 1] (sent) and in_at[q]..in_at[q + 1] (received).
  void alltoallv(const void* out, const std::vector<int>& out_at, void* in,
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
  }
  void offsets(const std::vector<int>& counts, int field, std::vector<int>* at) const {
    at->assign(R + 1, 0);
    for (int q = 0; q < R; ++q) (*at)[q + 1] = (*at)[q] + counts[kInts * q + field];
  }
  std::uint32_t key_of(std::uint32_t v) const {
    const LayerLink x = split(v, nl);
    return cls[x.layer] << kClassShift | x.link;
  }
  std::uint32_t here(std::uint32_t key) const {
    return layer_of[key >> kClassShift] * nl + (key & kLinkMask);
  }

  // 2. Current prices of the links new to this rank's blocks.
  void fetch_new_prices() {
    offsets(m.counts_out, 2, &m.send_at);
    offsets(m.counts_in, 2, &m.recv_at);
    m.asked_keys.resize(static_cast<std::size_t>(m.send_at[R]));
    m.asked_links.resize(m.asked_keys.size());
    m.fill.assign(m.send_at.begin(), m.send_at.end() - 1);
    for (const std::size_t b : mine) {
      const auto s = d.block_sums(b);
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
    d.save_links(m.keys_in.data(), m.keys_in.size(), reinterpret_cast<Real*>(m.answers_out.data()));
    const int answer = static_cast<int>(2 * sizeof(Real));
    alltoallv(m.answers_out.data(), m.recv_at, m.answers_in.data(), m.send_at, answer);
    d.load_links(m.asked_links.data(), m.asked_links.size(),
                 reinterpret_cast<const Real*>(m.answers_in.data()));
    for (int q = 0; q < R; ++q) {
      if (q == m.rank) continue;
      m.times.bytes_sent += static_cast<std::uint64_t>(m.counts_out[kInts * q + 2]) * 4 +
                            static_cast<std::uint64_t>(m.counts_in[kInts * q + 2]) * answer;
    }
  }

  // 4. Entries to the links' owners, and the link each came from (where
  // its answer goes).
  void send_entries() {
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
      const auto s = d.block_sums(b);
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
  }

  // This rank's links: the blocks' sums in block order, as the
  // single-process engine adds them, and their price steps; and each
  // entry's link here.
  Partial step_owned_links() {
    const auto received = static_cast<std::size_t>(m.recv_at[R]);
    const std::size_t layers = d.num_layers();
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
    return d.update_links_from(lo, hi, yh);
  }

  // 5-6. The answers: for every entry received, its link's price and
  // ratio, loaded where the entries came from; the owners' stats.
  void answer(const Partial& part) {
    const auto sent = static_cast<std::size_t>(m.send_at[R]);
    const auto received = static_cast<std::size_t>(m.recv_at[R]);
    m.answers_out.resize(2 * received * sizeof(Real));
    m.answers_in.resize(2 * sent * sizeof(Real));
    d.save_links(m.recv_links.data(), received, reinterpret_cast<Real*>(m.answers_out.data()));
    const int answer = static_cast<int>(2 * sizeof(Real));
    alltoallv(m.answers_out.data(), m.recv_at, m.answers_in.data(), m.send_at, answer);
    std::array<double, 3> stats{part.max_residual, part.max_raw_utilization, part.max_ratio}, all{};
    watch.mpi([&] {
      check(MPI_Allreduce(stats.data(), all.data(), 3, MPI_DOUBLE, MPI_MAX, m.comm), "Allreduce");
    });
    for (int q = 0; q < R; ++q) {
      if (q == m.rank) continue;
      m.times.bytes_sent +=
          static_cast<std::uint64_t>(m.counts_out[kInts * q]) * sizeof(Entry<Real>) +
          static_cast<std::uint64_t>(m.counts_in[kInts * q]) * 2 * sizeof(Real);
    }
    d.load_links(m.sent_links.data(), sent, reinterpret_cast<const Real*>(m.answers_in.data()));
    d.finish_links({all[0], all[1], all[2]});
  }
};

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
  Stopwatch watch(&impl_->times);
  Impl::OwnersRound<Real> round(*impl_, e, watch);
  const auto& d = round.d;
  round.count_entries();
  round.exchange_counts();
  if (round.all_requests > 0) round.fetch_new_prices();
  // 3. Rates.
  for (const std::size_t b : round.mine) d.rate_pass(b);
  round.send_entries();
  round.answer(round.step_owned_links());
  for (const std::size_t b : round.mine) d.normalize_pass(b);
}

template void MpiDriver::iterate_link_owners(BasicEngine<float>&);
template void MpiDriver::iterate_link_owners(BasicEngine<double>&);

}  // namespace flowtune::alloc
