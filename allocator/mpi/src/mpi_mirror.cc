// Mirrors (flowtune-allocator --mpi): rank 0 leads, sending its engine's
// journal (engine_journal.h); the other ranks replay it, iterate their
// blocks and gather their rates to rank 0, all of them or those that moved.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "flowtune/alloc/engine_journal.h"
#include "mpi_internal.h"

namespace flowtune::alloc {

using mpi_detail::check;
using mpi_detail::mpi_type;
using mpi_detail::Stopwatch;

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
  if (!(t >= 0 && t < 1))
    throw std::invalid_argument("MpiDriver: a gather threshold is within [0, 1)");
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
  const DriverView d(e);
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
      d.copy_block_rates(b, to, to + n);
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
      d.load_block_rates(b, in, in + n);
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
  const DriverView d(e);
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
      d.copy_block_rates(b, x, xn);
      for (std::size_t i = 0; i < n; ++i, ++slot) {
        if (slot >= m.last_sent.size())
          throw std::logic_error("MpiDriver: a slot past the last full gather");
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
  watch.mpi(
      [&] { check(MPI_Gather(head, 2, MPI_INT, heads.data(), 2, MPI_INT, 0, m.comm), "Gather"); });
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
      while (i < held.size() && in[k].slot >= first + e.block_size(held[i]))
        first += e.block_size(held[i++]);
      if (i == held.size())
        throw std::runtime_error("MPI rank " + std::to_string(r) + " sent a rate past its blocks");
      d.load_block_rate(held[i], in[k].slot - first, in[k].x, in[k].xn);
    }
    m.times.rates_received += static_cast<std::uint64_t>(heads[2 * r + 1]);
  }
}

template void MpiDriver::lead(BasicEngine<float>&, std::vector<std::uint8_t>*);
template void MpiDriver::lead(BasicEngine<double>&, std::vector<std::uint8_t>*);
template bool MpiDriver::follow(BasicEngine<float>&);
template bool MpiDriver::follow(BasicEngine<double>&);

}  // namespace flowtune::alloc
