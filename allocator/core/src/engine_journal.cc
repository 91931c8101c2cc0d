#include "flowtune/alloc/engine_journal.h"

#include <cstring>

namespace flowtune::alloc {
namespace {

// A record's first byte. The values are the journal's format: both ends
// are the same build, but keep them as they are.
enum class Op : std::uint8_t { kAdd = 1, kRemove, kLimits, kFloor, kPrice, kCompact, kBlocks };
constexpr std::uint8_t byte(Op op) { return static_cast<std::uint8_t>(op); }

// Reads a journal's records one field at a time.
struct Reader {
  const std::uint8_t* data;
  std::size_t size;
  std::size_t at = 0;

  template <typename T>
  bool get(T& v) {
    if (size - at < sizeof v) return false;
    std::memcpy(&v, data + at, sizeof v);
    at += sizeof v;
    return true;
  }
};

template <typename Real>
bool replay_add(BasicEngine<Real>& e, Reader& in) {
  FlowId id = 0;
  FlowSpec f;
  if (!in.get(id) || !in.get(f.path.size) || !in.get(f.path.links) || !in.get(f.weight) ||
      !in.get(f.max_bps) || !in.get(f.src_site) || !in.get(f.dst_site) || !in.get(f.priority)) {
    return false;
  }
  return e.check_flow(f) == FlowError::kOk && e.add_flow(f) == id;
}

// One record after its op byte; false where it cannot be read or made.
template <typename Real>
bool replay_one(BasicEngine<Real>& e, Op op, Reader& in) {
  FlowId id = 0;
  double a = 0, b = 0;
  std::uint32_t u = 0;
  std::uint8_t c = 0;
  switch (op) {
    case Op::kAdd:
      return replay_add(e, in);
    case Op::kRemove:
      if (!in.get(id) || !e.has_flow(id)) return false;
      e.remove_flow(id);
      return true;
    case Op::kLimits:
      if (!in.get(id) || !in.get(a) || !in.get(b) || !e.has_flow(id)) return false;
      (void)e.set_limits(id, a, b);
      return true;
    case Op::kFloor:
      if (!in.get(id) || !in.get(a) || !e.has_flow(id)) return false;
      (void)e.set_floor(id, a);
      return true;
    case Op::kPrice:
      if (!in.get(u) || !in.get(a) || !in.get(c) || u >= e.num_links() || c >= kNumClasses)
        return false;
      e.set_price(u, a, c);
      return true;
    case Op::kCompact:
      e.compact();
      return true;
    case Op::kBlocks:
      if (!in.get(u) || u == 0 || u > 64) return false;
      (void)e.set_blocks(u);
      return true;
  }
  return false;
}

}  // namespace

template <typename Real>
bool replay_journal(BasicEngine<Real>& e, const std::uint8_t* data, std::size_t size) {
  Reader in{data, size};
  while (in.at < size) {
    Op op;
    if (!in.get(op) || !replay_one(e, op, in)) return false;
  }
  return true;
}

// A record is the op byte and its arguments, memcpy'd.
template <typename Real>
template <typename... Args>
void JournaledEngine<Real>::record(std::uint8_t op, const Args&... args) {
  auto put = [this](const auto& v) {
    const auto* b = reinterpret_cast<const std::uint8_t*>(&v);
    journal_->insert(journal_->end(), b, b + sizeof v);
  };
  put(op);
  (put(args), ...);
}

template <typename Real>
FlowId JournaledEngine<Real>::add_flow(const FlowSpec& f) {
  const FlowId id = BasicEngine<Real>::add_flow(f);
  if (journal_ != nullptr) {
    record(byte(Op::kAdd), id, f.path.size, f.path.links, f.weight, f.max_bps, f.src_site,
           f.dst_site, f.priority);
  }
  return id;
}

template <typename Real>
void JournaledEngine<Real>::remove_flow(FlowId id) {
  if (journal_ != nullptr) record(byte(Op::kRemove), id);
  BasicEngine<Real>::remove_flow(id);
}

template <typename Real>
FlowError JournaledEngine<Real>::set_limits(FlowId id, double weight, double max_bps) {
  if (journal_ != nullptr) record(byte(Op::kLimits), id, weight, max_bps);
  return BasicEngine<Real>::set_limits(id, weight, max_bps);
}

template <typename Real>
bool JournaledEngine<Real>::set_floor(FlowId id, double floor_bps) {
  if (journal_ != nullptr) record(byte(Op::kFloor), id, floor_bps);
  return BasicEngine<Real>::set_floor(id, floor_bps);
}

template <typename Real>
void JournaledEngine<Real>::set_price(LinkId l, double p, std::uint8_t priority) {
  if (journal_ != nullptr) record(byte(Op::kPrice), l, p, priority);
  BasicEngine<Real>::set_price(l, p, priority);
}

template <typename Real>
void JournaledEngine<Real>::compact() {
  if (journal_ != nullptr) record(byte(Op::kCompact));
  BasicEngine<Real>::compact();
}

template <typename Real>
bool JournaledEngine<Real>::set_blocks(std::uint32_t blocks) {
  if (journal_ != nullptr) record(byte(Op::kBlocks), blocks);
  return BasicEngine<Real>::set_blocks(blocks);
}

template class JournaledEngine<float>;
template class JournaledEngine<double>;
template bool replay_journal(BasicEngine<float>&, const std::uint8_t*, std::size_t);
template bool replay_journal(BasicEngine<double>&, const std::uint8_t*, std::size_t);

}  // namespace flowtune::alloc
