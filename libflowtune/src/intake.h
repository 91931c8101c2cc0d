// The runtime side of the application's events: the bounded event queue
// and the socket table's slots (events past a full queue, and
// unregistrations), taken in the order the application made them and
// handed to a sink. The endpoint runtime's sink is its Session; a process
// served by a host agent forwards them to the agent (agent_link.h).
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "event_queue.h"
#include "pacing.h"
#include "policy.h"

namespace flowtune::client {

// Where the application's events go, in order, one socket at a time.
class IntakeSink {
 public:
  virtual ~IntakeSink() = default;
  virtual void on_register(SocketRef s, const wire::FiveTuple& tuple, std::uint32_t mss,
                           const FlowletPolicy& defaults, std::uint64_t now_us) = 0;
  virtual void on_unregister(SocketRef s, std::uint64_t now_us) = 0;
  virtual void on_begin(SocketRef s, std::uint64_t bytes,
                        const std::optional<FlowletPolicy>& policy, std::uint64_t now_us) = 0;
  virtual void on_sent(SocketRef s, std::uint64_t bytes, std::uint64_t now_us) = 0;
  virtual void on_wrote(SocketRef s, std::uint64_t bytes, std::uint64_t now_us) = 0;
  // An end the application asked for.
  virtual void on_end(SocketRef s, std::uint64_t now_us) = 0;
  // The answer to a look that could not be answered at once (an agent's
  // client answers later): unsent bytes, and a write call in progress.
  virtual void on_unsent(SocketRef s, std::uint64_t unsent, bool writing, std::uint64_t now_us) = 0;
};

class Intake {
 public:
  Intake(EventQueue& queue, SocketTable& table) : queue_(queue), table_(table) {}

  // Takes what the table's slots and the queue hold and hands it to sink.
  // True if anything was taken.
  bool drain(std::uint64_t now_us, IntakeSink& sink);
  // A swept batch waits for a producer to finish writing its queue cell.
  bool waiting() const { return !swept_.empty(); }
  // The registrations handed to the sink and not yet unregistered.
  const std::unordered_map<int, std::uint32_t>& known() const { return known_; }

 private:
  void dispatch(const Event& e, std::uint64_t now, IntakeSink& sink);
  void apply_spill(int fd, const SocketTable::Spilled& p, std::uint64_t now, IntakeSink& sink);
  void apply_swept(std::uint64_t now, IntakeSink& sink);
  // Unregisters the sink's registration of fd if the table no longer
  // holds it.
  void reconcile(int fd, std::uint64_t now, IntakeSink& sink);

  EventQueue& queue_;
  SocketTable& table_;
  // The registration the sink holds for each fd (fd -> generation), to
  // compare with the table when a slot is dirty.
  std::unordered_map<int, std::uint32_t> known_;
  // What a sweep took from a socket's slot (spilled events, an
  // unregistration), applied once the queue has been popped up to
  // `horizon`: the queue's claim position when the sweep saw it, past every
  // event the socket queued before it.
  struct Swept {
    int fd;
    SocketTable::Spilled events;
    std::uint64_t horizon;
  };
  std::vector<Swept> swept_;
};

}  // namespace flowtune::client
