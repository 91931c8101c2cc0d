#include "intake.h"

#include <utility>

namespace flowtune::client {

void Intake::reconcile(int fd, std::uint64_t now, IntakeSink& sink) {
  const auto it = known_.find(fd);
  if (it == known_.end()) return;
  const auto cur = table_.lookup(fd);
  if (cur && cur->gen == it->second) return;
  sink.on_unregister(SocketRef{fd, it->second}, now);
  known_.erase(it);
}

void Intake::dispatch(const Event& e, std::uint64_t now, IntakeSink& sink) {
  switch (e.kind) {
    case Event::kRegister: {
      // Taken up even if already released, so the events queued behind it
      // count (a flowlet begun is reported and then ended). Its
      // unregistration is applied only once swept (drain() sweeps before it
      // pops, so every event queued before the release is dispatched first):
      // a release seen any other way, say in the table while the queue still
      // holds the socket's later events, would drop them.
      const auto old = known_.find(e.ref.fd);
      if (old != known_.end() && old->second != e.ref.gen) {
        sink.on_unregister(SocketRef{e.ref.fd, old->second}, now);  // replaced
      }
      sink.on_register(e.ref, e.tuple, e.mss, e.policy.value_or(FlowletPolicy{}), now);
      known_[e.ref.fd] = e.ref.gen;
      return;
    }
    case Event::kUnregister: {
      const auto it = known_.find(e.ref.fd);
      if (it != known_.end() && it->second == e.ref.gen) known_.erase(it);
      sink.on_unregister(e.ref, now);
      return;
    }
    case Event::kBegin:
      sink.on_begin(e.ref, e.bytes, e.policy, now);
      return;
    case Event::kSent:
      sink.on_sent(e.ref, e.bytes, now);
      return;
    case Event::kWrote: {
      const std::uint64_t bytes = e.bytes + table_.take_unreported(e.ref);
      if (bytes != 0) sink.on_wrote(e.ref, bytes, now);
      return;
    }
    case Event::kEnd:
      sink.on_end(e.ref, now);
      return;
    case Event::kUnsent:
      sink.on_unsent(e.ref, e.bytes, e.writing, now);
      return;
  }
}

void Intake::apply_spill(int fd, const SocketTable::Spilled& p, std::uint64_t now,
                         IntakeSink& sink) {
  const auto it = known_.find(fd);
  if (p.gen == 0 || it == known_.end() || it->second != p.gen) return;
  const SocketRef ref{fd, p.gen};
  if (p.end_first) sink.on_end(ref, now);
  if (p.begin_bytes != 0) sink.on_begin(ref, p.begin_bytes, p.policy, now);
  if (p.sent != 0) sink.on_sent(ref, p.sent, now);
  const std::uint64_t wrote = p.wrote + (p.collect ? table_.take_unreported(ref) : 0);
  if (wrote != 0) sink.on_wrote(ref, wrote, now);
  if (p.end_last) sink.on_end(ref, now);
}

bool Intake::drain(std::uint64_t now, IntakeSink& sink) {
  // Spilled events and unregistrations are taken before the queue is drained
  // and applied after it: a socket spills only once an event of it found the
  // queue full, and unregisters after its last event, so whatever the queue
  // holds for it came first. "After" means up to the queue position claimed
  // when the sweep saw the slot: pop() stops at a cell another producer has
  // claimed but not yet written, and the socket's own events may sit behind
  // it (applying the unregistration then dropped them). The socket keeps
  // spilling until finish_spill, so nothing of it enters the queue meanwhile.
  const std::size_t first_new = swept_.size();
  table_.sweep([&](int fd) { swept_.push_back({fd, table_.take_spill(fd), 0}); });
  const std::uint64_t horizon = queue_.claimed();
  for (std::size_t i = first_new; i < swept_.size(); ++i) swept_[i].horizon = horizon;
  Event e;
  bool took = swept_.size() > first_new;
  while (queue_.pop(&e)) {
    dispatch(e, now, sink);
    took = true;
  }
  apply_swept(now, sink);
  return took;
}

void Intake::apply_swept(std::uint64_t now, IntakeSink& sink) {
  const std::uint64_t popped = queue_.popped();
  std::vector<Swept> waiting;
  auto waits = [&](int fd) {
    for (const Swept& w : waiting) {
      if (w.fd == fd) return true;
    }
    return false;
  };
  for (std::size_t i = 0; i < swept_.size(); ++i) {
    Swept& b = swept_[i];
    // In order per socket: a later batch waits behind an earlier one.
    if (popped < b.horizon || waits(b.fd)) {
      waiting.push_back(std::move(b));
      continue;
    }
    reconcile(b.fd, now, sink);
    apply_spill(b.fd, b.events, now, sink);
    bool later = false;
    for (std::size_t j = i + 1; j < swept_.size() && !later; ++j) later = swept_[j].fd == b.fd;
    if (!later) table_.finish_spill(b.fd);
  }
  swept_.swap(waiting);
}

}  // namespace flowtune::client
