// What tests of libflowtune against real sockets share (client_test.cc,
// tests/agent): a loopback transfer whose bytes are checked, the cap the
// kernel applies, and waiting for a condition.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "flowtune/flowtune.h"

namespace flowtune::client {

using HarnessClock = std::chrono::steady_clock;

// A connected pair: `send_fd` (127.0.0.1 -> 127.0.0.2) and a receiver
// thread that reads everything and sums it.
class Transfer {
 public:
  Transfer() {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(0x7f000002);
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    ::listen(listen_fd_, 1);
    send_fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in local{};
    local.sin_family = AF_INET;
    local.sin_addr.s_addr = htonl(0x7f000001);
    EXPECT_EQ(::bind(send_fd, reinterpret_cast<sockaddr*>(&local), sizeof local), 0);
    EXPECT_EQ(::connect(send_fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    recv_fd_ = ::accept(listen_fd_, nullptr, nullptr);
    receiver_ = std::thread([this] {
      char buf[65536];
      for (;;) {
        const ssize_t n = ::read(recv_fd_, buf, sizeof buf);
        if (n <= 0) break;
        for (ssize_t i = 0; i < n; ++i) sum_ = sum_ * 31 + static_cast<unsigned char>(buf[i]);
        received_ += static_cast<std::uint64_t>(n);
      }
    });
  }
  ~Transfer() {
    if (send_fd >= 0) ::close(send_fd);
    receiver_.join();
    ::close(recv_fd_);
    ::close(listen_fd_);
  }
  // Sends `bytes` of a known pattern; returns their checksum.
  std::uint64_t send_all(std::uint64_t bytes, ft_client* c) {
    std::vector<char> buf(16384);
    std::uint64_t sum = 0, sent = 0;
    while (sent < bytes) {
      const std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), bytes - sent));
      for (std::size_t i = 0; i < n; ++i) buf[i] = static_cast<char>((sent + i) * 7);
      std::size_t off = 0;
      while (off < n) {
        const ssize_t w = ::write(send_fd, buf.data() + off, n - off);
        if (w <= 0) return 0;
        if (c != nullptr) ft_flowlet_sent(c, send_fd, static_cast<std::uint64_t>(w));
        off += static_cast<std::size_t>(w);
      }
      for (std::size_t i = 0; i < n; ++i) sum = sum * 31 + static_cast<unsigned char>(buf[i]);
      sent += n;
    }
    return sum;
  }
  // Closes the sender and waits for the receiver to see EOF.
  void finish() {
    ::shutdown(send_fd, SHUT_WR);
    receiver_.join();
    receiver_ = std::thread([] {});
  }
  std::uint64_t received() const { return received_; }
  std::uint64_t checksum() const { return sum_; }

  int send_fd = -1;

 private:
  int listen_fd_ = -1;
  int recv_fd_ = -1;
  std::thread receiver_;
  std::atomic<std::uint64_t> received_{0};
  std::uint64_t sum_ = 0;
};

inline std::uint64_t rate(ft_client* c, int fd) {
  std::uint64_t r = 0;
  EXPECT_EQ(ft_socket_rate(c, fd, &r), FT_OK);
  return r;
}

template <class Pred>
bool eventually(Pred p, int ms = 3000) {
  const auto deadline = HarnessClock::now() + std::chrono::milliseconds(ms);
  while (HarnessClock::now() < deadline) {
    if (p()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return p();
}

inline bool near(std::uint64_t got, double want, double tol = 0.03) {
  return static_cast<double>(got) > want * (1 - tol) && static_cast<double>(got) < want * (1 + tol);
}

}  // namespace flowtune::client
