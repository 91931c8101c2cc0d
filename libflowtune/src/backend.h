// What a client's calls (api.cc) hand their events to: the process's own
// runtime (runtime.h: a session with the allocator), or a link to the
// host agent that runs one session for every process of the host
// (agent_link.h).
#pragma once

#include <cstdint>

#include "event_queue.h"
#include "flowtune/flowtune.h"

namespace flowtune::client {

class Backend {
 public:
  virtual ~Backend() = default;
  // FT_OK, or an FT_E* code with nothing left open.
  virtual int start() = 0;
  // Ends what it reported, stops its thread and closes everything.
  virtual int stop() = 0;
  // Any thread. False when the queue is full (the event is dropped).
  virtual bool push(const Event& e, bool urgent) = 0;
  // Any thread: the thread looks at the table soon.
  virtual void wake() = 0;
  virtual ft_stats stats() const = 0;
};

}  // namespace flowtune::client
