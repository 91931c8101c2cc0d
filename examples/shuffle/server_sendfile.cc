#include "server_internal.h"

// DataPath::kSendfile: the plain baseline, a blocking thread per
// connection that answers with sendfile(2), without the ring.

namespace flowtune::shuffle {

void Server::Impl::serve_blocking(int fd) {
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
        const ssize_t w = ::sendfile(
            fd, j.file, &off, static_cast<std::size_t>(std::min<std::uint64_t>(left, 1u << 30)));
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

void Server::Impl::run_sendfile() {
  pollfd fds[2] = {{listen_fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
  for (;;) {
    if (::poll(fds, 2, -1) < 0 && errno != EINTR)
      throw std::runtime_error("poll: " + errno_text(errno));
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

}  // namespace flowtune::shuffle
