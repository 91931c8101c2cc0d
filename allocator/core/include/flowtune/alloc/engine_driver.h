// What a driver of the rate engine reaches into: the steps of one
// iteration, run over many threads (allocator/parallel), and the link sums,
// prices and rates that processes exchange when FlowBlocks are spread over
// them (allocator/mpi). Callers that only add flows, iterate and read rates
// need engine.h alone.
//
// A DriverView is a reference to an engine that opens these steps; it owns
// nothing and costs nothing (every call is inline and forwards to the
// engine):
//
//   DriverView d(engine);
//   d.prepare();
//   for (std::size_t b = 0; b < engine.num_blocks(); ++b) d.rate_pass(b);
//
// A view of a const engine opens only the const steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "flowtune/alloc/engine.h"

namespace flowtune::alloc {

// E is BasicEngine<Real> or const BasicEngine<Real>.
template <typename E>
class DriverView {
 public:
  using Real = typename std::remove_const_t<E>::value_type;
  using Engine = std::remove_const_t<E>;

  explicit DriverView(E& engine) : e_(engine) {}

  E& engine() const { return e_; }

  // ---- Steps of one iteration (allocator/parallel). ----
  // Order: prepare(); rate_pass(b) for every block; update_links(l0, l1) over
  // disjoint ranges covering all links; finish_links(partials);
  // normalize_pass(b) for every block. Blocks and link ranges of one step may
  // run concurrently. What the link steps found, combined over ranges with
  // combine():
  //   struct LinkPartial { double max_residual, max_raw_utilization, max_ratio; };
  using LinkPartial = typename Engine::LinkPartial;
  void prepare() const { e_.prepare(); }
  void rate_pass(std::size_t b) const { e_.rate_pass(b); }
  LinkPartial update_links(std::size_t link_begin, std::size_t link_end) const {
    return e_.update_links(link_begin, link_end);
  }
  void finish_links(const LinkPartial& combined) const { e_.finish_links(combined); }
  void normalize_pass(std::size_t b) const { e_.normalize_pass(b); }
  static LinkPartial combine(const LinkPartial& a, const LinkPartial& b) {
    return Engine::combine(a, b);
  }

  // ---- For a driver that spreads FlowBlocks over processes (allocator/mpi):
  // each process holds the same links and some blocks' flows; every
  // iteration the blocks' link sums meet and every process ends with the
  // same prices and ratios. The processes' engines must hold the same
  // classes' layers (an engine makes one when a flow first uses the class,
  // so in its own order): class_mask() (bit c: class c) and use_classes()
  // (makes the layers missing, prices kInitialPrice, as add_flow would).
  // Links in class order: layer i of the classes in use (highest first)
  // and link l are entry i * num_links() + l, the same in every process
  // that uses the same classes, whatever order it made its layers in
  // (unlike virtual links: layer * num_links() + link).
  std::uint32_t class_mask() const { return e_.class_mask(); }
  void use_classes(std::uint32_t mask) const { e_.use_classes(mask); }
  std::size_t num_layers() const { return e_.num_layers(); }
  // Virtual link v (block_sums()) is link v % num_links() of layer
  // v / num_links(), which holds this class.
  std::uint8_t class_of_layer(std::uint32_t layer) const { return e_.class_of_layer(layer); }
  // Block b's private sums after its rate_pass(b): for each of the size
  // virtual links it keeps a copy of (those its departed flows used too),
  // Σ x and Σ -dx/dP of its flows, yh[2i] and yh[2i + 1], internal units.
  // Valid until the next add_flow/remove_flow.
  //   struct BlockSums { const LinkId* links; const Real* yh; std::size_t size; };
  using BlockSums = typename Engine::BlockSums;
  BlockSums block_sums(std::size_t b) const { return e_.block_sums(b); }
  // The sums of this engine's blocks (in block order) for every link in
  // class order, into yh (2 * num_layers() * num_links() values).
  void sum_blocks(Real* yh) const { e_.sum_blocks(yh); }
  // update_links(begin, end) from sums given in sum_blocks()'s layout.
  LinkPartial update_links_from(std::size_t begin, std::size_t end, const Real* yh) const {
    return e_.update_links_from(begin, end, yh);
  }
  // The same over n global links listed (any order, none twice): a
  // process that steps the prices of links scattered over the id range.
  LinkPartial update_listed_links_from(const LinkId* links, std::size_t n, const Real* yh) const {
    return e_.update_listed_links_from(links, n, yh);
  }
  // The price and F-NORM ratio of each of n virtual links, out[2i] and
  // out[2i + 1]: what one process's update_links_from() computed, for the
  // processes whose blocks keep copies of those links to load.
  void save_links(const std::uint32_t* virtual_links, std::size_t n, Real* out) const {
    e_.save_links(virtual_links, n, out);
  }
  void load_links(const std::uint32_t* virtual_links, std::size_t n, const Real* in) const {
    e_.load_links(virtual_links, n, in);
  }
  // The FlowBlock a flow between these sites is placed in now.
  std::uint32_t block_of_sites(std::uint32_t src_site, std::uint32_t dst_site) const {
    return e_.block_of_sites(src_site, dst_site);
  }

  // ---- Mirrors: engines in other processes that hold the same flows
  // (allocator/mpi, flowtune-allocator --mpi). The changes travel as a
  // journal (engine_journal.h); the rates computed elsewhere are loaded
  // here.
  // Block b's raw and normalized rates (block_size(b) each), out and in:
  // the process that computed a block hands its rates to one that did not.
  void copy_block_rates(std::size_t b, Real* x, Real* xn) const { e_.copy_block_rates(b, x, xn); }
  void load_block_rates(std::size_t b, const Real* x, const Real* xn) const {
    e_.load_block_rates(b, x, xn);
  }
  // One slot's (i < block_size(b)), for a process handed only the rates
  // that moved.
  void load_block_rate(std::size_t b, std::size_t i, Real x, Real xn) const {
    e_.load_block_rate(b, i, x, xn);
  }

 private:
  E& e_;
};

}  // namespace flowtune::alloc
