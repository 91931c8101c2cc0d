// The diagonal exchange (Exchange::kDiagonal, paper §4, Fig. 5): the
// LinkBlocks summed onto the grid's diagonals in log2(side) steps, the
// price steps there, and the answers back the same way.
#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mpi_internal.h"

namespace flowtune::alloc {

using mpi_detail::check;
using mpi_detail::LayerLink;
using mpi_detail::mpi_type;
using mpi_detail::split;
using mpi_detail::Stopwatch;

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
    if (top != left)
      s.send_up = at(row, top ? col - m : col + m);
    else
      s.recv_up = at(row, top ? col + m : col - m);
  }
  // Downward sums gather on the secondary diagonal, within each column: the
  // diagonal quadrants' secondary diagonals hand theirs up or down.
  if (sr + sc == m - 1) {
    if (top == left)
      s.send_down = at(top ? row + m : row - m, col);
    else
      s.recv_down = at(top ? row + m : row - m, col);
  }
  return s;
}

}  // namespace

// One iteration over the grid: what its steps share (the rank's cell,
// its two LinkBlocks' sums and answers) and the steps themselves.
template <typename Real>
struct MpiDriver::Impl::DiagonalRound {
  using View = DriverView<BasicEngine<Real>>;
  using Partial = typename View::LinkPartial;

  Impl& m;
  BasicEngine<Real>& e;
  View d;
  Stopwatch& watch;
  std::size_t links;
  std::uint32_t nl;
  int n, row, col;
  std::size_t layers = 0, nu = 0, nd = 0;
  std::array<std::uint32_t, kNumClasses> pos_of{};
  Real* up = nullptr;
  Real* down = nullptr;
  int up_count = 0, down_count = 0;

  DiagonalRound(Impl& impl, BasicEngine<Real>& engine, Stopwatch& w)
      : m(impl),
        e(engine),
        d(engine),
        watch(w),
        links(engine.num_links()),
        nl(static_cast<std::uint32_t>(links)),
        n(impl.side),
        row(impl.row),
        col(impl.col) {}

  // The classes every rank uses, in the same layers.
  void agree_on_classes() {
    if (m.link_sites.size() != links) {
      throw std::logic_error(
          "MpiDriver: the diagonal exchange needs every link's site (set_link_sites), " +
          std::to_string(m.link_sites.size()) + " given for " + std::to_string(links) + " links");
    }
    std::uint32_t mask = d.class_mask(), all_mask = 0;
    watch.mpi([&] {
      check(MPI_Allreduce(&mask, &all_mask, 1, MPI_UINT32_T, MPI_BOR, m.comm), "Allreduce");
    });
    d.use_classes(all_mask);
  }

  // This rank's row's upward and column's downward LinkBlocks, made again
  // when the links or the block layout changed.
  void place_links() {
    const std::uint32_t layout = e.blocks_per_side();
    if (m.diag_links == links && m.diag_layout == layout) return;
    // A site's group: its block along one side, scaled to the grid's.
    auto group = [&](std::uint32_t site) {
      return static_cast<int>(std::size_t{d.block_of_sites(site, site) / layout} *
                              static_cast<std::size_t>(n) / layout);
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

  // Both LinkBlocks' virtual links, layer by layer in class order (where
  // the answers load), and their sums' arrays, zeroed.
  void lay_out_sums() {
    layers = d.num_layers();
    nu = m.up_links.size();
    nd = m.down_links.size();
    std::uint32_t i = 0;
    for (std::uint8_t c : e.classes()) pos_of[c] = i++;
    m.up_virtual.resize(layers * nu);
    m.down_virtual.resize(layers * nd);
    for (std::uint32_t lay = 0; lay < layers; ++lay) {
      const std::size_t pos = pos_of[d.class_of_layer(lay)];
      for (std::size_t k = 0; k < nu; ++k) m.up_virtual[pos * nu + k] = lay * nl + m.up_links[k];
      for (std::size_t k = 0; k < nd; ++k)
        m.down_virtual[pos * nd + k] = lay * nl + m.down_links[k];
    }
    up = Impl::room<Real>(m.up_sums, 2 * layers * nu);
    down = Impl::room<Real>(m.down_sums, 2 * layers * nd);
    std::fill(up, up + 2 * layers * nu, Real{0});
    std::fill(down, down + 2 * layers * nd, Real{0});
    up_count = static_cast<int>(2 * layers * nu);
    down_count = static_cast<int>(2 * layers * nd);
  }

  // Block b's rate pass, and its sums into this rank's LinkBlocks.
  void rate_and_sum(std::size_t b) {
    d.rate_pass(b);
    const auto s = d.block_sums(b);
    for (std::size_t i = 0; i < s.size; ++i) {
      const LayerLink v = split(s.links[i], nl);
      const LinkSite site = m.link_sites[v.link];
      const std::uint32_t at = m.place[v.link];
      if (at == kNowhere) {
        throw std::logic_error("MpiDriver: a block holds link " + std::to_string(v.link) +
                               ", outside its row's upward and its column's downward LinkBlocks");
      }
      const std::size_t pos = pos_of[d.class_of_layer(v.layer)];
      Real* to = site.up ? up + 2 * (pos * nu + at) : down + 2 * (pos * nd + at);
      to[0] += s.yh[2 * i];
      to[1] += s.yh[2 * i + 1];
    }
  }

  // One step's sends and receives, `answers` the other way round: the
  // arrays are (sum or answer) pairs per layer and link, the same size at
  // both ends of a row's or a column's exchange.
  void exchange(int group, bool answers) {
    Real* up_in = Impl::room<Real>(
        m.step_in, static_cast<std::size_t>(up_count) + static_cast<std::size_t>(down_count));
    Real* down_in = up_in + up_count;
    DiagonalStep st = diagonal_step(row, col, group, [this](int r, int c) { return m.at(r, c); });
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
        check(MPI_Irecv(answers ? up : up_in, up_count, type, st.recv_up, kUp, m.comm, &req[k++]),
              "Irecv");
      }
      if (st.recv_down >= 0) {
        check(MPI_Irecv(answers ? down : down_in, down_count, type, st.recv_down, kDown, m.comm,
                        &req[k++]),
              "Irecv");
      }
      if (st.send_up >= 0)
        check(MPI_Isend(up, up_count, type, st.send_up, kUp, m.comm, &req[k++]), "Isend");
      if (st.send_down >= 0)
        check(MPI_Isend(down, down_count, type, st.send_down, kDown, m.comm, &req[k++]), "Isend");
      check(MPI_Waitall(k, req.data(), MPI_STATUSES_IGNORE), "Waitall");
    });
    m.times.bytes_sent += static_cast<std::uint64_t>((st.send_up >= 0 ? up_count : 0) +
                                                     (st.send_down >= 0 ? down_count : 0)) *
                          sizeof(Real);
    m.times.arrays_sent += static_cast<std::uint64_t>((st.send_up >= 0) + (st.send_down >= 0));
    if (answers) return;
    if (st.recv_up >= 0) {
      for (int i = 0; i < up_count; ++i) up[i] += up_in[i];
    }
    if (st.recv_down >= 0) {
      for (int i = 0; i < down_count; ++i) down[i] += down_in[i];
    }
  }

  // The price steps of one LinkBlock's links from its summed array, whose
  // answers are written over it.
  void step_prices(const std::vector<LinkId>& list, Real* sums,
                   const std::vector<std::uint32_t>& virtual_links, Partial* part) {
    Real* yh = m.sums<Real>(2 * layers * links);
    const std::size_t count = list.size();
    for (std::size_t pos = 0; pos < layers; ++pos) {
      for (std::size_t i = 0; i < count; ++i) {
        yh[2 * (pos * links + list[i])] = sums[2 * (pos * count + i)];
        yh[2 * (pos * links + list[i]) + 1] = sums[2 * (pos * count + i) + 1];
      }
    }
    *part = View::combine(*part, d.update_listed_links_from(list.data(), count, yh));
    d.save_links(virtual_links.data(), virtual_links.size(), sums);
  }

  // The stats' Allreduce over the diagonals' parts.
  void finish(const Partial& part) {
    std::array<double, 3> stats{part.max_residual, part.max_raw_utilization, part.max_ratio}, all{};
    watch.mpi([&] {
      check(MPI_Allreduce(stats.data(), all.data(), 3, MPI_DOUBLE, MPI_MAX, m.comm), "Allreduce");
    });
    d.finish_links({all[0], all[1], all[2]});
  }
};

// One iteration over the grid: rate passes, the LinkBlocks summed onto the
// diagonals in log2(side) steps, the price steps there, and the answers
// back the same way; then the stats' Allreduce and normalization.
template <typename Real>
void MpiDriver::iterate_diagonal(BasicEngine<Real>& e) {
  Impl& m = *impl_;
  Stopwatch watch(&m.times);
  Impl::DiagonalRound<Real> round(m, e, watch);
  const auto& d = round.d;
  round.agree_on_classes();
  round.place_links();
  round.lay_out_sums();
  d.prepare();
  const auto& mine = m.blocks_of(m.rank, e.num_blocks());
  for (const std::size_t b : mine) round.rate_and_sum(b);
  const int n = m.side;
  for (int step = 1; step < n; step *= 2) round.exchange(step, false);
  // The diagonals' price steps: rank (i, i) holds row i's upward sums,
  // rank (n-1-j, j) column j's downward ones (both, where they meet).
  typename Impl::DiagonalRound<Real>::Partial part;
  if (m.row == m.col) round.step_prices(m.up_links, round.up, m.up_virtual, &part);
  if (m.row + m.col == n - 1) round.step_prices(m.down_links, round.down, m.down_virtual, &part);
  for (int step = n / 2; step >= 1; step /= 2) round.exchange(step, true);
  d.load_links(m.up_virtual.data(), m.up_virtual.size(), round.up);
  d.load_links(m.down_virtual.data(), m.down_virtual.size(), round.down);
  round.finish(part);
  for (const std::size_t b : mine) d.normalize_pass(b);
}

template void MpiDriver::iterate_diagonal(BasicEngine<float>&);
template void MpiDriver::iterate_diagonal(BasicEngine<double>&);

}  // namespace flowtune::alloc
