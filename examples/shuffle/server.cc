#include <arpa/inet.h>
#include <fcntl.h>
#include <liburing.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <unordered_map>

#include "flowtune/flowtune.h"
#include "service.h"

namespace flowtune::shuffle {

namespace {

std::string errno_text(int e) { return std::strerror(e); }

// A map output, opened on first use.
struct MapFile {
  int fd = -1;
  MapIndex index;
};

enum class OpType : std::uint8_t { kAccept, kWake, kRecv, kSend, kRead };
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
  bool eof = false;   // the peer closed, or its request cannot be read further
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
  std::size_t buf_len = 0, buf_sent = 0;
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
  }
  void post_wake() {
    io_uring_sqe* s = sqe();
    io_uring_prep_read(s, wake_fd, &wake_value, sizeof wake_value, 0);
    io_uring_sqe_set_data(s, &wake_op);
  }
  void post_recv(Conn& c) {
    if (c.recv_posted || c.eof || c.dead || c.jobs.size() >= cfg.max_pipelined) return;
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
  void post_read(Conn& c) {
    const Job& j = c.jobs.front();
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(c.left, cfg.chunk_bytes));
    const std::uint64_t at = j.offset + (j.header.length - c.left);
    io_uring_sqe* s = sqe();
    io_uring_prep_read(s, j.file, c.buf.data(), static_cast<unsigned>(n), at);
    io_uring_sqe_set_data(s, &c.read_op);
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

  // Complete request lines become jobs; a line that is too long ends the
  // connection after its error.
  void take_requests(Conn& c) {
    std::size_t start = 0;
    for (;;) {
      const std::size_t nl = c.in.find('\n', start);
      if (nl == std::string::npos) break;
      auto parsed = parse_fetch(std::string_view(c.in).substr(start, nl - start));
      if (auto* f = std::get_if<Fetch>(&parsed)) {
        c.jobs.push_back(lookup(*f));
        if (c.jobs.back().header.status == Status::kNotFound) ++stats.not_found;
      } else {
        c.jobs.push_back(error(Status::kBadRequest, std::get<std::string>(parsed)));
        ++stats.bad_requests;
      }
      start = nl + 1;
    }
    c.in.erase(0, start);
    if (c.in.size() > kMaxRequestLine) {
      c.jobs.push_back(error(Status::kBadRequest, "request longer than 128 bytes"));
      ++stats.bad_requests;
      c.in.clear();
      c.eof = true;
    }
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
      if (c.buf.empty()) c.buf.resize(cfg.chunk_bytes);
      if (c.registered) {
        ft_flowlet_opts o;
        ft_flowlet_opts_init(&o);
        o.coflow_id = j.coflow;
        (void)ft_flowlet_begin(ft, c.fd, kHeaderBytes + j.header.length, &o);
      }
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
        post_send(c, c.buf.data() + c.buf_sent, c.buf_len - c.buf_sent);
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
    post_recv(c);
    start_job(c);
  }

  void on_send(Conn& c, int res) {
    if (res <= 0) {
      kill(c);
      return;
    }
    const auto n = static_cast<std::uint64_t>(res);
    if (c.registered) (void)ft_flowlet_sent(ft, c.fd, n);
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

  void maybe_close(Conn* c) {
    if (c->inflight > 0) return;
    if (!c->dead && !(c->eof && !c->active && c->jobs.empty())) return;
    if (c->registered) (void)ft_socket_unregister(ft, c->fd);
    ::close(c->fd);
    for (auto& p : conns) {
      if (p == c) {
        p = conns.back();
        conns.pop_back();
        break;
      }
    }
    delete c;
  }

  void on_accept(int res) {
    post_accept();
    if (res < 0) {
      std::fprintf(stderr, "flowtune-shuffle: accept: %s\n", errno_text(-res).c_str());
      return;
    }
    auto* c = new Conn;
    c->fd = res;
    c->recv_op.conn = c->send_op.conn = c->read_op.conn = c;
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
  for (Conn* c : s.conns) {
    if (c->registered) (void)ft_socket_unregister(s.ft, c->fd);
    ::close(c->fd);
    delete c;
  }
  for (auto& [k, m] : s.maps) ::close(m.fd);
  if (s.ft != nullptr) ft_client_close(s.ft);
  if (s.ring_ready) io_uring_queue_exit(&s.ring);
  ::close(s.listen_fd);
  ::close(s.wake_fd);
}

std::uint16_t Server::port() const { return impl_->port; }
const ServerStats& Server::stats() const { return impl_->stats; }
bool Server::flowtune_active() const { return impl_->ft != nullptr; }

void Server::stop() {
  const std::uint64_t one = 1;
  (void)!::write(impl_->wake_fd, &one, sizeof one);
}

void Server::run() {
  Impl& s = *impl_;
  s.post_accept();
  s.post_wake();
  for (;;) {
    const int r = io_uring_submit_and_wait(&s.ring, 1);
    if (r < 0 && r != -EINTR) throw std::runtime_error("io_uring: " + errno_text(-r));
    io_uring_cqe* cqe = nullptr;
    unsigned head = 0, seen = 0;
    bool stopping = false;
    io_uring_for_each_cqe(&s.ring, head, cqe) {
      ++seen;
      auto* op = static_cast<Op*>(io_uring_cqe_get_data(cqe));
      const int res = cqe->res;
      switch (op->type) {
        case OpType::kAccept: s.on_accept(res); break;
        case OpType::kWake: stopping = true; break;
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
    if (stopping) return;
  }
}

}  // namespace flowtune::shuffle
