// The Server's heap trimming: memory a burst left resident is handed back
// to the system on quiet turns (Server::return_memory).
#include "flowtune/daemon/server.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "allocator_internal.h"
#include "server_internal.h"

namespace flowtune::daemon {

using detail::steady_ns;

namespace {

// Resident bytes of this process (/proc/self/statm), -1 if unreadable (as
// when a connection storm has used up the descriptors).
std::int64_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "re");
  if (f == nullptr) return -1;
  long size = 0, resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<std::int64_t>(resident) * ::sysconf(_SC_PAGESIZE) : -1;
}

}  // namespace

// Memory freed after a burst (a flood's flows and endpoints, libzmq's
// buffers after a connection storm, bombs queued before they were refused)
// stays resident with glibc: heap holes and the I/O thread's arena are not
// given back on their own (a storm of 1,000 connections left 57 MB, idle
// 8 MB). On a turn that is not iterating, at most every kMemoryCheckUs, the
// loop weighs what is resident but not in use by the heap (statm less
// mallinfo2's in-use bytes) and, once that is kTrimFreeBytes above the
// least it has been since the last trim, hands the free pages back
// (malloc_trim). Both walk the heap's free chunks: 0.1-0.5 ms typically,
// 10 ms and more on a heap left in tens of thousands of pieces, hence the
// long period (the turn's replies have gone out by then). Before weighing,
// tables left mostly empty by a burst are shrunk (Allocator::
// compact_if_sparse), and what that frees is handed back at once.
void Server::return_memory(std::uint64_t now) {
  if (now < next_memory_check_us_) return;
  next_memory_check_us_ = now + kMemoryCheckUs;
  const std::int64_t t0 = steady_ns();
  trim_if_worth_it(now, allocator_.compact_if_sparse());
  allocator_.counters().memory_check_ns.record(static_cast<std::uint64_t>(steady_ns() - t0));
}

void Server::trim_if_worth_it(std::uint64_t now, bool compacted) {
  std::int64_t gap = 0;
  if (!weigh_heap(now, &gap)) return;
  least_gap_ = std::min(least_gap_, gap);
  if (!compacted && gap - least_gap_ < static_cast<std::int64_t>(kTrimFreeBytes)) return;
  ::malloc_trim(0);
  ++allocator_.counters().memory_trims;
  if (weigh_heap(now, &gap)) least_gap_ = gap;
}

// Records the heap's figures; *gap: resident bytes not in use by the heap.
// False if statm is unreadable.
bool Server::weigh_heap(std::uint64_t now, std::int64_t* gap) {
  const struct mallinfo2 m = ::mallinfo2();
  const std::int64_t resident = resident_bytes();
  heap_ = {static_cast<std::int64_t>(m.uordblks + m.hblkhd), static_cast<std::int64_t>(m.fordblks),
           now};
  *gap = resident - heap_.in_use_bytes;
  return resident >= 0;
}

}  // namespace flowtune::daemon
