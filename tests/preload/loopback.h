// A TCP listener on 127.0.0.2, on a port of the kernel's choosing, for the
// shim's tests: their senders connect from 127.0.0.1, so the shim manages
// those connections as it would any other host's.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace flowtune::shim::testing {

// The listening fd; *port is its port.
inline int listen_on_127_0_0_2(int backlog, int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(0x7f000002);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  EXPECT_EQ(::listen(fd, backlog), 0);
  return fd;
}

}  // namespace flowtune::shim::testing
