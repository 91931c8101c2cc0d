// What the library does at fork(). Registered once, when the library is
// loaded (never from a call that may race a fork):
// - every child gets a new fork generation, so a client opened before the
//   fork answers FT_EFORKED there (its runtime thread does not exist);
// - a fork waits for the runtime threads that are creating or destroying
//   their ZeroMQ context. libzmq and libsodium take process-wide locks
//   there; a child forked while one was held would hang forever at its own
//   first client, since the thread that held it does not exist there.
// The wait is bounded by those calls (a context's creation takes
// microseconds; its end waits at most the 200 ms linger of a client whose
// allocator answered), and shields wait for a pending fork, so a fork is
// never starved. CURVE's key derivation takes libzmq's random state too
// and is shielded as well. A prepare handler registered after ours (so
// run before it) that holds a lock a context's end needs would deadlock a
// fork against it; we know of none in the libraries the runtime uses.
#pragma once

#include <cstdint>

namespace flowtune::client {

// The current fork generation (0 in the first process).
std::uint64_t fork_generation();

// Held around calls that take a process-wide lock of a library below us;
// forks wait for it. Shared: runtimes of several clients do not wait for
// each other.
class ForkShield {
 public:
  ForkShield();
  ~ForkShield();
  ForkShield(const ForkShield&) = delete;
  ForkShield& operator=(const ForkShield&) = delete;
};

}  // namespace flowtune::client
