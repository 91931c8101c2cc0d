#include <arpa/inet.h>
#include <fcntl.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <stdexcept>
#include <unordered_map>

#include "flowtune/common/fd.h"
#include "flowtune/flowtune.h"
#include "service.h"

namespace flowtune::shuffle {

const char* to_string(DataPath p) {
  switch (p) {
    case DataPath::kRead: return "read";
    case DataPath::kReadZc: return "read-zc";
    case DataPath::kSplice: return "splice";
    case DataPath::kSendfile: return "sendfile";
  }
  return "?";
}

namespace {

using Clock = std::chrono::steady_clock;

std::string errno_text(int e) { return std::strerror(e); }

// The paths that read blocks into a per-connection buffer.
bool buffered(DataPath p) { return p == DataPath::kRead || p == DataPath::kReadZc; }

// Zero-copy send (IORING_OP_SEND_ZC, kernel 6.0). Its result CQE carries
// IORING_CQE_F_MORE when a notification CQE (IORING_CQE_F_NOTIF, same
// user_data) follows: only then may the kernel's pages of the buffer be
// written again. liburing 2.3's header predates the usage report (kernel
// 6.2), which says in the notification whether the kernel copied after all.
constexpr unsigned kZcReportUsage = 1U << 3;        // IORING_SEND_ZC_REPORT_USAGE
constexpr std::uint32_t kZcUsageCopied = 1U << 31;  // IORING_NOTIF_USAGE_ZC_COPIED

// Registered-buffer slots (a sparse table, filled as connections need
// buffers); a connection past them reads into a plain buffer.
constexpr unsigned kBufferSlots = 1024;
constexpr std::size_t kPageBytes = 4096;
// Registered buffers are pinned (with CAP_IPC_LOCK nothing else bounds
// them): past this many bytes a connection reads into a plain buffer.
constexpr std::size_t kMaxPinnedBytes = std::size_t{256} << 20;

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

// A map output, opened on first use.
struct MapFile {
  UniqueFd fd;
  MapIndex index;
};

enum class OpType : std::uint8_t {
  kAccept, kAcceptRetry, kWake, kSweep, kIgnore, kRecv, kSend, kSendZc, kRead
};
struct Conn;
struct Op {
  OpType type;
  Conn* conn = nullptr;
  std::uint8_t half = 0;  // kSendZc: which half of the connection's buffer it sends from
};

// One answer: a header, then an error message or a block read from a file.
struct Job {
  BlockHeader header;
  std::string message;  // the body of an error
  int file = -1;
  std::uint64_t offset = 0;
  std::uint64_t coflow = 0;
};

struct Conn {
  int fd = -1;
  Op recv_op{OpType::kRecv, nullptr};
  Op send_op{OpType::kSend, nullptr};
  Op read_op{OpType::kRead, nullptr};
  Op zc_op[2] = {{OpType::kSendZc, nullptr, 0}, {OpType::kSendZc, nullptr, 1}};
  // Submissions whose completion has not come, and zero-copy sends whose
  // notification has not: the connection is freed only when both are 0.
  int inflight = 0;
  Clock::time_point last_active;  // the last completion on it, or its accept
  bool recv_posted = false;
  bool eof = false;   // the peer closed
  // A request could not be read (too long): answer what came before it and
  // it, then half-close and read to the peer's end without answering, so
  // the answers are not lost to a reset.
  bool discard = false;
  bool half_closed = false;
  bool dead = false;  // a send failed: finish pending ops, then close
  bool registered = false;
  std::string in;
  std::deque<Job> jobs;
  bool active = false;  // jobs.front() is being sent
  enum class Phase { kHeader, kMessage, kData } phase = Phase::kHeader;
  std::uint8_t header[kHeaderBytes];
  std::uint64_t done = 0;  // bytes of the phase sent
  std::uint64_t left = 0;  // block bytes not yet read
  // kRead: one chunk; kReadZc: two halves of a chunk each, so a read fills
  // one while the other waits for its zero-copy notification. Page-aligned,
  // registered as slot buf_slot when the kernel took it (-1: plain reads).
  std::unique_ptr<char, FreeDeleter> buf;
  int buf_slot = -1;
  std::size_t buf_pinned = 0;  // bytes registered with buf_slot
  unsigned half = 0;          // the half holding the latest chunk (kRead: always 0)
  int zc_pending[2] = {0, 0};  // zero-copy sends from each half not yet notified
  bool read_waits = false;    // the next read waits for its half's notification
  bool zc_with_report = false;  // the last zero-copy send asked for the usage report
  bool plain_sends = false;     // kReadZc: zero-copy refused on this connection (ENOMEM)
  // Data bytes read (or spliced into the pipe) and not yet sent.
  std::size_t buf_len = 0, buf_sent = 0;
  UniqueFd pipe_r, pipe_w;  // DataPath::kSplice
  char rbuf[2048];
};

}  // namespace

struct Server::Impl {
  ServerConfig cfg;
  ServerStats stats;
  int listen_fd = -1;
  int wake_fd = -1;
  std::uint16_t port = 0;
  ft_client* ft = nullptr;
  io_uring ring{};
  bool ring_ready = false;
  Op accept_op{OpType::kAccept, nullptr};
  Op retry_op{OpType::kAcceptRetry, nullptr};
  __kernel_timespec retry_after{0, 10'000'000};  // out of fds: accept again in 10 ms
  bool accept_pending = false;
  bool stopping = false;
  Op wake_op{OpType::kWake, nullptr};
  std::uint64_t wake_value = 0;
  // The idle sweep: every sweep_every, connections idle for idle_timeout go.
  Op sweep_op{OpType::kSweep, nullptr};
  Op ignore_op{OpType::kIgnore, nullptr};
  __kernel_timespec sweep_every{};
  Clock::duration idle_timeout{};
  bool sweep_pending = false;
  Clock::time_point now;  // stamped once per batch of completions
  // Registered buffers (kRead, kReadZc): free slots of the sparse table,
  // none when the kernel refused the table (no_slot_why says which).
  std::vector<unsigned> free_slots;
  std::string no_slot_why = "all " + std::to_string(kBufferSlots) + " slots in use";
  std::size_t pinned_bytes = 0;  // registered buffers, all connections
  bool buffers_warned = false;
  // Zero-copy send, one state per server. Legal transitions:
  //   kUntested -> kWorks  a send_zc moved bytes
  //   kUntested -> kOff    the kernel has no IORING_OP_SEND_ZC, or refused the
  //                        first sends (EINVAL/EOPNOTSUPP) with and without the
  //                        usage report: plain sends from then on, said once
  // zc_report goes true -> false once, when a send asking for the report is
  // refused while untested (kernels 6.0 and 6.1).
  enum class ZeroCopy : std::uint8_t { kUntested, kWorks, kOff } zero_copy = ZeroCopy::kUntested;
  bool zc_report = true;
  bool zc_warned = false;
  std::unordered_map<std::uint64_t, MapFile> maps;
  // Every open connection; a record is freed only when nothing in flight
  // can touch it (maybe_close).
  std::vector<std::unique_ptr<Conn>> conns;

  io_uring_sqe* sqe() {
    io_uring_sqe* s = io_uring_get_sqe(&ring);
    if (s == nullptr) {
      io_uring_submit(&ring);
      s = io_uring_get_sqe(&ring);
    }
    if (s == nullptr) throw std::runtime_error("io_uring submission queue full");
    return s;
  }

  void post_accept() {
    io_uring_sqe* s = sqe();
    io_uring_prep_accept(s, listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    io_uring_sqe_set_data(s, &accept_op);
    accept_pending = true;
  }
  // `op` completes after `after` (the kernel copies it on submission).
  void post_timeout(__kernel_timespec& after, Op& op, bool& pending) {
    io_uring_sqe* s = sqe();
    io_uring_prep_timeout(s, &after, 0, 0);
    io_uring_sqe_set_data(s, &op);
    pending = true;
  }
  void post_accept_retry() { post_timeout(retry_after, retry_op, accept_pending); }
  void post_sweep() { post_timeout(sweep_every, sweep_op, sweep_pending); }
  void post_wake() {
    io_uring_sqe* s = sqe();
    io_uring_prep_read(s, wake_fd, &wake_value, sizeof wake_value, 0);
    io_uring_sqe_set_data(s, &wake_op);
  }
  void cancel_sweep() {
    if (!sweep_pending) return;
    io_uring_sqe* s = sqe();
    io_uring_prep_timeout_remove(s, reinterpret_cast<__u64>(&sweep_op), 0);
    io_uring_sqe_set_data(s, &ignore_op);
  }
  void post_recv(Conn& c) {
    if (c.recv_posted || c.eof || c.dead || (!c.discard && c.jobs.size() >= cfg.max_pipelined)) return;
    io_uring_sqe* s = sqe();
    io_uring_prep_recv(s, c.fd, c.rbuf, sizeof c.rbuf, 0);
    io_uring_sqe_set_data(s, &c.recv_op);
    c.recv_posted = true;
    ++c.inflight;
  }
  void post_send(Conn& c, const void* p, std::size_t n) {
    io_uring_sqe* s = sqe();
    io_uring_prep_send(s, c.fd, p, n, MSG_NOSIGNAL);
    io_uring_sqe_set_data(s, &c.send_op);
    ++c.inflight;
  }
  char* chunk(Conn& c, unsigned half) const {
    return c.buf.get() + std::size_t{half} * cfg.chunk_bytes;
  }

  // The next chunk of the block: read into the buffer (kReadZc: into the
  // other half, once its zero-copy sends are notified), or spliced into
  // the connection's pipe.
  void post_read(Conn& c) {
    const Job& j = c.jobs.front();
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(c.left, cfg.chunk_bytes));
    const std::uint64_t at = j.offset + (j.header.length - c.left);
    if (cfg.data_path == DataPath::kReadZc) {
      const unsigned next = c.half ^ 1U;
      c.read_waits = c.zc_pending[next] > 0;
      if (c.read_waits) return;  // on_notif() posts it
      c.half = next;
    }
    io_uring_sqe* s = sqe();
    if (cfg.data_path == DataPath::kSplice) {
      io_uring_prep_splice(s, j.file, static_cast<std::int64_t>(at), c.pipe_w.get(), -1,
                           static_cast<unsigned>(n), 0);
    } else if (c.buf_slot >= 0) {
      io_uring_prep_read_fixed(s, j.file, chunk(c, c.half), static_cast<unsigned>(n), at,
                               c.buf_slot);
    } else {
      io_uring_prep_read(s, j.file, chunk(c, c.half), static_cast<unsigned>(n), at);
    }
    io_uring_sqe_set_data(s, &c.read_op);
    ++c.inflight;
  }
  void post_data_send(Conn& c) {
    const std::size_t n = c.buf_len - c.buf_sent;
    if (cfg.data_path == DataPath::kSplice) {
      io_uring_sqe* s = sqe();
      io_uring_prep_splice(s, c.pipe_r.get(), -1, c.fd, -1, static_cast<unsigned>(n), 0);
      io_uring_sqe_set_data(s, &c.send_op);
      ++c.inflight;
      return;
    }
    const char* p = chunk(c, c.half) + c.buf_sent;
    if (cfg.data_path != DataPath::kReadZc || zero_copy == ZeroCopy::kOff || c.plain_sends) {
      post_send(c, p, n);
      return;
    }
    io_uring_sqe* s = sqe();
    const unsigned flags = zc_report ? kZcReportUsage : 0;
    if (c.buf_slot >= 0) {
      io_uring_prep_send_zc_fixed(s, c.fd, p, n, MSG_NOSIGNAL, flags,
                                  static_cast<unsigned>(c.buf_slot));
    } else {
      io_uring_prep_send_zc(s, c.fd, p, n, MSG_NOSIGNAL, flags);
    }
    io_uring_sqe_set_data(s, &c.zc_op[c.half]);
    c.zc_with_report = zc_report;
    ++c.zc_pending[c.half];
    ++c.inflight;
  }

  // ---- Registered buffers (kRead, kReadZc) ----

  // Says once per server why a buffer is not registered; the connection
  // reads into it plainly, nothing else changes.
  void buffers_refused(const std::string& why) {
    ++stats.buffers_refused;
    if (buffers_warned) return;
    buffers_warned = true;
    std::fprintf(stderr,
                 "flowtune-shuffle: warning: registered buffers refused (%s): plain reads where "
                 "refused\n",
                 why.c_str());
  }
  // Says once per server why zero-copy send is not used (`where`: on every
  // connection, or where refused).
  void zero_copy_refused(const std::string& why, const char* where) {
    if (zc_warned) return;
    zc_warned = true;
    std::fprintf(stderr, "flowtune-shuffle: warning: zero-copy send refused (%s): plain sends%s\n",
                 why.c_str(), where);
  }
  static std::string register_error(int e) {
    return errno_text(e) + (e == ENOMEM ? ", RLIMIT_MEMLOCK: ulimit -l" : "");
  }
  // The connection's buffer, page-aligned, registered in a free slot when
  // the kernel takes it.
  void attach_buffer(Conn& c) {
    const unsigned halves = cfg.data_path == DataPath::kReadZc ? 2 : 1;
    const std::size_t bytes =
        (std::size_t{cfg.chunk_bytes} * halves + kPageBytes - 1) / kPageBytes * kPageBytes;
    c.buf.reset(static_cast<char*>(std::aligned_alloc(kPageBytes, bytes)));
    if (c.buf == nullptr) throw std::bad_alloc();
    if (free_slots.empty()) {
      buffers_refused(no_slot_why);
      return;
    }
    if (pinned_bytes + bytes > kMaxPinnedBytes) {
      buffers_refused("more than " + std::to_string(kMaxPinnedBytes >> 20) + " MiB registered");
      return;
    }
    const iovec iov{c.buf.get(), bytes};
    const __u64 tag = 0;
    const int r = io_uring_register_buffers_update_tag(&ring, free_slots.back(), &iov, &tag, 1);
    if (r != 1) {
      buffers_refused(register_error(r < 0 ? -r : EINVAL));
      return;
    }
    c.buf_slot = static_cast<int>(free_slots.back());
    c.buf_pinned = bytes;
    pinned_bytes += bytes;
    free_slots.pop_back();
    ++stats.buffers_registered;
  }
  // Only once nothing in flight can touch the buffer (inflight == 0).
  void detach_buffer(Conn& c) {
    if (c.buf_slot < 0) return;
    const iovec none{nullptr, 0};
    const __u64 tag = 0;
    (void)io_uring_register_buffers_update_tag(&ring, static_cast<unsigned>(c.buf_slot), &none,
                                               &tag, 1);
    free_slots.push_back(static_cast<unsigned>(c.buf_slot));
    c.buf_slot = -1;
    pinned_bytes -= c.buf_pinned;
    c.buf_pinned = 0;
  }

  // The block a request names, or why not.
  Job lookup(const Fetch& f) {
    Job j;
    j.coflow = f.coflow;
    const std::uint64_t key = std::uint64_t{f.shuffle} << 32 | f.map;
    auto it = maps.find(key);
    if (it == maps.end()) {
      MapFile m;
      const std::string ipath = index_path(cfg.dir, f.shuffle, f.map);
      const UniqueFd ifd(::open(ipath.c_str(), O_RDONLY | O_CLOEXEC));
      if (!ifd) return error(Status::kNotFound, "no map output " + ipath);
      std::string bytes;
      char tmp[65536];
      ssize_t n;
      while ((n = ::read(ifd.get(), tmp, sizeof tmp)) > 0 && bytes.size() < (64u << 20)) bytes.append(tmp, static_cast<std::size_t>(n));
      std::string why;
      auto ix = decode_index(bytes, &why);
      if (!ix) return error(Status::kServerError, ipath + ": " + why);
      const std::string dpath = data_path(cfg.dir, f.shuffle, f.map);
      m.fd.reset(::open(dpath.c_str(), O_RDONLY | O_CLOEXEC));
      struct stat st {};
      if (!m.fd || ::fstat(m.fd.get(), &st) != 0 ||
          static_cast<std::uint64_t>(st.st_size) != ix->offsets.back()) {
        return error(Status::kServerError, dpath + ": missing, or its size does not match its index");
      }
      m.index = std::move(*ix);
      it = maps.emplace(key, std::move(m)).first;
    }
    const MapFile& m = it->second;
    if (f.partition >= m.index.partitions()) {
      return error(Status::kNotFound, "map " + std::to_string(f.map) + " has " +
                                          std::to_string(m.index.partitions()) + " partitions");
    }
    j.file = m.fd.get();
    j.offset = m.index.offsets[f.partition];
    j.header = {Status::kOk, m.index.offsets[f.partition + 1] - j.offset, m.index.crcs[f.partition]};
    return j;
  }
  static Job error(Status s, std::string message) {
    Job j;
    j.header = {s, message.size(), crc32c(0, message.data(), message.size())};
    j.message = std::move(message);
    return j;
  }

  // The answer to one request line.
  Job answer(std::string_view line) {
    auto parsed = parse_fetch(line);
    if (auto* f = std::get_if<Fetch>(&parsed)) {
      Job j = lookup(*f);
      if (j.header.status == Status::kNotFound) ++stats.not_found;
      return j;
    }
    ++stats.bad_requests;
    return error(Status::kBadRequest, std::get<std::string>(parsed));
  }

  // Complete request lines in `in` become answers, in order; true when what
  // is left can no longer be a request (over 128 bytes), after its error.
  template <typename Push>
  bool take_lines(std::string& in, Push push) {
    if (!take_request_lines(in, [&](std::string_view line) { push(answer(line)); })) return false;
    ++stats.bad_requests;
    push(error(Status::kBadRequest, kRequestTooLong));
    return true;
  }

  void take_requests(Conn& c) {
    if (c.discard) {
      c.in.clear();
      return;
    }
    if (take_lines(c.in, [&](Job j) { c.jobs.push_back(std::move(j)); })) c.discard = true;
  }

  // A block is a flowlet of its header and bytes, in the request's coflow.
  void declare(int fd, const Job& j) {
    if (j.header.status != Status::kOk) return;
    ft_flowlet_opts o;
    ft_flowlet_opts_init(&o);
    o.coflow_id = j.coflow;
    (void)ft_flowlet_begin(ft, fd, kHeaderBytes + j.header.length, &o);
  }

  void start_job(Conn& c) {
    if (c.active || c.jobs.empty() || c.dead) return;
    Job& j = c.jobs.front();
    c.active = true;
    c.phase = Conn::Phase::kHeader;
    c.done = 0;
    encode_header(j.header, c.header);
    if (j.header.status == Status::kOk) {
      c.left = j.header.length;
      c.buf_len = c.buf_sent = 0;
      if (buffered(cfg.data_path) && c.buf == nullptr) attach_buffer(c);
      if (c.registered) declare(c.fd, j);
    }
    post_send(c, c.header, kHeaderBytes);
  }

  // The next submission of the active job, or the next job.
  void advance(Conn& c) {
    Job& j = c.jobs.front();
    if (c.phase == Conn::Phase::kHeader && c.done < kHeaderBytes) {
      post_send(c, c.header + c.done, kHeaderBytes - c.done);
      return;
    }
    if (c.phase == Conn::Phase::kHeader) {
      c.phase = j.header.status == Status::kOk ? Conn::Phase::kData : Conn::Phase::kMessage;
      c.done = 0;
    }
    if (c.phase == Conn::Phase::kMessage && c.done < j.message.size()) {
      post_send(c, j.message.data() + c.done, j.message.size() - c.done);
      return;
    }
    if (c.phase == Conn::Phase::kData) {
      if (c.buf_sent < c.buf_len) {
        post_data_send(c);
        return;
      }
      if (c.left > 0) {
        post_read(c);
        return;
      }
      ++stats.blocks;
    }
    c.jobs.pop_front();
    c.active = false;
    if (c.discard && c.jobs.empty() && !c.half_closed) {
      ::shutdown(c.fd, SHUT_WR);
      c.half_closed = true;
    }
    post_recv(c);
    start_job(c);
  }

  void on_send(Conn& c, int res) {
    if (res <= 0) {
      kill(c);
      return;
    }
    const auto n = static_cast<std::uint64_t>(res);
    // Only blocks are flowlets (an error answer was never declared).
    if (c.registered && c.jobs.front().header.status == Status::kOk) (void)ft_flowlet_sent(ft, c.fd, n);
    if (c.phase == Conn::Phase::kData) {
      c.buf_sent += n;
      stats.bytes += n;
    } else {
      c.done += n;
    }
    advance(c);
  }

  // A zero-copy send's result. When its notification follows (F_MORE), the
  // half stays pending until on_notif(); otherwise it is free now.
  void on_send_zc(Conn& c, unsigned half, int res, bool more) {
    if (!more) {
      --c.zc_pending[half];
      --c.inflight;
    }
    if (c.dead) return;
    // A failed send sent nothing (TCP returns what it sent before an error).
    if ((res == -EINVAL || res == -EOPNOTSUPP) && zero_copy == ZeroCopy::kUntested) {
      if (c.zc_with_report && zc_report) {
        zc_report = false;  // a kernel before 6.2: zero-copy without the report
      } else if (!c.zc_with_report) {
        zero_copy = ZeroCopy::kOff;
        zero_copy_refused(errno_text(-res), "");
      }
      advance(c);  // the same bytes again, as the state now says
      return;
    }
    if (res == -ENOMEM) {
      // Pages of a buffer that is not registered count against
      // RLIMIT_MEMLOCK while the kernel holds them: this connection sends
      // plainly from now on.
      c.plain_sends = true;
      zero_copy_refused(register_error(-res), " where refused");
      advance(c);
      return;
    }
    if (res > 0) {
      if (zero_copy == ZeroCopy::kUntested) zero_copy = ZeroCopy::kWorks;
      ++stats.zc_sends;
    }
    on_send(c, res);
  }
  // The kernel let go of a zero-copy send's pages: a read waiting for this
  // half goes now.
  void on_notif(Conn& c, unsigned half, int res) {
    --c.zc_pending[half];
    --c.inflight;
    if ((static_cast<std::uint32_t>(res) & kZcUsageCopied) != 0) ++stats.zc_copied;
    if (c.read_waits && !c.dead && c.zc_pending[half] == 0 && half != c.half) post_read(c);
  }

  void on_read(Conn& c, int res) {
    if (res <= 0) {  // the file shrank or failed after the header went out
      kill(c);
      return;
    }
    c.buf_len = static_cast<std::size_t>(res);
    c.buf_sent = 0;
    c.left -= static_cast<std::uint64_t>(res);
    advance(c);
  }

  void on_recv(Conn& c, int res) {
    c.recv_posted = false;
    if (res <= 0) {
      c.eof = true;
    } else {
      c.in.append(c.rbuf, static_cast<std::size_t>(res));
      take_requests(c);
      post_recv(c);
    }
    start_job(c);
  }

  // A send failed, the peer stalled or the server stops: no more
  // submissions; the pending ones end soon. Zero-copy sends not yet
  // notified hold pages that the kernel lets go only once their segments
  // are acknowledged, which a stalled peer never does: the socket is reset
  // (SO_LINGER 0) and closed now, which drops its queue and so notifies
  // them. Its file lives on until the submissions still holding it end.
  void kill(Conn& c) {
    if (c.active && !c.dead) ++stats.aborted;
    c.dead = true;
    if (c.fd < 0) return;
    ::shutdown(c.fd, SHUT_RDWR);
    if (c.zc_pending[0] + c.zc_pending[1] == 0) return;
    // What is prepared for this descriptor goes first: a number closed
    // before its submission could name the next accepted connection.
    io_uring_submit(&ring);
    const linger reset{1, 0};
    ::setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    if (c.registered) (void)ft_socket_unregister(ft, c.fd);
    c.registered = false;
    ::close(c.fd);
    c.fd = -1;
  }

  // Connections on which nothing moved for idle_timeout: a peer that says
  // nothing, or stopped reading its answers.
  void sweep() {
    for (std::size_t i = conns.size(); i-- > 0;) {  // maybe_close() swaps in the back
      Conn* c = conns[i].get();
      if (c->fd < 0 || now - c->last_active < idle_timeout) continue;
      if (!c->dead) ++stats.idle_closed;
      kill(*c);
      maybe_close(c);
    }
  }

  // A connection's descriptors and registrations go (its pipe with the
  // record).
  void close_conn(Conn& c) {
    if (c.registered) (void)ft_socket_unregister(ft, c.fd);
    if (c.fd >= 0) ::close(c.fd);
    detach_buffer(c);
  }

  void maybe_close(Conn* c) {
    if (c->inflight > 0) return;
    if (!c->dead && !(c->eof && !c->active && c->jobs.empty())) return;
    close_conn(*c);
    for (auto& p : conns) {
      if (p.get() == c) {
        p = std::move(conns.back());
        conns.pop_back();  // frees the record
        break;
      }
    }
  }

  // ---- DataPath::kSendfile: the plain baseline, a thread per connection ----
  std::mutex threads_mu;
  std::vector<std::thread> threads;
  std::vector<int> thread_fds;

  void serve_blocking(int fd) {
    const bool registered = ft != nullptr && ft_socket_register(ft, fd) == FT_OK;
    // The idle timeout: a recv, send or sendfile that moves nothing for it
    // fails with EAGAIN and the connection is closed.
    set_timeouts(fd, cfg.idle_timeout_ms);
    const auto timed_out = [] { return errno == EAGAIN || errno == EWOULDBLOCK; };
    std::string in;
    char rbuf[2048];
    bool open = true;
    std::vector<Job> jobs;
    while (open) {
      const ssize_t r = ::recv(fd, rbuf, sizeof rbuf, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && timed_out()) ++stats.idle_closed;
      if (r <= 0) break;
      in.append(rbuf, static_cast<std::size_t>(r));
      jobs.clear();
      {
        std::lock_guard lock(threads_mu);  // the map cache
        open = !take_lines(in, [&](Job j) { jobs.push_back(std::move(j)); });
      }
      for (const Job& j : jobs) {
        std::uint8_t h[kHeaderBytes];
        encode_header(j.header, h);
        if (registered) declare(fd, j);
        if (!send_all(fd, h, sizeof h) || !send_all(fd, j.message.data(), j.message.size())) {
          if (timed_out()) ++stats.idle_closed;
          open = false;
          break;
        }
        if (registered && j.header.status == Status::kOk) (void)ft_flowlet_sent(ft, fd, kHeaderBytes);
        off_t off = static_cast<off_t>(j.offset);
        std::uint64_t left = j.header.status == Status::kOk ? j.header.length : 0;
        while (left > 0) {
          const ssize_t w = ::sendfile(fd, j.file, &off, static_cast<std::size_t>(std::min<std::uint64_t>(left, 1u << 30)));
          if (w < 0 && errno == EINTR) continue;
          if (w < 0 && timed_out()) ++stats.idle_closed;
          if (w <= 0) break;
          left -= static_cast<std::uint64_t>(w);
          stats.bytes += static_cast<std::uint64_t>(w);
          if (registered) (void)ft_flowlet_sent(ft, fd, static_cast<std::uint64_t>(w));
        }
        if (left > 0) {
          ++stats.aborted;
          open = false;
          break;
        }
        if (j.header.status == Status::kOk) ++stats.blocks;
      }
    }
    if (registered) (void)ft_socket_unregister(ft, fd);
    ::shutdown(fd, SHUT_RDWR);
  }

  void run_sendfile() {
    pollfd fds[2] = {{listen_fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    for (;;) {
      if (::poll(fds, 2, -1) < 0 && errno != EINTR) throw std::runtime_error("poll: " + errno_text(errno));
      if (fds[1].revents != 0) break;
      if (fds[0].revents == 0) continue;
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      ++stats.connections;
      std::lock_guard lock(threads_mu);
      thread_fds.push_back(fd);
      threads.emplace_back([this, fd] { serve_blocking(fd); });
    }
    {
      std::lock_guard lock(threads_mu);
      for (int fd : thread_fds) ::shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : threads) t.join();
    for (int fd : thread_fds) ::close(fd);
    threads.clear();
    thread_fds.clear();
  }

  // One completion of the ring: dispatched to its connection's handler,
  // whose record goes once nothing is in flight. True for the stop wake-up.
  bool complete(const io_uring_cqe& cqe) {
    auto* op = static_cast<Op*>(io_uring_cqe_get_data(&cqe));
    const int res = cqe.res;
    switch (op->type) {
      case OpType::kAccept: on_accept(res); break;
      case OpType::kAcceptRetry:
        accept_pending = false;
        if (!stopping) post_accept();
        break;
      case OpType::kWake: return true;
      case OpType::kSweep:
        sweep_pending = false;
        if (!stopping) {
          sweep();
          post_sweep();
        }
        break;
      case OpType::kIgnore: break;
      case OpType::kRecv:
        --op->conn->inflight;
        if (res > 0) op->conn->last_active = now;
        on_recv(*op->conn, res);
        maybe_close(op->conn);
        break;
      case OpType::kSendZc: {
        Conn& c = *op->conn;
        c.last_active = now;
        if ((cqe.flags & IORING_CQE_F_NOTIF) != 0) {
          on_notif(c, op->half, res);
        } else {
          on_send_zc(c, op->half, res, (cqe.flags & IORING_CQE_F_MORE) != 0);
        }
        maybe_close(&c);
        break;
      }
      case OpType::kSend:
      case OpType::kRead: {
        Conn& c = *op->conn;
        --c.inflight;
        c.last_active = now;
        // A connection being closed only waits for what is in flight.
        if (!c.dead) op->type == OpType::kSend ? on_send(c, res) : on_read(c, res);
        maybe_close(&c);
        break;
      }
    }
    return false;
  }

  void on_accept(int res) {
    accept_pending = false;
    if (stopping) {
      if (res >= 0) ::close(res);
      return;
    }
    if (res == -EMFILE || res == -ENFILE || res == -ENOBUFS || res == -ENOMEM) {
      // Out of descriptors or memory: accepting again at once would spin.
      std::fprintf(stderr, "flowtune-shuffle: accept: %s (retrying in 10 ms)\n", errno_text(-res).c_str());
      post_accept_retry();
      return;
    }
    post_accept();
    if (res < 0) {
      std::fprintf(stderr, "flowtune-shuffle: accept: %s\n", errno_text(-res).c_str());
      return;
    }
    auto c = std::make_unique<Conn>();
    Conn* const raw = c.get();
    c->fd = res;
    c->recv_op.conn = c->send_op.conn = c->read_op.conn = c->zc_op[0].conn = c->zc_op[1].conn = raw;
    c->last_active = now;
    if (cfg.data_path == DataPath::kSplice) {
      int p[2];
      if (::pipe2(p, O_CLOEXEC) != 0) {
        std::fprintf(stderr, "flowtune-shuffle: pipe: %s\n", errno_text(errno).c_str());
        ::close(c->fd);
        return;
      }
      c->pipe_r.reset(p[0]);
      c->pipe_w.reset(p[1]);
      // A chunk must fit the pipe (1 MiB unless fs.pipe-max-size allows more).
      // A splice moves what the pipe holds: the larger, the fewer rounds.
      (void)::fcntl(p[1], F_SETPIPE_SZ, static_cast<int>(cfg.chunk_bytes));
    }
    if (ft != nullptr) c->registered = ft_socket_register(ft, c->fd) == FT_OK;
    conns.push_back(std::move(c));
    ++stats.connections;
    post_recv(*raw);
  }
};

Server::Server(ServerConfig c) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.cfg = std::move(c);
  if (s.cfg.chunk_bytes < 4096 || s.cfg.chunk_bytes > (64u << 20)) {
    throw std::runtime_error("chunk must be 4 KiB to 64 MiB");
  }
  if (s.cfg.idle_timeout_ms == 0) throw std::runtime_error("idle timeout must be positive");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(s.cfg.port);
  if (::inet_pton(AF_INET, s.cfg.bind.c_str(), &a.sin_addr) != 1) {
    throw std::runtime_error("bad bind address '" + s.cfg.bind + "' (an IPv4 address)");
  }
  s.listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(s.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  // Accepted connections inherit the listener's congestion control.
  if (!s.cfg.congestion.empty() &&
      ::setsockopt(s.listen_fd, IPPROTO_TCP, TCP_CONGESTION, s.cfg.congestion.data(),
                   static_cast<socklen_t>(s.cfg.congestion.size())) != 0) {
    const int e = errno;
    ::close(s.listen_fd);
    throw std::runtime_error("cannot use congestion control '" + s.cfg.congestion + "': " + errno_text(e));
  }
  if (::bind(s.listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(s.listen_fd, 512) != 0) {
    const int e = errno;
    ::close(s.listen_fd);
    throw std::runtime_error("cannot listen on " + s.cfg.bind + ":" + std::to_string(s.cfg.port) +
                             ": " + errno_text(e));
  }
  socklen_t len = sizeof a;
  ::getsockname(s.listen_fd, reinterpret_cast<sockaddr*>(&a), &len);
  s.port = ntohs(a.sin_port);
  s.wake_fd = ::eventfd(0, EFD_CLOEXEC);
  if (const int r = io_uring_queue_init(512, &s.ring, 0); r < 0) {
    ::close(s.listen_fd);
    ::close(s.wake_fd);
    throw std::runtime_error("io_uring: " + errno_text(-r));
  }
  s.ring_ready = true;
  s.idle_timeout = std::chrono::milliseconds(s.cfg.idle_timeout_ms);
  // A quarter of the timeout, 10 ms to 1 s: a connection goes within 1.25x
  // its timeout (at most 1 s late), and 60 s of timeout costs a sweep a second.
  const std::uint32_t every_ms = std::clamp<std::uint32_t>(s.cfg.idle_timeout_ms / 4, 10, 1000);
  s.sweep_every = {every_ms / 1000, static_cast<long long>(every_ms % 1000) * 1'000'000};
  if (buffered(s.cfg.data_path)) {
    // A sparse table pins nothing: each connection's buffer is registered
    // (and counted against RLIMIT_MEMLOCK) when it first needs it.
    if (const int r = io_uring_register_buffers_sparse(&s.ring, kBufferSlots); r < 0) {
      s.no_slot_why = Impl::register_error(-r);
    } else {
      for (unsigned k = kBufferSlots; k-- > 0;) s.free_slots.push_back(k);
    }
  }
  if (s.cfg.data_path == DataPath::kReadZc) {
    io_uring_probe* probe = io_uring_get_probe_ring(&s.ring);
    if (probe == nullptr || !io_uring_opcode_supported(probe, IORING_OP_SEND_ZC)) {
      s.zero_copy = Impl::ZeroCopy::kOff;
      s.zero_copy_refused("no IORING_OP_SEND_ZC before kernel 6.0", "");
    }
    if (probe != nullptr) io_uring_free_probe(probe);
  }
  if (s.cfg.flowtune) {
    ft_config fc;
    ft_config_init(&fc);
    if (ft_client_open(&fc, &s.ft) != FT_OK) {
      std::fprintf(stderr, "flowtune-shuffle: warning: no libflowtune client: serving unpaced\n");
      s.ft = nullptr;
    }
  }
}

Server::~Server() {
  Impl& s = *impl_;
  // run() drains every submission before it returns; if it threw instead,
  // operations may still be in flight on these connections' memory. The
  // ring goes first (its exit cancels them, asynchronously), and a
  // connection with operations in flight is left allocated rather than
  // handed back to the heap while the kernel could write into it.
  if (s.ring_ready) io_uring_queue_exit(&s.ring);
  s.ring_ready = false;
  for (std::unique_ptr<Conn>& c : s.conns) {
    c->buf_slot = -1;  // the ring and its table are gone
    if (c->inflight > 0) {
      // Its receive buffer, headers and buffer may still be written by the
      // kernel's cancellation: the whole record is left allocated, on
      // purpose (its pipe too).
      if (c->fd >= 0) ::close(c->fd);
      (void)c.release();
      continue;
    }
    s.close_conn(*c);
  }
  s.conns.clear();
  s.maps.clear();
  if (s.ft != nullptr) ft_client_close(s.ft);
  ::close(s.listen_fd);
  ::close(s.wake_fd);
}

std::uint16_t Server::port() const { return impl_->port; }
const ServerStats& Server::stats() const { return impl_->stats; }
bool Server::flowtune_active() const { return impl_->ft != nullptr; }
bool Server::zero_copy() const {
  return impl_->cfg.data_path == DataPath::kReadZc && impl_->zero_copy != Impl::ZeroCopy::kOff;
}
bool Server::flowtune_stats(ft_stats* out) const {
  return impl_->ft != nullptr && ft_client_stats(impl_->ft, out) == FT_OK;
}

void Server::stop() {
  const std::uint64_t one = 1;
  (void)!::write(impl_->wake_fd, &one, sizeof one);
}

void Server::run() {
  Impl& s = *impl_;
  if (s.cfg.data_path == DataPath::kSendfile) {
    s.run_sendfile();
    return;
  }
  s.now = Clock::now();
  s.post_accept();
  s.post_wake();
  s.post_sweep();
  // On stop: shut every connection and the listener down, then reap until
  // nothing the kernel could still write into is in flight.
  const auto begin_stop = [&] {
    s.stopping = true;
    ::shutdown(s.listen_fd, SHUT_RDWR);
    s.cancel_sweep();
    std::vector<Conn*> all;
    for (const std::unique_ptr<Conn>& c : s.conns) all.push_back(c.get());
    for (Conn* c : all) {
      s.kill(*c);
      s.maybe_close(c);
    }
  };
  for (;;) {
    if (s.stopping && s.conns.empty() && !s.accept_pending && !s.sweep_pending) return;
    const int r = io_uring_submit_and_wait(&s.ring, 1);
    // EBUSY/EAGAIN: completions must be reaped first; below.
    if (r < 0 && r != -EINTR && r != -EBUSY && r != -EAGAIN) {
      throw std::runtime_error("io_uring: " + errno_text(-r));
    }
    s.now = Clock::now();
    io_uring_cqe* cqe = nullptr;
    unsigned head = 0, seen = 0;
    bool stop_now = false;
    io_uring_for_each_cqe(&s.ring, head, cqe) {
      ++seen;
      if (s.complete(*cqe)) stop_now = true;
    }
    io_uring_cq_advance(&s.ring, seen);
    if (stop_now && !s.stopping) begin_stop();
  }
}

}  // namespace flowtune::shuffle
