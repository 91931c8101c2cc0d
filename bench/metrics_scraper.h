// A Prometheus scrape every `period_s`, as a server would make it: an HTTP
// GET of /metrics from 127.0.0.1:PORT, read to the end (daemon_bench
// --metrics-overhead). It runs at SCHED_IDLE, as if from another machine,
// and counts the scrapes that got a whole 200 reply.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace flowtune::bench {

class MetricsScraper {
 public:
  MetricsScraper(int port, double period_s) {
    if (port <= 0) return;
    thread_ = std::thread([this, port, period_s] {
      sched_param idle{};
      (void)::sched_setscheduler(0, SCHED_IDLE, &idle);
      while (!stop_.load()) {
        const auto t0 = std::chrono::steady_clock::now();
        const std::string body = get(port);
        if (body.rfind("HTTP/1.1 200", 0) == 0 || body.rfind("HTTP/1.0 200", 0) == 0) {
          ++scrapes_;
          bytes_ += body.size();
        }
        while (!stop_.load() && std::chrono::steady_clock::now() - t0 < std::chrono::duration<double>(period_s)) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      }
    });
  }
  ~MetricsScraper() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::uint64_t scrapes() const { return scrapes_; }
  std::uint64_t bytes() const { return bytes_; }

  // A free TCP port on 127.0.0.1 (bound and released), for the daemon.
  static int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = 0;
    if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port = ntohs(a.sin_port);
    }
    if (fd >= 0) ::close(fd);
    return port;
  }

 private:
  // The whole reply (status line, headers, body), or "" when none came.
  static std::string get(int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return {};
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string out;
    timeval tv{5, 0};
    (void)::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      char buf[65536];
      ssize_t n;
      while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return out;
  }
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> scrapes_{0}, bytes_{0};
  std::thread thread_;
};

}  // namespace flowtune::bench
