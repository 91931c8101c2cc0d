#include "server_internal.h"

// DataPath::kSplice: each chunk spliced from the file into the
// connection's pipe and from the pipe into the socket, with no copy
// through user space.

namespace flowtune::shuffle {

void Server::Impl::post_splice_read(Conn& c, int file, std::uint64_t at, std::size_t n) {
  io_uring_sqe* s = sqe();
  io_uring_prep_splice(s, file, static_cast<std::int64_t>(at), c.pipe_w.get(), -1,
                       static_cast<unsigned>(n), 0);
  io_uring_sqe_set_data(s, &c.read_op);
  ++c.inflight;
}

void Server::Impl::post_splice_send(Conn& c, std::size_t n) {
  io_uring_sqe* s = sqe();
  io_uring_prep_splice(s, c.pipe_r.get(), -1, c.fd, -1, static_cast<unsigned>(n), 0);
  io_uring_sqe_set_data(s, &c.send_op);
  ++c.inflight;
}

bool Server::Impl::open_pipe(Conn& c) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "flowtune-shuffle: pipe: %s\n", errno_text(errno).c_str());
    return false;
  }
  c.pipe_r.reset(p[0]);
  c.pipe_w.reset(p[1]);
  // A chunk must fit the pipe (1 MiB unless fs.pipe-max-size allows more).
  // A splice moves what the pipe holds: the larger, the fewer rounds.
  (void)::fcntl(p[1], F_SETPIPE_SZ, static_cast<int>(cfg.chunk_bytes));
  return true;
}

}  // namespace flowtune::shuffle
