// The shuffle server's private parts, shared by its files: the records of
// a connection, its operations and its answers, and Server::Impl, the
// io_uring loop and its state. server.cc holds the loop, the requests and
// the answers every path shares; each data path has its own file:
// server_read.cc (kRead, kReadZc: registered buffers, zero-copy send),
// server_splice.cc (kSplice) and server_sendfile.cc (kSendfile, a blocking
// thread per connection).
#pragma once

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
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "flowtune/common/fd.h"
#include "flowtune/flowtune.h"
#include "service.h"

namespace flowtune::shuffle {

using Clock = std::chrono::steady_clock;

inline std::string errno_text(int e) { return std::strerror(e); }

// The paths that read blocks into a per-connection buffer.
inline bool buffered(DataPath p) { return p == DataPath::kRead || p == DataPath::kReadZc; }

// Zero-copy send (IORING_OP_SEND_ZC, kernel 6.0). Its result CQE carries
// IORING_CQE_F_MORE when a notification CQE (IORING_CQE_F_NOTIF, same
// user_data) follows: only then may the kernel's pages of the buffer be
// written again. liburing 2.3's header predates the usage report (kernel
// 6.2), which says in the notification whether the kernel copied after all.
inline constexpr unsigned kZcReportUsage = 1U << 3;        // IORING_SEND_ZC_REPORT_USAGE
inline constexpr std::uint32_t kZcUsageCopied = 1U << 31;  // IORING_NOTIF_USAGE_ZC_COPIED

// Registered-buffer slots (a sparse table, filled as connections need
// buffers); a connection past them reads into a plain buffer.
inline constexpr unsigned kBufferSlots = 1024;
inline constexpr std::size_t kPageBytes = 4096;
// Registered buffers are pinned (with CAP_IPC_LOCK nothing else bounds
// them): past this many bytes a connection reads into a plain buffer.
inline constexpr std::size_t kMaxPinnedBytes = std::size_t{256} << 20;

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

// A map output, opened on first use.
struct MapFile {
  UniqueFd fd;
  MapIndex index;
};

enum class OpType : std::uint8_t {
  kAccept,
  kAcceptRetry,
  kWake,
  kSweep,
  kIgnore,
  kRecv,
  kSend,
  kSendZc,
  kRead
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
  bool eof = false;  // the peer closed
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
  std::size_t buf_pinned = 0;   // bytes registered with buf_slot
  unsigned half = 0;            // the half holding the latest chunk (kRead: always 0)
  int zc_pending[2] = {0, 0};   // zero-copy sends from each half not yet notified
  bool read_waits = false;      // the next read waits for its half's notification
  bool zc_with_report = false;  // the last zero-copy send asked for the usage report
  bool plain_sends = false;     // kReadZc: zero-copy refused on this connection (ENOMEM)
  // Data bytes read (or spliced into the pipe) and not yet sent.
  std::size_t buf_len = 0, buf_sent = 0;
  UniqueFd pipe_r, pipe_w;  // DataPath::kSplice
  char rbuf[2048];
};

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

  io_uring_sqe* sqe();

  void post_accept();
  // `op` completes after `after` (the kernel copies it on submission).
  void post_timeout(__kernel_timespec& after, Op& op, bool& pending);
  void post_accept_retry() { post_timeout(retry_after, retry_op, accept_pending); }
  void post_sweep() { post_timeout(sweep_every, sweep_op, sweep_pending); }
  void post_wake();
  void cancel_sweep();
  void post_recv(Conn& c);
  void post_send(Conn& c, const void* p, std::size_t n);
  char* chunk(Conn& c, unsigned half) const {
    return c.buf.get() + std::size_t{half} * cfg.chunk_bytes;
  }

  // The next chunk of the block: read into the buffer (kReadZc: into the
  // other half, once its zero-copy sends are notified), or spliced into
  // the connection's pipe.
  void post_read(Conn& c);
  void post_data_send(Conn& c);
  // The read paths (server_read.cc): a chunk read into the connection's
  // buffer at `at` of `file` (kReadZc: into the other half, once its
  // zero-copy sends are notified), and the buffer sent (kReadZc: zero-copy
  // while the kernel takes it).
  void post_buffered_read(Conn& c, int file, std::uint64_t at, std::size_t n);
  void post_buffered_send(Conn& c, std::size_t n);
  // The sparse table of registered buffers, and whether zero-copy send is
  // there, as the data path uses them (at construction).
  void prepare_buffers();
  // The splice path (server_splice.cc): a chunk of `file` spliced into the
  // connection's pipe, and n bytes of the pipe spliced into the socket.
  void post_splice_read(Conn& c, int file, std::uint64_t at, std::size_t n);
  void post_splice_send(Conn& c, std::size_t n);
  // The connection's pipe; false, having said why, when there is none.
  bool open_pipe(Conn& c);

  // ---- Registered buffers (kRead, kReadZc) ----

  // Says once per server why a buffer is not registered; the connection
  // reads into it plainly, nothing else changes.
  void buffers_refused(const std::string& why);
  // Says once per server why zero-copy send is not used (`where`: on every
  // connection, or where refused).
  void zero_copy_refused(const std::string& why, const char* where);
  static std::string register_error(int e);
  // The connection's buffer, page-aligned, registered in a free slot when
  // the kernel takes it.
  void attach_buffer(Conn& c);
  // Only once nothing in flight can touch the buffer (inflight == 0).
  void detach_buffer(Conn& c);

  // The block a request names, or why not.
  Job lookup(const Fetch& f);
  static Job error(Status s, std::string message);

  // The answer to one request line.
  Job answer(std::string_view line);

  // Complete request lines in `in` become answers, in order; true when what
  // is left can no longer be a request (over 128 bytes), after its error.
  template <typename Push>
  bool take_lines(std::string& in, Push push) {
    if (!take_request_lines(in, [&](std::string_view line) { push(answer(line)); })) return false;
    ++stats.bad_requests;
    push(error(Status::kBadRequest, kRequestTooLong));
    return true;
  }

  void take_requests(Conn& c);

  // A block is a flowlet of its header and bytes, in the request's coflow.
  void declare(int fd, const Job& j);

  void start_job(Conn& c);

  // The next submission of the active job, or the next job.
  void advance(Conn& c);

  void on_send(Conn& c, int res);

  // A zero-copy send's result. When its notification follows (F_MORE), the
  // half stays pending until on_notif(); otherwise it is free now.
  void on_send_zc(Conn& c, unsigned half, int res, bool more);
  // The kernel let go of a zero-copy send's pages: a read waiting for this
  // half goes now.
  void on_notif(Conn& c, unsigned half, int res);

  void on_read(Conn& c, int res);

  void on_recv(Conn& c, int res);

  // A send failed, the peer stalled or the server stops: no more
  // submissions; the pending ones end soon. Zero-copy sends not yet
  // notified hold pages that the kernel lets go only once their segments
  // are acknowledged, which a stalled peer never does: the socket is reset
  // (SO_LINGER 0) and closed now, which drops its queue and so notifies
  // them. Its file lives on until the submissions still holding it end.
  void kill(Conn& c);

  // Connections on which nothing moved for idle_timeout: a peer that says
  // nothing, or stopped reading its answers.
  void sweep();

  // A connection's descriptors and registrations go (its pipe with the
  // record).
  void close_conn(Conn& c);

  void maybe_close(Conn* c);

  // ---- DataPath::kSendfile: the plain baseline, a thread per connection ----
  std::mutex threads_mu;
  std::vector<std::thread> threads;
  std::vector<int> thread_fds;

  void serve_blocking(int fd);

  void run_sendfile();

  // One completion of the ring: dispatched to its connection's handler,
  // whose record goes once nothing is in flight. True for the stop wake-up.
  bool complete(const io_uring_cqe& cqe);

  void on_accept(int res);
};

}  // namespace flowtune::shuffle
