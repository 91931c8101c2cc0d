#include "server_internal.h"

namespace flowtune::shuffle {

const char* to_string(DataPath p) {
  switch (p) {
    case DataPath::kRead:
      return "read";
    case DataPath::kReadZc:
      return "read-zc";
    case DataPath::kSplice:
      return "splice";
    case DataPath::kSendfile:
      return "sendfile";
  }
  return "?";
}

io_uring_sqe* Server::Impl::sqe() {
  io_uring_sqe* s = io_uring_get_sqe(&ring);
  if (s == nullptr) {
    io_uring_submit(&ring);
    s = io_uring_get_sqe(&ring);
  }
  if (s == nullptr) throw std::runtime_error("io_uring submission queue full");
  return s;
}

void Server::Impl::post_accept() {
  io_uring_sqe* s = sqe();
  io_uring_prep_accept(s, listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  io_uring_sqe_set_data(s, &accept_op);
  accept_pending = true;
}

void Server::Impl::post_timeout(__kernel_timespec& after, Op& op, bool& pending) {
  io_uring_sqe* s = sqe();
  io_uring_prep_timeout(s, &after, 0, 0);
  io_uring_sqe_set_data(s, &op);
  pending = true;
}

void Server::Impl::post_wake() {
  io_uring_sqe* s = sqe();
  io_uring_prep_read(s, wake_fd, &wake_value, sizeof wake_value, 0);
  io_uring_sqe_set_data(s, &wake_op);
}

void Server::Impl::cancel_sweep() {
  if (!sweep_pending) return;
  io_uring_sqe* s = sqe();
  io_uring_prep_timeout_remove(s, reinterpret_cast<__u64>(&sweep_op), 0);
  io_uring_sqe_set_data(s, &ignore_op);
}

void Server::Impl::post_recv(Conn& c) {
  if (c.recv_posted || c.eof || c.dead || (!c.discard && c.jobs.size() >= cfg.max_pipelined))
    return;
  io_uring_sqe* s = sqe();
  io_uring_prep_recv(s, c.fd, c.rbuf, sizeof c.rbuf, 0);
  io_uring_sqe_set_data(s, &c.recv_op);
  c.recv_posted = true;
  ++c.inflight;
}

void Server::Impl::post_send(Conn& c, const void* p, std::size_t n) {
  io_uring_sqe* s = sqe();
  io_uring_prep_send(s, c.fd, p, n, MSG_NOSIGNAL);
  io_uring_sqe_set_data(s, &c.send_op);
  ++c.inflight;
}

void Server::Impl::post_read(Conn& c) {
  const Job& j = c.jobs.front();
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(c.left, cfg.chunk_bytes));
  const std::uint64_t at = j.offset + (j.header.length - c.left);
  if (cfg.data_path == DataPath::kSplice) {
    post_splice_read(c, j.file, at, n);
  } else {
    post_buffered_read(c, j.file, at, n);
  }
}

void Server::Impl::post_data_send(Conn& c) {
  const std::size_t n = c.buf_len - c.buf_sent;
  if (cfg.data_path == DataPath::kSplice) {
    post_splice_send(c, n);
  } else {
    post_buffered_send(c, n);
  }
}

Job Server::Impl::lookup(const Fetch& f) {
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
    while ((n = ::read(ifd.get(), tmp, sizeof tmp)) > 0 && bytes.size() < (64u << 20))
      bytes.append(tmp, static_cast<std::size_t>(n));
    auto ix = decode_index(bytes);
    if (!ix) return error(Status::kServerError, ipath + ": " + ix.error().message);
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

Job Server::Impl::error(Status s, std::string message) {
  Job j;
  j.header = {s, message.size(), crc32c(0, message.data(), message.size())};
  j.message = std::move(message);
  return j;
}

Job Server::Impl::answer(std::string_view line) {
  auto parsed = parse_fetch(line);
  if (auto* f = std::get_if<Fetch>(&parsed)) {
    Job j = lookup(*f);
    if (j.header.status == Status::kNotFound) ++stats.not_found;
    return j;
  }
  ++stats.bad_requests;
  return error(Status::kBadRequest, std::get<std::string>(parsed));
}

void Server::Impl::take_requests(Conn& c) {
  if (c.discard) {
    c.in.clear();
    return;
  }
  if (take_lines(c.in, [&](Job j) { c.jobs.push_back(std::move(j)); })) c.discard = true;
}

void Server::Impl::declare(int fd, const Job& j) {
  if (j.header.status != Status::kOk) return;
  ft_flowlet_opts o;
  ft_flowlet_opts_init(&o);
  o.coflow_id = j.coflow;
  (void)ft_flowlet_begin(ft, fd, kHeaderBytes + j.header.length, &o);
}

void Server::Impl::start_job(Conn& c) {
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

void Server::Impl::advance(Conn& c) {
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

void Server::Impl::on_send(Conn& c, int res) {
  if (res <= 0) {
    kill(c);
    return;
  }
  const auto n = static_cast<std::uint64_t>(res);
  // Only blocks are flowlets (an error answer was never declared).
  if (c.registered && c.jobs.front().header.status == Status::kOk)
    (void)ft_flowlet_sent(ft, c.fd, n);
  if (c.phase == Conn::Phase::kData) {
    c.buf_sent += n;
    stats.bytes += n;
  } else {
    c.done += n;
  }
  advance(c);
}

void Server::Impl::on_read(Conn& c, int res) {
  if (res <= 0) {  // the file shrank or failed after the header went out
    kill(c);
    return;
  }
  c.buf_len = static_cast<std::size_t>(res);
  c.buf_sent = 0;
  c.left -= static_cast<std::uint64_t>(res);
  advance(c);
}

void Server::Impl::on_recv(Conn& c, int res) {
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

void Server::Impl::kill(Conn& c) {
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

void Server::Impl::sweep() {
  for (std::size_t i = conns.size(); i-- > 0;) {  // maybe_close() swaps in the back
    Conn* c = conns[i].get();
    if (c->fd < 0 || now - c->last_active < idle_timeout) continue;
    if (!c->dead) ++stats.idle_closed;
    kill(*c);
    maybe_close(c);
  }
}

void Server::Impl::close_conn(Conn& c) {
  if (c.registered) (void)ft_socket_unregister(ft, c.fd);
  if (c.fd >= 0) ::close(c.fd);
  detach_buffer(c);
}

void Server::Impl::maybe_close(Conn* c) {
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

bool Server::Impl::complete(const io_uring_cqe& cqe) {
  auto* op = static_cast<Op*>(io_uring_cqe_get_data(&cqe));
  const int res = cqe.res;
  switch (op->type) {
    case OpType::kAccept:
      on_accept(res);
      break;
    case OpType::kAcceptRetry:
      accept_pending = false;
      if (!stopping) post_accept();
      break;
    case OpType::kWake:
      return true;
    case OpType::kSweep:
      sweep_pending = false;
      if (!stopping) {
        sweep();
        post_sweep();
      }
      break;
    case OpType::kIgnore:
      break;
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

void Server::Impl::on_accept(int res) {
  accept_pending = false;
  if (stopping) {
    if (res >= 0) ::close(res);
    return;
  }
  if (res == -EMFILE || res == -ENFILE || res == -ENOBUFS || res == -ENOMEM) {
    // Out of descriptors or memory: accepting again at once would spin.
    std::fprintf(stderr, "flowtune-shuffle: accept: %s (retrying in 10 ms)\n",
                 errno_text(-res).c_str());
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
  if (cfg.data_path == DataPath::kSplice && !open_pipe(*c)) {
    ::close(c->fd);
    return;
  }
  if (ft != nullptr) c->registered = ft_socket_register(ft, c->fd) == FT_OK;
  conns.push_back(std::move(c));
  ++stats.connections;
  post_recv(*raw);
}

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
    throw std::runtime_error("cannot use congestion control '" + s.cfg.congestion +
                             "': " + errno_text(e));
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
  s.prepare_buffers();
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
