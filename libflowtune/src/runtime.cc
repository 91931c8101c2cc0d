#include "runtime.h"

#include <sys/timerfd.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "flowtune/wire/codec.h"

namespace flowtune::client {

// ---- EventQueue ----

EventQueue::EventQueue(std::size_t capacity_pow2)
    : cells_(new Cell[capacity_pow2]), mask_(capacity_pow2 - 1) {
  for (std::size_t i = 0; i < capacity_pow2; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
}

bool EventQueue::push(const Event& e) {
  std::uint64_t pos = head_.load(std::memory_order_relaxed);
  for (;;) {
    Cell& c = cells_[pos & mask_];
    const std::uint64_t seq = c.seq.load(std::memory_order_acquire);
    if (seq == pos) {
      if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        c.event = e;
        c.seq.store(pos + 1, std::memory_order_release);
        return true;
      }
    } else if (seq < pos) {
      return false;  // the consumer has not freed this cell: full
    } else {
      pos = head_.load(std::memory_order_relaxed);
    }
  }
}

bool EventQueue::pop(Event* e) {
  const std::uint64_t pos = tail_.load(std::memory_order_relaxed);
  Cell& c = cells_[pos & mask_];
  if (c.seq.load(std::memory_order_acquire) != pos + 1) return false;
  *e = c.event;
  c.seq.store(pos + mask_ + 1, std::memory_order_release);
  tail_.store(pos + 1, std::memory_order_relaxed);
  return true;
}

bool EventQueue::empty() const {
  const std::uint64_t pos = tail_.load(std::memory_order_relaxed);
  return cells_[pos & mask_].seq.load(std::memory_order_seq_cst) != pos + 1;
}

// ---- Runtime ----

namespace {

constexpr std::size_t kQueueCapacity = 1 << 14;

Runtime* self(uv_handle_t* h) { return static_cast<Runtime*>(h->data); }

}  // namespace

Runtime::Runtime(RuntimeConfig config, SessionConfig session, SocketTable& table)
    : config_(std::move(config)), table_(table), session_(std::move(session)),
      queue_(kQueueCapacity),
      start_ns_(std::chrono::steady_clock::now().time_since_epoch().count()) {}

Runtime::~Runtime() { stop(); }

std::uint64_t Runtime::now_us() const {
  const std::int64_t ns = std::chrono::steady_clock::now().time_since_epoch().count();
  return static_cast<std::uint64_t>((ns - start_ns_) / 1000) + 1;
}

void Runtime::log(int level, const std::string& text) const {
  if (level <= config_.log_level) std::fprintf(stderr, "flowtune: %s\n", text.c_str());
}

int Runtime::start() {
  zmq_ctx_ = zmq_ctx_new();
  if (zmq_ctx_ == nullptr) return FT_ERUNTIME;
  zmq_sock_ = zmq_socket(zmq_ctx_, ZMQ_DEALER);
  if (zmq_sock_ == nullptr) return FT_ERUNTIME;
  // Messages wait in ZeroMQ while the connection is being made (a short
  // program's flowlets would otherwise be lost), up to a small queue; past
  // it a send fails at once and the session resyncs later.
  const int hwm = 1000;
  zmq_setsockopt(zmq_sock_, ZMQ_SNDHWM, &hwm, sizeof hwm);
  if (zmq_connect(zmq_sock_, config_.allocator.c_str()) != 0) {
    log(1, "cannot use allocator endpoint \"" + config_.allocator + "\": " + zmq_strerror(zmq_errno()));
    return FT_ECONNECT;
  }
  timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (timer_fd_ < 0) return FT_ERUNTIME;
  int zfd = -1;
  std::size_t len = sizeof zfd;
  zmq_getsockopt(zmq_sock_, ZMQ_FD, &zfd, &len);

  if (uv_loop_init(&loop_) != 0) return FT_ERUNTIME;
  uv_async_init(&loop_, &wake_, [](uv_async_t* h) { self(reinterpret_cast<uv_handle_t*>(h))->work(); });
  uv_poll_init(&loop_, &zmq_poll_, zfd);
  uv_poll_init(&loop_, &timer_poll_, timer_fd_);
  uv_prepare_init(&loop_, &prepare_);
  uv_check_init(&loop_, &check_);
  for (uv_handle_t* h : {reinterpret_cast<uv_handle_t*>(&wake_), reinterpret_cast<uv_handle_t*>(&zmq_poll_),
                         reinterpret_cast<uv_handle_t*>(&timer_poll_),
                         reinterpret_cast<uv_handle_t*>(&prepare_), reinterpret_cast<uv_handle_t*>(&check_)}) {
    h->data = this;
  }
  uv_poll_start(&zmq_poll_, UV_READABLE,
                [](uv_poll_t* h, int, int) { self(reinterpret_cast<uv_handle_t*>(h))->work(); });
  uv_poll_start(&timer_poll_, UV_READABLE, [](uv_poll_t* h, int, int) {
    Runtime* r = self(reinterpret_cast<uv_handle_t*>(h));
    std::uint64_t expirations;
    (void)::read(r->timer_fd_, &expirations, sizeof expirations);
    r->work();
  });
  // Producers wake the loop only while it may block: the flag is raised
  // before polling and the queue re-checked, so no urgent push goes
  // unnoticed (others are picked up by the timer, see arm_timer).
  uv_prepare_start(&prepare_, [](uv_prepare_t* h) {
    Runtime* r = self(reinterpret_cast<uv_handle_t*>(h));
    r->sleeping_.store(true, std::memory_order_seq_cst);
    if (!r->queue_.empty()) {
      r->sleeping_.store(false, std::memory_order_relaxed);
      uv_async_send(&r->wake_);
    }
  });
  uv_check_start(&check_, [](uv_check_t* h) {
    self(reinterpret_cast<uv_handle_t*>(h))->sleeping_.store(false, std::memory_order_relaxed);
  });
  try {
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    return FT_ERUNTIME;
  }
  return FT_OK;
}

void Runtime::run() {
  work();  // a first hello once the host is known
  uv_run(&loop_, UV_RUN_DEFAULT);
}

bool Runtime::push(const Event& e, bool urgent) {
  if (!queue_.push(e)) {
    published_.queue_overflows.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  if (urgent && sleeping_.load(std::memory_order_seq_cst) && sleeping_.exchange(false)) {
    uv_async_send(&wake_);
  }
  return true;
}

void Runtime::stop() {
  if (!thread_.joinable()) {
    if (zmq_sock_ != nullptr) zmq_close(zmq_sock_);
    if (zmq_ctx_ != nullptr) zmq_ctx_term(zmq_ctx_);
    if (timer_fd_ >= 0) ::close(timer_fd_);
    zmq_sock_ = zmq_ctx_ = nullptr;
    timer_fd_ = -1;
    return;
  }
  stopping_.store(true);
  uv_async_send(&wake_);
  thread_.join();
  uv_loop_close(&loop_);
  // The final ends may wait up to 200 ms for delivery, but only to an
  // allocator that answered: an absent one must not delay the exit.
  const int linger_ms = session_.stats().connected ? 200 : 0;
  zmq_setsockopt(zmq_sock_, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
  zmq_close(zmq_sock_);
  zmq_ctx_term(zmq_ctx_);
  ::close(timer_fd_);
  zmq_sock_ = zmq_ctx_ = nullptr;
  timer_fd_ = -1;
}

void Runtime::receive() {
  for (;;) {
    int events = 0;
    std::size_t len = sizeof events;
    if (zmq_getsockopt(zmq_sock_, ZMQ_EVENTS, &events, &len) != 0 || (events & ZMQ_POLLIN) == 0) {
      return;
    }
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, zmq_sock_, ZMQ_DONTWAIT) < 0) {
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
    const auto r = table_.set_rate(a.socket, a.bytes_per_sec, &err);
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

void Runtime::work() {
  std::uint64_t now = now_us();
  Event e;
  while (queue_.pop(&e)) {
    switch (e.kind) {
      case Event::kRegister: session_.on_register(e.ref, e.tuple, e.mss, now); break;
      case Event::kUnregister: session_.on_unregister(e.ref, now); break;
      case Event::kBegin: session_.on_begin(e.ref, e.bytes, e.weight, e.coflow_id, now); break;
      case Event::kSent: session_.on_sent(e.ref, e.bytes, now); break;
      case Event::kWrote: {
        const std::uint64_t bytes = e.bytes + table_.take_unreported(e.ref);
        if (bytes != 0) session_.on_wrote(e.ref, bytes, now);
        break;
      }
      case Event::kEnd: session_.on_end(e.ref, now); break;
    }
  }
  receive();
  now = now_us();
  session_.on_timer(now);
  // Drain checks may end flowlets, which queues more actions and events.
  for (const SocketRef& ref : session_.take_drain_queries()) {
    // A socket that cannot be asked (closed under us) counts as drained.
    std::uint64_t unsent = 0;
    if (table_.unsent_bytes(ref, &unsent) != SocketTable::Result::kOk) unsent = 0;
    // Writing first, then the bytes gathered: bytes a call reported before
    // it ended are then collected here, not left for a later event.
    const bool writing = table_.writing(ref);
    if (const std::uint64_t bytes = table_.take_unreported(ref); bytes != 0) {
      session_.on_wrote(ref, bytes, now);
    }
    session_.on_unsent(ref, unsent, now, writing);
  }
  apply_actions();
  for (const SocketRef& ref : session_.take_ended()) table_.clear_flowlet(ref);
  if (stopping_.load()) {
    // Last words: end every flowlet the allocator knows of.
    session_.end_all(now);
    apply_actions();
  }
  while (auto m = session_.take_message(now)) {
    const std::vector<std::uint8_t> bytes = wire::encode(*m);
    if (zmq_send(zmq_sock_, bytes.data(), bytes.size(), ZMQ_DONTWAIT) < 0) {
      session_.on_send_failed(now);  // the queue is full: resend state later
      break;
    }
  }
  receive();  // a send can consume ZMQ_FD's edge: look again
  const SessionStats& s = session_.stats();
  published_.flowlets_started.store(s.flowlets_started, std::memory_order_relaxed);
  published_.flowlets_ended.store(s.flowlets_ended, std::memory_order_relaxed);
  published_.flowlets_coalesced.store(s.flowlets_coalesced, std::memory_order_relaxed);
  published_.mice.store(s.mice, std::memory_order_relaxed);
  published_.ends_in_advance.store(s.ends_in_advance, std::memory_order_relaxed);
  published_.resyncs.store(s.resyncs, std::memory_order_relaxed);
  published_.allocator_errors.store(s.allocator_errors, std::memory_order_relaxed);
  published_.connected.store(s.connected ? 1 : 0, std::memory_order_relaxed);
  if (stopping_.load()) {
    uv_close(reinterpret_cast<uv_handle_t*>(&wake_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&zmq_poll_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&timer_poll_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&prepare_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&check_), nullptr);
    return;
  }
  arm_timer();
}

void Runtime::arm_timer() {
  std::uint64_t next = session_.next_timer_us();
  // Non-urgent events do not wake the loop: look at the queue every
  // kPollUs while a flowlet is in progress.
  if (session_.active_flowlets() > 0) next = std::min(next, now_us() + kPollUs);
  itimerspec spec{};
  if (next != UINT64_MAX) {
    const std::uint64_t now = now_us();
    const std::uint64_t in_us = next > now ? next - now : 1;
    spec.it_value.tv_sec = static_cast<time_t>(in_us / 1'000'000);
    spec.it_value.tv_nsec = static_cast<long>((in_us % 1'000'000) * 1000);
  }
  timerfd_settime(timer_fd_, 0, &spec, nullptr);
}

ft_stats Runtime::stats() const {
  ft_stats s{};
  s.flowlets_started = published_.flowlets_started.load(std::memory_order_relaxed);
  s.flowlets_ended = published_.flowlets_ended.load(std::memory_order_relaxed);
  s.flowlets_coalesced = published_.flowlets_coalesced.load(std::memory_order_relaxed);
  s.mice = published_.mice.load(std::memory_order_relaxed);
  s.ends_in_advance = published_.ends_in_advance.load(std::memory_order_relaxed);
  s.rates_applied = published_.rates_applied.load(std::memory_order_relaxed);
  s.rates_cleared = published_.rates_cleared.load(std::memory_order_relaxed);
  s.pacing_failures = published_.pacing_failures.load(std::memory_order_relaxed);
  s.resyncs = published_.resyncs.load(std::memory_order_relaxed);
  s.allocator_errors = published_.allocator_errors.load(std::memory_order_relaxed);
  s.queue_overflows = published_.queue_overflows.load(std::memory_order_relaxed);
  s.connected = published_.connected.load(std::memory_order_relaxed);
  return s;
}

}  // namespace flowtune::client
