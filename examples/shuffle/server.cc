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

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <stdexcept>
#include <unordered_map>

#include "flowtune/flowtune.h"
#include "service.h"

namespace flowtune::shuffle {

const char* to_string(DataPath p) {
  switch (p) {
    case DataPath::kRead: return "read";
    case DataPath::kSplice: return "splice";
    case DataPath::kSendfile: return "sendfile";
  }
  return "?";
}

namespace {

std::string errno_text(int e) { return std::strerror(e); }

// A map output, opened on first use.
struct MapFile {
  int fd = -1;
  MapIndex index;
};

enum class OpType : std::uint8_t { kAccept, kAcceptRetry, kWake, kRecv, kSend, kRead };
struct Conn;
struct Op {
  OpType type;
  Conn* conn = nullptr;
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
  int inflight = 0;
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
  std::vector<char> buf;
  // Data bytes read (or spliced into the pipe) and not yet sent.
  std::size_t buf_len = 0, buf_sent = 0;
  int pipe_r = -1, pipe_w = -1;  // DataPath::kSplice
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
  std::unordered_map<std::uint64_t, MapFile> maps;
  std::vector<Conn*> conns;

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
  void post_accept_retry() {
    io_uring_sqe* s = sqe();
    io_uring_prep_timeout(s, &retry_after, 0, 0);
    io_uring_sqe_set_data(s, &retry_op);
    accept_pending = true;
  }
  void post_wake() {
    io_uring_sqe* s = sqe();
    io_uring_prep_read(s, wake_fd, &wake_value, sizeof wake_value, 0);
    io_uring_sqe_set_data(s, &wake_op);
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
  // The next chunk of the block: read into the buffer, or spliced into the
  // connection's pipe.
  void post_read(Conn& c) {
    const Job& j = c.jobs.front();
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(c.left, cfg.chunk_bytes));
    const std::uint64_t at = j.offset + (j.header.length - c.left);
    io_uring_sqe* s = sqe();
    if (cfg.data_path == DataPath::kSplice) {
      io_uring_prep_splice(s, j.file, static_cast<std::int64_t>(at), c.pipe_w, -1,
                           static_cast<unsigned>(n), 0);
    } else {
      io_uring_prep_read(s, j.file, c.buf.data(), static_cast<unsigned>(n), at);
    }
    io_uring_sqe_set_data(s, &c.read_op);
    ++c.inflight;
  }
  void post_data_send(Conn& c) {
    if (cfg.data_path != DataPath::kSplice) {
      post_send(c, c.buf.data() + c.buf_sent, c.buf_len - c.buf_sent);
      return;
    }
    io_uring_sqe* s = sqe();
    io_uring_prep_splice(s, c.pipe_r, -1, c.fd, -1, static_cast<unsigned>(c.buf_len - c.buf_sent), 0);
    io_uring_sqe_set_data(s, &c.send_op);
    ++c.inflight;
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
      const int ifd = ::open(ipath.c_str(), O_RDONLY | O_CLOEXEC);
      if (ifd < 0) return error(Status::kNotFound, "no map output " + ipath);
      std::string bytes;
      char tmp[65536];
      ssize_t n;
      while ((n = ::read(ifd, tmp, sizeof tmp)) > 0 && bytes.size() < (64u << 20)) bytes.append(tmp, static_cast<std::size_t>(n));
      ::close(ifd);
      std::string why;
      auto ix = decode_index(bytes, &why);
      if (!ix) return error(Status::kServerError, ipath + ": " + why);
      const std::string dpath = data_path(cfg.dir, f.shuffle, f.map);
      m.fd = ::open(dpath.c_str(), O_RDONLY | O_CLOEXEC);
      struct stat st {};
      if (m.fd < 0 || ::fstat(m.fd, &st) != 0 ||
          static_cast<std::uint64_t>(st.st_size) != ix->offsets.back()) {
        if (m.fd >= 0) ::close(m.fd);
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
    j.file = m.fd;
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
    std::size_t start = 0, nl;
    while ((nl = in.find('\n', start)) != std::string::npos) {
      push(answer(std::string_view(in).substr(start, nl - start)));
      start = nl + 1;
    }
    in.erase(0, start);
    if (in.size() <= kMaxRequestLine) return false;
    ++stats.bad_requests;
    push(error(Status::kBadRequest, "request longer than 128 bytes"));
    in.clear();
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
      if (cfg.data_path == DataPath::kRead && c.buf.empty()) c.buf.resize(cfg.chunk_bytes);
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

  // A send failed: no more submissions; the pending ones end soon.
  void kill(Conn& c) {
    if (c.active && !c.dead) ++stats.aborted;
    c.dead = true;
    ::shutdown(c.fd, SHUT_RDWR);
  }

  // A connection's descriptors and registration go, then the record.
  void release(Conn* c) {
    if (c->registered) (void)ft_socket_unregister(ft, c->fd);
    ::close(c->fd);
    if (c->pipe_r >= 0) ::close(c->pipe_r);
    if (c->pipe_w >= 0) ::close(c->pipe_w);
    delete c;
  }

  void maybe_close(Conn* c) {
    if (c->inflight > 0) return;
    if (!c->dead && !(c->eof && !c->active && c->jobs.empty())) return;
    for (auto& p : conns) {
      if (p == c) {
        p = conns.back();
        conns.pop_back();
        break;
      }
    }
    release(c);
  }

  // ---- DataPath::kSendfile: the plain baseline, a thread per connection ----
  std::mutex threads_mu;
  std::vector<std::thread> threads;
  std::vector<int> thread_fds;

  void serve_blocking(int fd) {
    const bool registered = ft != nullptr && ft_socket_register(ft, fd) == FT_OK;
    std::string in;
    char rbuf[2048];
    bool open = true;
    std::vector<Job> jobs;
    while (open) {
      const ssize_t r = ::recv(fd, rbuf, sizeof rbuf, 0);
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
          open = false;
          break;
        }
        if (registered && j.header.status == Status::kOk) (void)ft_flowlet_sent(ft, fd, kHeaderBytes);
        off_t off = static_cast<off_t>(j.offset);
        std::uint64_t left = j.header.status == Status::kOk ? j.header.length : 0;
        while (left > 0) {
          const ssize_t w = ::sendfile(fd, j.file, &off, static_cast<std::size_t>(std::min<std::uint64_t>(left, 1u << 30)));
          if (w < 0 && errno == EINTR) continue;
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
    auto* c = new Conn;
    c->fd = res;
    c->recv_op.conn = c->send_op.conn = c->read_op.conn = c;
    if (cfg.data_path == DataPath::kSplice) {
      int p[2];
      if (::pipe2(p, O_CLOEXEC) != 0) {
        std::fprintf(stderr, "flowtune-shuffle: pipe: %s\n", errno_text(errno).c_str());
        ::close(c->fd);
        delete c;
        return;
      }
      c->pipe_r = p[0];
      c->pipe_w = p[1];
      // A chunk must fit the pipe (1 MiB unless fs.pipe-max-size allows more).
      // A splice moves what the pipe holds: the larger, the fewer rounds.
      (void)::fcntl(p[1], F_SETPIPE_SZ, static_cast<int>(cfg.chunk_bytes));
    }
    if (ft != nullptr) c->registered = ft_socket_register(ft, c->fd) == FT_OK;
    conns.push_back(c);
    ++stats.connections;
    post_recv(*c);
  }
};

Server::Server(ServerConfig c) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.cfg = std::move(c);
  if (s.cfg.chunk_bytes < 4096 || s.cfg.chunk_bytes > (64u << 20)) {
    throw std::runtime_error("chunk must be 4 KiB to 64 MiB");
  }
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
  for (Conn* c : s.conns) s.release(c);
  for (auto& [k, m] : s.maps) ::close(m.fd);
  if (s.ft != nullptr) ft_client_close(s.ft);
  if (s.ring_ready) io_uring_queue_exit(&s.ring);
  ::close(s.listen_fd);
  ::close(s.wake_fd);
}

std::uint16_t Server::port() const { return impl_->port; }
const ServerStats& Server::stats() const { return impl_->stats; }
bool Server::flowtune_active() const { return impl_->ft != nullptr; }
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
  s.post_accept();
  s.post_wake();
  // On stop: shut every connection and the listener down, then reap until
  // nothing the kernel could still write into is in flight.
  const auto begin_stop = [&] {
    s.stopping = true;
    ::shutdown(s.listen_fd, SHUT_RDWR);
    for (Conn* c : std::vector<Conn*>(s.conns)) {
      s.kill(*c);
      s.maybe_close(c);
    }
  };
  for (;;) {
    if (s.stopping && s.conns.empty() && !s.accept_pending) return;
    const int r = io_uring_submit_and_wait(&s.ring, 1);
    // EBUSY/EAGAIN: completions must be reaped first; below.
    if (r < 0 && r != -EINTR && r != -EBUSY && r != -EAGAIN) {
      throw std::runtime_error("io_uring: " + errno_text(-r));
    }
    io_uring_cqe* cqe = nullptr;
    unsigned head = 0, seen = 0;
    bool stop_now = false;
    io_uring_for_each_cqe(&s.ring, head, cqe) {
      ++seen;
      auto* op = static_cast<Op*>(io_uring_cqe_get_data(cqe));
      const int res = cqe->res;
      switch (op->type) {
        case OpType::kAccept: s.on_accept(res); break;
        case OpType::kAcceptRetry:
          s.accept_pending = false;
          if (!s.stopping) s.post_accept();
          break;
        case OpType::kWake: stop_now = true; break;
        case OpType::kRecv:
          --op->conn->inflight;
          s.on_recv(*op->conn, res);
          s.maybe_close(op->conn);
          break;
        case OpType::kSend:
        case OpType::kRead: {
          Conn& c = *op->conn;
          --c.inflight;
          // A connection being closed only waits for what is in flight.
          if (!c.dead) op->type == OpType::kSend ? s.on_send(c, res) : s.on_read(c, res);
          s.maybe_close(&c);
          break;
        }
      }
    }
    io_uring_cq_advance(&s.ring, seen);
    if (stop_now && !s.stopping) begin_stop();
  }
}

}  // namespace flowtune::shuffle
