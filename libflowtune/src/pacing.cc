#include "pacing.h"

#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "flowtune/flowtune.h"

namespace flowtune::client {

int set_pacing_rate(int fd, std::uint64_t bytes_per_sec) {
  // 64-bit SO_MAX_PACING_RATE (Linux >= 5.1); all ones means "no cap".
  const std::uint64_t v = bytes_per_sec == 0 ? ~std::uint64_t{0} : bytes_per_sec;
  if (setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &v, sizeof v) == 0) return 0;
  return errno;
}

std::uint64_t socket_cookie(int fd) {
  std::uint64_t cookie = 0;
  socklen_t len = sizeof cookie;
  if (getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &len) != 0) return 0;
  return cookie;
}

SocketTable::SocketTable()
    : chunks_(new std::atomic<Slot*>[kChunks]), chunk_dirty_(new std::atomic<bool>[kChunks]) {
  for (int i = 0; i < kChunks; ++i) {
    chunks_[i].store(nullptr, std::memory_order_relaxed);
    chunk_dirty_[i].store(false, std::memory_order_relaxed);
  }
}

void SocketTable::mark_dirty(int fd, Slot& s) {
  s.dirty.store(true, std::memory_order_release);
  chunk_dirty_[fd >> kChunkBits].store(true, std::memory_order_release);
  dirty_hint_.store(true, std::memory_order_release);
}

bool SocketTable::spilling(int fd) const {
  const Slot* s = slot(fd);
  return s != nullptr && s->spilling.load(std::memory_order_acquire);
}

void SocketTable::spill(int fd, SpillKind kind, std::uint64_t bytes,
                        const std::optional<FlowletPolicy>& policy) {
  Slot* s = slot(fd);
  if (s == nullptr) return;
  {
    const SlotLock held(*s);
    record_spill(s->spilled, kind, bytes, policy);
    s->spilling.store(true, std::memory_order_release);
  }
  mark_dirty(fd, *s);
}

void SocketTable::record_spill(Spilled& p, SpillKind kind, std::uint64_t bytes,
                               const std::optional<FlowletPolicy>& policy) {
  const bool has_bytes = p.begin_bytes != 0 || p.sent != 0 || p.wrote != 0 || p.collect;
  switch (kind) {
    case SpillKind::kBegin:
      // A begin after an end: the two flowlets coalesce (as a begin on a
      // live flowlet does), so the end is dropped, not reordered.
      p.end_last = false;
      p.begin_bytes += bytes;
      p.policy = policy;
      break;
    case SpillKind::kSent: p.sent += bytes; break;
    case SpillKind::kWrote:
      p.end_last = false;
      p.wrote += bytes;
      break;
    case SpillKind::kCollect: p.collect = true; break;
    case SpillKind::kEnd: (has_bytes ? p.end_last : p.end_first) = true; break;
  }
}

SocketTable::Spilled SocketTable::take_spill(int fd) {
  Slot* s = slot(fd);
  if (s == nullptr) return {};
  const SlotLock held(*s);
  Spilled p = s->spilled;
  s->spilled = Spilled{};
  const std::uint32_t st = s->state.load(std::memory_order_relaxed);
  p.gen = (st & 1) != 0 ? st >> 1 : 0;
  return p;
}

void SocketTable::finish_spill(int fd) {
  Slot* s = slot(fd);
  if (s == nullptr) return;
  const SlotLock held(*s);
  if (s->spilled.empty()) {
    s->spilling.store(false, std::memory_order_release);
  } else {
    mark_dirty(fd, *s);  // more came while the runtime applied the last batch
  }
}

SocketTable::~SocketTable() {
  for (int i = 0; i < kChunks; ++i) delete[] chunks_[i].load(std::memory_order_relaxed);
}

SocketTable::Slot* SocketTable::slot(int fd) const {
  if (fd < 0 || fd >= kMaxFd) return nullptr;
  Slot* c = chunks_[fd >> kChunkBits].load(std::memory_order_acquire);
  return c == nullptr ? nullptr : &c[fd & (kChunk - 1)];
}

SocketTable::Slot* SocketTable::slot_or_create(int fd) {
  if (fd < 0 || fd >= kMaxFd) return nullptr;
  std::atomic<Slot*>& c = chunks_[fd >> kChunkBits];
  Slot* chunk = c.load(std::memory_order_acquire);
  if (chunk == nullptr) {
    Slot* fresh = new (std::nothrow) Slot[kChunk];
    if (fresh == nullptr) return nullptr;
    if (c.compare_exchange_strong(chunk, fresh, std::memory_order_acq_rel)) {
      chunk = fresh;
    } else {
      delete[] fresh;  // another thread created it first
    }
  }
  return &chunk[fd & (kChunk - 1)];
}

void SocketTable::lock(Slot& s) {
  // Held for one setsockopt or ioctl at most: spinning beats a futex here.
  while (s.busy.exchange(true, std::memory_order_acquire)) std::this_thread::yield();
}

int SocketTable::claim(int fd, SocketRef* out) {
  if (fd < 0 || fd >= kMaxFd) return FT_EBADF;
  Slot* s = slot_or_create(fd);
  if (s == nullptr) return FT_ENOMEM;
  {
    const SlotLock held(*s);
    const std::uint32_t st = s->state.load(std::memory_order_relaxed);
    if ((st & 1) != 0) return FT_EEXIST;
    *out = {fd, open_slot(fd, *s, st)};
  }
  return FT_OK;
}

// Registers `s` (its state was `st`, unregistered) under the next
// generation and resets what the previous registration left; under busy.
std::uint32_t SocketTable::open_slot(int fd, Slot& s, std::uint32_t st) {
  const std::uint32_t gen = (st >> 1) + 1;
  s.state.store((gen << 1) | 1, std::memory_order_release);
  s.capped = false;
  s.cookie = socket_cookie(fd);
  s.in_flowlet.store(false, std::memory_order_relaxed);
  s.unreported.store(0, std::memory_order_relaxed);
  s.writing.store(0, std::memory_order_relaxed);
  s.spilled = Spilled{};
  s.spilling.store(false, std::memory_order_relaxed);
  return gen;
}

int SocketTable::release(int fd) {
  Slot* s = slot(fd);
  if (s == nullptr) return FT_ENOTREG;
  {
    const SlotLock held(*s);
    const std::uint32_t st = s->state.load(std::memory_order_relaxed);
    if ((st & 1) == 0) return FT_ENOTREG;
    // The fd is still the application's here, so clearing is safe.
    if (s->capped) (void)set_pacing_rate(fd, 0);
    s->capped = false;
    s->state.store(st & ~1u, std::memory_order_release);
    // Events of the old registration die with it; the runtime learns of the
    // unregistration from the slot (it compares generations), never from the
    // queue, so it cannot be lost to a full queue.
    s->spilled = Spilled{};
    s->spilling.store(false, std::memory_order_relaxed);
  }
  mark_dirty(fd, *s);
  return FT_OK;
}

void SocketTable::release_all() {
  for (int c = 0; c < kChunks; ++c) {
    const Slot* chunk = chunks_[c].load(std::memory_order_acquire);
    if (chunk == nullptr) continue;
    for (int i = 0; i < kChunk; ++i) {
      if ((chunk[i].state.load(std::memory_order_relaxed) & 1) != 0) (void)release(c * kChunk + i);
    }
  }
}

std::optional<SocketRef> SocketTable::lookup(int fd) const {
  const Slot* s = slot(fd);
  if (s == nullptr) return std::nullopt;
  const std::uint32_t st = s->state.load(std::memory_order_acquire);
  if ((st & 1) == 0) return std::nullopt;
  return SocketRef{fd, st >> 1};
}

void SocketTable::mark_begin(int fd) {
  if (Slot* s = slot(fd)) s->in_flowlet.store(true, std::memory_order_relaxed);
}

bool SocketTable::mark_end(int fd) {
  Slot* s = slot(fd);
  return s != nullptr && s->in_flowlet.exchange(false, std::memory_order_relaxed);
}

bool SocketTable::in_flowlet(int fd) const {
  const Slot* s = slot(fd);
  return s != nullptr && s->in_flowlet.load(std::memory_order_relaxed);
}

std::uint64_t SocketTable::add_unreported(int fd, std::uint64_t bytes) {
  Slot* s = slot(fd);
  return s != nullptr ? s->unreported.fetch_add(bytes, std::memory_order_relaxed) : 0;
}

std::uint64_t SocketTable::take_unreported(SocketRef ref) {
  Slot* s = slot(ref.fd);
  if (s == nullptr || s->state.load(std::memory_order_acquire) != ((ref.gen << 1) | 1)) return 0;
  return s->unreported.exchange(0, std::memory_order_relaxed);
}

void SocketTable::add_writing(int fd, int delta) {
  // Release: bytes reported before a call's end are seen by whoever sees it end.
  if (Slot* s = slot(fd)) s->writing.fetch_add(delta, std::memory_order_release);
}

bool SocketTable::writing(SocketRef ref) const {
  const Slot* s = slot(ref.fd);
  return s != nullptr && s->state.load(std::memory_order_acquire) == ((ref.gen << 1) | 1) &&
         s->writing.load(std::memory_order_acquire) > 0;
}

void SocketTable::clear_flowlet(SocketRef ref) {
  Slot* s = slot(ref.fd);
  if (s != nullptr && s->state.load(std::memory_order_acquire) == ((ref.gen << 1) | 1)) {
    s->in_flowlet.store(false, std::memory_order_relaxed);
  }
}

int SocketTable::borrow(int fd) const {
  if (pidfd_ == kNoPidfd) return -1;
  if (pidfd_ < 0) return fd;
  return static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd_, fd, 0));
}

void SocketTable::give_back(int local) const {
  // Only a copy is closed, and whether `local` is one depends on the table,
  // not on its number: the private table hands out its lowest free number,
  // which can equal the application's. Kept open, that copy would hold the
  // application's socket past its close (no FIN: the peer waits forever).
  // The raw syscall: the copy must not reach an interposed close() (the
  // preload shim), which would take its number for the application's fd.
  if (local >= 0 && pidfd_ >= 0) (void)::syscall(SYS_close, local);
}

SocketTable::Result SocketTable::set_rate(SocketRef ref, std::uint64_t bytes_per_sec, int* err) {
  Slot* s = slot(ref.fd);
  if (s == nullptr) return Result::kGone;
  const SlotLock held(*s);
  if (s->state.load(std::memory_order_relaxed) != ((ref.gen << 1) | 1)) return Result::kGone;
  if (bytes_per_sec == 0 && !s->capped) return Result::kOk;
  // The cookie names the socket, not the number: a number the application
  // closed and reused for another socket is left alone.
  const int local = borrow(ref.fd);
  if (local < 0 || socket_cookie(local) != s->cookie) {
    give_back(local);
    return Result::kGone;
  }
  const int e = set_pacing_rate(local, bytes_per_sec);
  give_back(local);
  if (e == 0) s->capped = bytes_per_sec != 0;
  if (e != 0) {
    *err = e;
    return Result::kFailed;
  }
  return Result::kOk;
}

SocketTable::Result SocketTable::unsent_bytes(SocketRef ref, std::uint64_t* out) {
  Slot* s = slot(ref.fd);
  if (s == nullptr) return Result::kGone;
  const SlotLock held(*s);
  if (s->state.load(std::memory_order_relaxed) != ((ref.gen << 1) | 1)) return Result::kGone;
  const int local = borrow(ref.fd);
  if (local < 0 || socket_cookie(local) != s->cookie) {
    give_back(local);
    return Result::kGone;
  }
  int n = 0;
  const int rc = ioctl(local, SIOCOUTQNSD, &n);
  give_back(local);
  if (rc != 0 || n < 0) return Result::kFailed;
  *out = static_cast<std::uint64_t>(n);
  return Result::kOk;
}

}  // namespace flowtune::client
