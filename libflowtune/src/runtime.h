// The client's runtime thread: an epoll loop (event_loop.h) that owns the ZeroMQ DEALER
// socket to the allocator and the Session, takes application events from a
// lock-free queue, and applies rates through the SocketTable.
//
// Application threads only push to the queue (and wake the loop when it
// sleeps); they never wait for the network. The loop wakes on: a wake-up
// signal (kWakeSignal sent to the runtime thread alone with tgkill, blocked
// there and read through a signalfd), the ZeroMQ socket (its ZMQ_FD, edge-triggered, so
// ZMQ_EVENTS is re-read after every operation), and a timerfd armed at the
// Session's next deadline (heartbeat, lease expiry, drain check) with
// microsecond precision.
//
// Private descriptor table. The runtime thread unshares its fd table
// (unshare(CLONE_FILES)) before it opens anything, and creates the ZeroMQ
// context (whose I/O threads share the creator's table), the loop, the
// timer and the signalfd there. So an application that closes every fd
// (closefrom(3), close_range, even as raw syscalls) cannot close ours, and
// nothing of ours can land on a number the application uses. The inherited
// copies of the application's fds are closed at once (a copy would hold the
// application's sockets and pipes open: no FIN, no EOF), and 0-2 are
// /dev/null so nothing of ours takes those numbers. The runtime reaches an
// application socket with pidfd_getfd() for one setsockopt/ioctl, checks
// its SO_COOKIE and closes the copy at once. Where pidfd_getfd() is refused
// (seccomp), the runtime runs in the shared table as before (see
// docs/libflowtune.md for what that cannot protect).
//
// Hot standby. `allocator` may list several endpoints, comma-separated (a
// standby pair, docs/scale.md). The DEALER is connected to one at a time;
// the runtime moves to the next when ZeroMQ reports the connection lost or
// refused (a socket monitor), when the allocator answers `standby`, or when
// a hello or rate request has gone unanswered for two heartbeats (a hung
// allocator whose connection lives). The Session then says hello and
// resyncs to the next one at once, and ignores late messages of the one it
// left (their epoch). After a round of the list without an answer the next
// round waits, 10 ms doubling to a quarter heartbeat or 100 ms.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend.h"
#include "control_thread.h"
#include "event_loop.h"
#include "event_queue.h"
#include "flowtune/common/curve.h"
#include "flowtune/common/fd.h"
#include "flowtune/flowtune.h"
#include "intake.h"
#include "pacing.h"
#include "session.h"
#include "wakeup.h"

namespace flowtune::client {

// Where the runtime's decisions about sockets land: the process's own
// sockets (through its SocketTable), or, in a host agent, the sockets of
// the processes it serves (agent/). Runtime thread only.
class SocketPort {
 public:
  virtual ~SocketPort() = default;
  // Sets SO_MAX_PACING_RATE (0 clears it) if s is still registered.
  virtual SocketTable::Result set_rate(SocketRef s, std::uint64_t bytes_per_sec, int* err) = 0;
  struct Look {
    std::uint64_t unsent = 0;      // bytes the kernel has not sent
    bool writing = false;          // a write call is in progress
    std::uint64_t unreported = 0;  // bytes written that no event reported yet
  };
  // A look at s's queue: true with the answer in *out, or false when it
  // comes later (an event kWrote for the unreported bytes, then kUnsent).
  virtual bool look(SocketRef s, Look* out) = 0;
  // The library ended s's flowlet (advance end, lease): clear the
  // application's flowlet bit.
  virtual void clear_flowlet(SocketRef s) = 0;
  // The end of a turn: hand over what the calls above gathered.
  virtual void flush() {}
  // A descriptor the runtime's loop watches for the port (-1: none); a
  // turn begins with on_ready() (runtime thread).
  virtual int watch_fd() const { return -1; }
  virtual void on_ready() {}
  // The port holds work it could not hand over yet: look again soon.
  virtual bool busy() const { return false; }
};

// The port of a process's own sockets.
class LocalPort final : public SocketPort {
 public:
  explicit LocalPort(SocketTable& table) : table_(table) {}
  SocketTable::Result set_rate(SocketRef s, std::uint64_t bytes_per_sec, int* err) override {
    return table_.set_rate(s, bytes_per_sec, err);
  }
  bool look(SocketRef s, Look* out) override;
  void clear_flowlet(SocketRef s) override { table_.clear_flowlet(s); }

 private:
  SocketTable& table_;
};

struct RuntimeConfig {
  std::string allocator;
  int log_level = 2;
  // The session's heartbeat (ft_config.heartbeat_ms): also paces ZeroMQ's
  // own liveness checks of the connection (see open_all).
  std::uint32_t heartbeat_ms = 1000;
  // Events the queue holds (a power of two). Small values are for tests:
  // past a full queue, events go to their socket's slot (see SocketTable).
  std::size_t queue_capacity = std::size_t{1} << 14;
  // Run in a private fd table (see above). A host agent's runtime shares
  // its process's table: its port writes to connections other threads
  // accept.
  bool private_fd_table = true;
  // Nap while flowlets are in progress: look at the queue every kPollUs,
  // so application threads need not wake the thread. A host agent's queue
  // is filled on the runtime thread itself, from its loop: it never naps.
  bool nap = true;
};

// Owners of what the runtime opens, so every exit path of start() (and a
// thread that never started) releases it.
struct ZmqContextCloser {
  void operator()(void* ctx) const;
};
struct ZmqSocketCloser {
  void operator()(void* sock) const;
};
using ZmqContext = std::unique_ptr<void, ZmqContextCloser>;
using ZmqSocket = std::unique_ptr<void, ZmqSocketCloser>;

// True once some runtime of this process stayed in the shared fd table (the
// fallback, or a TSan build): then the preload shim keeps the descriptors
// that the library's threads create out of the application's closefrom /
// close_range / close. Set before that runtime opens anything.
bool runtime_shares_fd_table();
// Marks that a thread of this process stayed in the shared table.
void note_shared_fd_table();

// Moves the calling thread into a private fd table whose only copies of
// the application's fds are reached through *pidfd (set on the table too);
// false if pidfd_getfd() is refused here (the thread stays shared).
bool enter_private_fd_table(SocketTable& table, UniqueFd* pidfd);

class Runtime final : public Backend, private IntakeSink {
 public:
  // port: where rates and looks go; null: the table's sockets.
  Runtime(RuntimeConfig config, SessionConfig session, SocketTable& table,
          SocketPort* port = nullptr);
  ~Runtime() override;
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // FT_OK, FT_ECONNECT (bad endpoint) or FT_ERUNTIME. On failure nothing
  // stays open.
  int start() override;
  // Ends every reported flowlet (best effort), stops and joins the thread,
  // closes everything. Returns EventLoop::close()'s result (0: the loop
  // stopped watching before it closed), which tests assert; later calls
  // return 0.
  int stop() override;
  // Any thread: wakes the runtime if it sleeps (something was recorded in
  // the SocketTable rather than queued).
  void wake() override;
  // Whether the runtime thread runs in its own fd table (after start()).
  bool private_fd_table() const { return private_table_; }
  // The signal that wakes the runtime thread: real-time, so it is queued
  // apart from standard signals; sent to that thread only (tgkill) and
  // blocked there, so no handler runs and no disposition changes.
  static int wake_signal();

  // Any thread. False when the queue is full (the event is dropped).
  // urgent: wake the runtime now if it sleeps deeply (a flowlet begins);
  // other events (bytes handed over) wait for its next look. While a
  // flowlet is in progress, and for kLingerUs after the last event, the
  // runtime naps: it looks every kPollUs by itself, so no event, urgent or
  // not, costs the caller a wake-up syscall. Only the first event after a
  // quiet spell wakes it.
  bool push(const Event& e, bool urgent = true) override;
  static constexpr std::uint64_t kPollUs = 1000;
  static constexpr std::uint64_t kLingerUs = 100'000;
  // Wake-up signals sent so far (any thread; for tests and benchmarks).
  std::uint64_t wakeups_sent() const { return wakeups_sent_.load(std::memory_order_relaxed); }
  ft_stats stats() const override;

 private:
  void run(std::promise<int>* ready);
  // Moves the calling (runtime) thread into a private fd table; false if
  // pidfd_getfd() is refused here (the thread stays in the shared table).
  bool enter_private_table();
  // Opens the ZeroMQ socket, timer, signalfd and loop (runtime thread):
  // FT_OK, FT_ECONNECT (no usable allocator endpoint or CURVE key, logged)
  // or FT_ERUNTIME. The steps, each false/failing on the first error:
  int open_all();
  bool open_socket();        // context, DEALER, queue and heartbeat options
  int connect_allocators();  // endpoints checked, CURVE, connect, monitor
  bool apply_curve();        // FLOWTUNE_CURVE_* keys onto the DEALER (logged)
  bool open_wakeups();       // timerfd, signalfd and the loop's watches
  // Closes everything open_all opened (runtime thread: those numbers are
  // only meaningful in its table). Returns EventLoop::close()'s result.
  int close_all();
  void signal_self() const;
  // One turn; see the top of this file.
  void turn();
  void drain(std::uint64_t now);
  // The application's events, from the intake into the session.
  void on_register(SocketRef s, const wire::FiveTuple& tuple, std::uint32_t mss,
                   const FlowletPolicy& defaults, std::uint64_t now) override;
  void on_unregister(SocketRef s, std::uint64_t now) override;
  void on_begin(SocketRef s, std::uint64_t bytes, const std::optional<FlowletPolicy>& policy,
                std::uint64_t now) override;
  void on_sent(SocketRef s, std::uint64_t bytes, std::uint64_t now) override;
  void on_wrote(SocketRef s, std::uint64_t bytes, std::uint64_t now) override;
  // An end the application asked for (see the .cc for why it differs).
  void on_end(SocketRef s, std::uint64_t now) override;
  void on_unsent(SocketRef s, std::uint64_t unsent, bool writing, std::uint64_t now) override;
  void timers(std::uint64_t now);
  void flush(std::uint64_t now, bool stopping);
  void publish();
  void close_handles();
  void receive();
  void apply_actions();
  void arm_timer();
  // Hot standby (several allocators listed): see the top of this file.
  int open_monitor();
  void read_monitor();
  // The monitor's news: a new allocator key to follow, a failover.
  void watch_connection(std::uint64_t now);
  void follow_server_key(std::uint64_t now);
  void failover(std::uint64_t now);
  void rotate(std::uint64_t now);
  bool failover_wanted(std::uint64_t now) const;
  void log(int level, const std::string& text) const;
  std::uint64_t now_us() const;

  RuntimeConfig config_;
  SocketTable& table_;
  Session session_;
  ControlInbox inbox_;

  // Declared in reverse order of closing: the loop (its handles poll the
  // fds below) goes first, the ZeroMQ context last.
  ZmqContext zmq_ctx_;
  ZmqSocket zmq_sock_;
  ZmqSocket monitor_;  // the DEALER's connection events (several allocators, or a key file)
  UniqueFd timer_fd_;
  UniqueFd signal_fd_;
  UniqueFd pidfd_;
  EventLoop loop_;
  std::thread thread_;
  bool private_table_ = false;
  int loop_close_rc_ = 0;  // set by the runtime thread as it exits
  // Set by arm_timer: the timer fires within kPollUs, so the loop naps.
  bool napping_ = false;
  std::atomic<std::uint64_t> wakeups_sent_{0};
  // Until then the runtime keeps looking every kPollUs (the last event
  // it took plus kLingerUs).
  std::uint64_t linger_until_us_ = 0;
  std::atomic<bool> stopping_{false};
  Intake intake_{inbox_.queue, table_};
  LocalPort local_port_{table_};
  SocketPort* port_;
  // Flowlets the library ended, whose application bit flush() clears.
  std::vector<SocketRef> ended_;
  std::int64_t start_ns_;

  // The allocators listed, the one connected, and the failover's state.
  std::vector<std::string> endpoints_;
  std::size_t current_ = 0;
  bool endpoint_lost_ = false;      // the monitor saw it drop or refuse
  std::size_t tried_in_round_ = 0;  // moves since the last acknowledgement
  std::uint64_t round_backoff_us_ = 0;
  std::uint64_t next_move_us_ = 0;  // not before then
  bool was_registered_ = false;
  // CURVE's keys, the allocator's followed from its file when it rotates.
  std::optional<curve::ClientKeys> curve_;
  std::uint64_t next_key_check_us_ = 0;
  std::string key_error_logged_;

  // Published by the runtime thread for ft_client_stats().
  // Every counter of FT_STATS_COUNTERS (flowtune.h), generated from it.
  struct Published {
#define FT_PUBLISHED_FIELD_(name, owner, what) std::atomic<std::uint64_t> name{0};
    FT_STATS_COUNTERS(FT_PUBLISHED_FIELD_)
#undef FT_PUBLISHED_FIELD_
    std::atomic<int> connected{0};
  };
  mutable Published published_;
  bool pacing_failure_logged_ = false;
};

}  // namespace flowtune::client
