// The table of registered sockets, shared by application threads and the
// runtime thread, and the one place that touches a socket's pacing.
//
// The hazard it exists for: the runtime thread applies a rate to fd 7 while
// the application closes fd 7 and opens another socket that gets number 7.
// Each slot carries a generation and a small lock. ft_socket_unregister()
// takes the lock, bumps the generation and clears the cap while the fd is
// still the application's; the runtime thread takes the same lock and acts
// only if the generation it was given is still current. So once unregister
// returns, the library never touches that fd again.
//
// Lookups on the data path (begin/sent/end) are one atomic load; the table
// grows in chunks on first use of an fd range and never moves.
//
// The slot is also where events go that the bounded event queue cannot
// take (see "spill" below), and where an unregistration is recorded: ends
// and unregisters never depend on the queue having room. A slot with
// something for the runtime is marked dirty, its chunk too, and a table-wide
// hint is raised, so the runtime visits only dirty slots of dirty chunks
// and nothing at all on a turn without the hint.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "policy.h"

namespace flowtune::client {

// A registration: fd plus the slot's generation when it was claimed.
struct SocketRef {
  int fd = -1;
  std::uint32_t gen = 0;
  std::uint64_t packed() const {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(fd)) << 32) | gen;
  }
  static SocketRef unpack(std::uint64_t v) {
    return {static_cast<int>(v >> 32), static_cast<std::uint32_t>(v)};
  }
  bool operator==(const SocketRef&) const = default;
};

// SocketTable::set_pidfd's "private table, but no pidfd": reach nothing.
inline constexpr int kNoPidfd = -2;

class SocketTable {
 public:
  static constexpr int kMaxFd = 1 << 20;

  SocketTable();
  ~SocketTable();
  SocketTable(const SocketTable&) = delete;
  SocketTable& operator=(const SocketTable&) = delete;

  // Application side. claim: FT_EEXIST if registered, FT_EBADF if fd is out
  // of range, FT_ENOMEM if a chunk cannot be allocated.
  int claim(int fd, SocketRef* out);
  // Bumps the generation and clears any cap the library set; FT_ENOTREG if
  // fd is not registered.
  int release(int fd);
  // Releases every registration (the client is closing): only the chunks
  // ever allocated are visited.
  void release_all();
  // The current registration of fd, if any (one atomic load).
  std::optional<SocketRef> lookup(int fd) const;
  // The application's view of its flowlet on fd: begin marks it open, end
  // closes it; end returns false when none was open (a double end).
  void mark_begin(int fd);
  bool mark_end(int fd);
  bool in_flowlet(int fd) const;
  // Bytes written into a flowlet in progress gather in the slot, so a stream
  // of small writes costs one event, not one each: add returns the amount
  // gathered before (0 = the caller must tell the runtime to collect);
  // take (runtime side) collects it if ref is still the registration.
  std::uint64_t add_unreported(int fd, std::uint64_t bytes);
  std::uint64_t take_unreported(SocketRef ref);
  // Write calls in progress on fd (application side marks them); the
  // runtime does not end a flowlet while one is.
  void add_writing(int fd, int delta);
  bool writing(SocketRef ref) const;
  // Runtime side: the library ended ref's flowlet (advance end, lease).
  void clear_flowlet(SocketRef ref);

  // ---- events past a full queue ----
  // Once one event of a socket has gone into its slot, the socket's later
  // events follow it there until the runtime has taken them (spilling), so
  // the runtime sees them after everything the queue already held for the
  // socket, in order. They are kept collapsed, in the order the Session must
  // see them: an end that came first, begins, bytes, an end that came last.
  struct Spilled {
    std::uint32_t gen = 0;  // the registration they belong to (0: none)
    bool end_first = false;
    std::uint64_t begin_bytes = 0;
    std::optional<FlowletPolicy> policy;  // the last begin's; none: the socket's defaults
    std::uint64_t sent = 0;
    std::uint64_t wrote = 0;  // begin-or-extend bytes (ft_flowlet_wrote)
    bool collect = false;     // collect the slot's unreported bytes
    bool end_last = false;
    bool empty() const {
      return !end_first && begin_bytes == 0 && sent == 0 && wrote == 0 && !collect && !end_last;
    }
  };
  enum class SpillKind { kBegin, kSent, kWrote, kCollect, kEnd };
  // Application side: true while fd's events must go to its slot.
  bool spilling(int fd) const;
  // Application side: records one event in fd's slot and marks it dirty.
  void spill(int fd, SpillKind kind, std::uint64_t bytes = 0,
             const std::optional<FlowletPolicy>& policy = std::nullopt);
  // Runtime side: calls visit(fd) for each slot marked dirty since the last
  // sweep (spilled events, or an unregistration), clearing the marks.
  template <class Visit>
  void sweep(Visit visit);
  // Runtime side: the events spilled into fd's slot so far (emptied); the
  // socket keeps spilling until finish_spill finds nothing more came.
  Spilled take_spill(int fd);
  void finish_spill(int fd);
  // True if some slot is dirty (cheap: one load).
  bool has_dirty() const { return dirty_hint_.load(std::memory_order_acquire); }

  // Runtime side: when the runtime thread has a private fd table, the
  // application's fds are reached through this pidfd (pidfd_getfd) for the
  // moment of one call; -1 (the default): fd numbers are shared.
  void set_pidfd(int pidfd) { pidfd_ = pidfd; }

  enum class Result { kOk, kGone, kFailed };
  // Runtime side: sets SO_MAX_PACING_RATE (0 clears the cap) if `ref` is
  // still the fd's registration; *err gets errno on kFailed.
  Result set_rate(SocketRef ref, std::uint64_t bytes_per_sec, int* err);
  // Runtime side: bytes queued in the kernel not yet sent (SIOCOUTQNSD).
  Result unsent_bytes(SocketRef ref, std::uint64_t* out);

 private:
  struct Slot {
    // gen << 1 | registered
    std::atomic<std::uint32_t> state{0};
    std::atomic<bool> busy{false};
    bool capped = false;  // the library set a cap (guarded by busy)
    // The kernel's id of the socket registered (SO_COOKIE), guarded by busy:
    // if the application closes the fd without unregistering and the number
    // is reused, the runtime sees another cookie and leaves it alone.
    std::uint64_t cookie = 0;
    std::atomic<bool> in_flowlet{false};
    std::atomic<std::uint64_t> unreported{0};
    std::atomic<std::int32_t> writing{0};
    std::atomic<bool> spilling{false};
    std::atomic<bool> dirty{false};
    Spilled spilled;  // guarded by busy
  };
  static constexpr int kChunkBits = 10;
  static constexpr int kChunk = 1 << kChunkBits;
  static constexpr int kChunks = kMaxFd / kChunk;

  Slot* slot(int fd) const;
  Slot* slot_or_create(int fd);
  void mark_dirty(int fd, Slot& s);
  static void record_spill(Spilled& p, SpillKind kind, std::uint64_t bytes,
                           const std::optional<FlowletPolicy>& policy);
  static std::uint32_t open_slot(int fd, Slot& s, std::uint32_t st);
  // A descriptor of the application's fd in the calling thread's table, or
  // -1; give_back closes it if it is a copy. Never held past one call.
  int borrow(int fd) const;
  void give_back(int local) const;
  static void lock(Slot& s);
  static void unlock(Slot& s) { s.busy.store(false, std::memory_order_release); }
  // Holds a slot's spin lock (busy) from construction to the end of its
  // scope, so no return path leaves the slot locked.
  class SlotLock {
   public:
    explicit SlotLock(Slot& s) : s_(s) { lock(s_); }
    ~SlotLock() { unlock(s_); }
    SlotLock(const SlotLock&) = delete;
    SlotLock& operator=(const SlotLock&) = delete;

   private:
    Slot& s_;
  };

  std::unique_ptr<std::atomic<Slot*>[]> chunks_;
  std::unique_ptr<std::atomic<bool>[]> chunk_dirty_;
  std::atomic<bool> dirty_hint_{false};
  int pidfd_ = -1;  // runtime thread only
};

template <class Visit>
void SocketTable::sweep(Visit visit) {
  // Cleared in the opposite order to mark_dirty (slot, chunk, hint): a mark
  // racing the sweep always leaves the hint set for the next one.
  if (!dirty_hint_.exchange(false, std::memory_order_acq_rel)) return;
  for (int c = 0; c < kChunks; ++c) {
    if (!chunk_dirty_[c].load(std::memory_order_relaxed)) continue;
    if (!chunk_dirty_[c].exchange(false, std::memory_order_acq_rel)) continue;
    Slot* chunk = chunks_[c].load(std::memory_order_acquire);
    for (int i = 0; chunk != nullptr && i < kChunk; ++i) {
      if (chunk[i].dirty.load(std::memory_order_relaxed) &&
          chunk[i].dirty.exchange(false, std::memory_order_acq_rel)) {
        visit(c * kChunk + i);
      }
    }
  }
}

// Applies a cap directly (no table): 0 clears it. Returns 0 or errno.
int set_pacing_rate(int fd, std::uint64_t bytes_per_sec);
// The socket's SO_COOKIE (unique per socket for the boot), 0 if unknown.
std::uint64_t socket_cookie(int fd);

}  // namespace flowtune::client
