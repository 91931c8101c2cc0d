#include "runtime.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "control_thread.h"
#include "flowtune/common/curve.h"
#include "flowtune/common/endpoint.h"
#include "flowtune/wire/codec.h"
#include "fork_guard.h"

namespace flowtune::client {

// ---- owners ----

// libzmq and libsodium take process-wide locks while a context is made and
// ended: forks wait for both (fork_guard.h).
void ZmqContextCloser::operator()(void* ctx) const {
  ForkShield shield;
  (void)zmq_ctx_term(ctx);
}
void ZmqSocketCloser::operator()(void* sock) const { (void)zmq_close(sock); }

// ---- Runtime ----

namespace {
std::atomic<bool> g_shares_fd_table{false};
}  // namespace

bool runtime_shares_fd_table() { return g_shares_fd_table.load(std::memory_order_acquire); }
void note_shared_fd_table() { g_shares_fd_table.store(true, std::memory_order_release); }

std::uint64_t Runtime::now_us() const { return micros_since(start_ns_); }

void Runtime::log(int level, const std::string& text) const {
  if (level <= config_.log_level) log_to_stderr(pidfd_.get(), text);
}

int Runtime::wake_signal() { return control_wake_signal(); }

void Runtime::run(std::promise<int>* ready) {
  inbox_.enter();
  // Named so that operators (top -H) and benchmarks can tell its CPU from
  // the application's; ZeroMQ names its own threads ZMQbg/*.
  (void)pthread_setname_np(pthread_self(), "ft-runtime");
  // Every signal is blocked here (and in ZeroMQ's threads, which inherit the
  // mask): the wake-up stays pending for the signalfd, and the program's
  // own signals go to its own threads, never to a handler running on ours
  // (which could, say, fork while this thread holds a lock).
  sigset_t all;
  sigfillset(&all);
  (void)pthread_sigmask(SIG_BLOCK, &all, nullptr);
  private_table_ = enter_private_table();
  if (!private_table_) note_shared_fd_table();
  const int rc = open_all();
  if (rc != FT_OK) {
    loop_.unwatch_all();  // a start that failed half way: nothing to run
    loop_close_rc_ = close_all();
    inbox_.leave();
    ready->set_value(rc);
    return;
  }
  ready->set_value(FT_OK);
  turn();  // a first hello once the host is known
  // The loop blocks only if nothing is queued or marked in the table after
  // it said it sleeps (WakeFlag holds the fences that make this hold); else
  // it polls, and takes a turn if nothing else woke it.
  loop_.run([this] { return inbox_.prepare_to_sleep(table_, napping_); },
            [this] { inbox_.flag.woke(); }, [this] { turn(); });
  loop_close_rc_ = close_all();
  inbox_.leave();
}

void Runtime::signal_self() const { inbox_.signal(); }

bool Runtime::push(const Event& e, bool urgent) {
  if (!inbox_.queue.push(e)) {
    published_.queue_overflows.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  if (urgent) wake();
  return true;
}

void Runtime::wake() {
  if (inbox_.wake()) wakeups_sent_.fetch_add(1, std::memory_order_relaxed);
}

int Runtime::stop() {
  if (!thread_.joinable()) return 0;
  stopping_.store(true, std::memory_order_release);
  signal_self();
  thread_.join();
  return loop_close_rc_;
}

void Runtime::receive() {
  for (;;) {
    int events = 0;
    std::size_t len = sizeof events;
    if (zmq_getsockopt(zmq_sock_.get(), ZMQ_EVENTS, &events, &len) != 0 ||
        (events & ZMQ_POLLIN) == 0) {
      return;
    }
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, zmq_sock_.get(), ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&msg);
      return;
    }
    wire::AllocatorMessage m;
    const auto* data = static_cast<const std::uint8_t*>(zmq_msg_data(&msg));
    const wire::DecodeStatus st = wire::decode({data, zmq_msg_size(&msg)}, &m);
    zmq_msg_close(&msg);
    if (!st.ok()) {
      log(2, std::string("ignored a bad message from the allocator: ") + st.detail);
      continue;
    }
    for (const auto& e : m.errors) log(3, "allocator: " + e.text);
    session_.on_message(m, now_us());
    for (const Notice& n : session_.take_notices()) log(n.level, n.text);
  }
}

void Runtime::apply_actions() {
  for (const PacingAction& a : session_.take_actions()) {
    int err = 0;
    const auto r = port_->set_rate(a.socket, a.bytes_per_sec, &err);
    if (r == SocketTable::Result::kOk) {
      (a.bytes_per_sec != 0 ? published_.rates_applied : published_.rates_cleared)
          .fetch_add(1, std::memory_order_relaxed);
    } else if (r == SocketTable::Result::kFailed) {
      published_.pacing_failures.fetch_add(1, std::memory_order_relaxed);
      if (!pacing_failure_logged_) {
        pacing_failure_logged_ = true;
        log(1, std::string("cannot pace sockets (SO_MAX_PACING_RATE): ") + std::strerror(err) +
                   "; flowlets run unpaced");
      }
    }
  }
}

void Runtime::turn() {
  // Read once: every step below sees the same answer, so a stop cannot
  // close the handles of a turn that did not send the final ends.
  const bool stopping = stopping_.load(std::memory_order_acquire);
  port_->on_ready();  // an agent's processes: their events into the queue
  drain(now_us());
  receive();
  timers(now_us());
  if (monitor_ && !stopping) watch_connection(now_us());
  flush(now_us(), stopping);
  publish();
  if (stopping) {
    close_handles();
    return;
  }
  arm_timer();
}

void Runtime::on_register(SocketRef s, const wire::FiveTuple& tuple, std::uint32_t mss,
                          const FlowletPolicy& defaults, std::uint64_t now) {
  session_.on_register(s, tuple, mss, now, defaults);
}
void Runtime::on_unregister(SocketRef s, std::uint64_t now) { session_.on_unregister(s, now); }
void Runtime::on_begin(SocketRef s, std::uint64_t bytes, const std::optional<FlowletPolicy>& policy,
                       std::uint64_t now) {
  session_.on_begin(s, bytes, policy, now);
}
void Runtime::on_sent(SocketRef s, std::uint64_t bytes, std::uint64_t now) {
  session_.on_sent(s, bytes, now);
}
void Runtime::on_wrote(SocketRef s, std::uint64_t bytes, std::uint64_t now) {
  session_.on_wrote(s, bytes, now);
}
void Runtime::on_unsent(SocketRef s, std::uint64_t unsent, bool writing, std::uint64_t now) {
  session_.on_unsent(s, unsent, now, writing);
}

void Runtime::on_end(SocketRef ref, std::uint64_t now) {
  // The Session lists every end in take_ended(), and the runtime clears the
  // application's flowlet bit for each. An end the application asked for
  // must not: the bit was cleared by ft_flowlet_end already, and the
  // application may have begun its next flowlet since (clearing it then made
  // that flowlet's end fail with FT_ENOFLOWLET). Ends the library decided
  // (advance end, lease) stay listed.
  for (const SocketRef& r : session_.take_ended()) ended_.push_back(r);
  session_.on_end(ref, now);
  (void)session_.take_ended();
}

void Runtime::drain(std::uint64_t now) {
  if (intake_.drain(now, *this)) linger_until_us_ = now + kLingerUs;
}

bool LocalPort::look(SocketRef ref, Look* out) {
  // A socket that cannot be asked (closed under us) counts as drained.
  if (table_.unsent_bytes(ref, &out->unsent) != SocketTable::Result::kOk) out->unsent = 0;
  // Writing first, then the bytes gathered: bytes a call reported before
  // it ended are then collected here, not left for a later event.
  out->writing = table_.writing(ref);
  out->unreported = table_.take_unreported(ref);
  return true;
}

void Runtime::timers(std::uint64_t now) {
  session_.on_timer(now);
  // Drain checks may end flowlets, which queues more actions and events.
  for (const SocketRef& ref : session_.take_drain_queries()) {
    SocketPort::Look look;
    if (!port_->look(ref, &look)) continue;  // answered later (kUnsent)
    if (look.unreported != 0) session_.on_wrote(ref, look.unreported, now);
    session_.on_unsent(ref, look.unsent, now, look.writing);
  }
}

void Runtime::flush(std::uint64_t now, bool stopping) {
  apply_actions();
  for (const SocketRef& ref : session_.take_ended()) ended_.push_back(ref);
  for (const SocketRef& ref : ended_) port_->clear_flowlet(ref);
  ended_.clear();
  if (stopping) {
    // Last words: end every flowlet the allocator knows of.
    session_.end_all(now);
    apply_actions();
  }
  while (auto m = session_.take_message(now)) {
    const std::vector<std::uint8_t> bytes = wire::encode(*m);
    if (zmq_send(zmq_sock_.get(), bytes.data(), bytes.size(), ZMQ_DONTWAIT) < 0) {
      session_.on_send_failed(now);  // the queue is full: resend state later
      break;
    }
  }
  port_->flush();
  receive();  // a send can consume ZMQ_FD's edge: look again
}

void Runtime::publish() {
  const SessionStats& s = session_.stats();
  // The session's counters are copied; the runtime's own are counted in place.
#define FT_PUBLISH_session(name) published_.name.store(s.name, std::memory_order_relaxed);
#define FT_PUBLISH_runtime(name)
#define FT_PUBLISH_(name, owner, what) FT_PUBLISH_##owner(name)
  FT_STATS_COUNTERS(FT_PUBLISH_)
#undef FT_PUBLISH_
#undef FT_PUBLISH_runtime
#undef FT_PUBLISH_session
  published_.connected.store(s.connected ? 1 : 0, std::memory_order_relaxed);
}

void Runtime::close_handles() { loop_.unwatch_all(); }

void Runtime::arm_timer() {
  std::uint64_t next = session_.next_timer_us();
  // Events do not wake a napping loop: look at the queue every kPollUs
  // while a flowlet is in progress or the last event is recent.
  // A swept batch waiting for a producer to finish writing its cell: soon.
  const std::uint64_t now = now_us();
  const bool recent = session_.active_flowlets() > 0 || now < linger_until_us_;
  if ((config_.nap && recent) || intake_.waiting() || port_->busy()) {
    next = std::min(next, now + kPollUs);
  }
  if (endpoints_.size() > 1 && failover_wanted(now_us())) next = std::min(next, next_move_us_);
  napping_ = next <= now + kPollUs;
  itimerspec spec{};
  if (next != UINT64_MAX) {
    const std::uint64_t in_us = next > now ? next - now : 1;
    spec.it_value.tv_sec = static_cast<time_t>(in_us / 1'000'000);
    spec.it_value.tv_nsec = static_cast<long>((in_us % 1'000'000) * 1000);
  }
  // A nap ends only by this timer: without it, sleep deeply (wake-ups on).
  if (timerfd_settime(timer_fd_.get(), 0, &spec, nullptr) != 0) napping_ = false;
}

ft_stats Runtime::stats() const {
  ft_stats s{};
#define FT_LOAD_(name, owner, what) s.name = published_.name.load(std::memory_order_relaxed);
  FT_STATS_COUNTERS(FT_LOAD_)
#undef FT_LOAD_
  s.connected = published_.connected.load(std::memory_order_relaxed);
  return s;
}

}  // namespace flowtune::client
