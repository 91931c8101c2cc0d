// What the host agent's benchmarks share (agent_open, agent_flood): a child
// process started from a path, and a connected loopback TCP pair for a
// client to register.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

extern char** environ;

namespace flowtune::bench {

// Starts args[0] with args, this process's environment; -1 if it cannot.
inline pid_t spawn(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
  return pid;
}

// A connected loopback pair, 127.0.0.1 -> 127.0.0.2.
struct Pair {
  int lfd = -1, send_fd = -1, recv_fd = -1;
  Pair() {
    lfd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(0x7f000002);
    ::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
    ::listen(lfd, 1);
    send_fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in l{};
    l.sin_family = AF_INET;
    l.sin_addr.s_addr = htonl(0x7f000001);
    ::bind(send_fd, reinterpret_cast<sockaddr*>(&l), sizeof l);
    ::connect(send_fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    recv_fd = ::accept(lfd, nullptr, nullptr);
  }
  ~Pair() {
    ::close(send_fd);
    ::close(recv_fd);
    ::close(lfd);
  }
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;
};

}  // namespace flowtune::bench
