// explicit_api: one flowlet declared through libflowtune's C API.
//
// Opens a client, makes a TCP connection over loopback, declares a flowlet of
// kFlowletBytes on the sending socket, sends those bytes while telling the
// library how many the kernel took, then unregisters, closes and exits 0.
// No allocator is needed: without one the library is fail-open and the
// socket stays unpaced, so the bytes simply move. With flowtune-allocator
// running ($FLOWTUNE_ALLOCATOR, default tcp://127.0.0.1:5555) the socket is
// paced at the rate it sends. Every call is checked; a failure prints the
// call and ft_strerror() of its code and exits 1.
//
// Builds against the installed package only:
//   cc explicit_api.c $(pkg-config --cflags --libs flowtune)
//   cmake -S examples/explicit_api -B build-ex -DCMAKE_PREFIX_PATH=<prefix>
#define _POSIX_C_SOURCE 200809L

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <flowtune/flowtune.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

// 4 MiB: far above the default min_flowlet_bytes (64 KiB), so the flowlet is
// scheduled, not sent unpaced as a mouse.
enum { kFlowletBytes = 4 << 20, kChunkBytes = 64 << 10, kStallMs = 10000 };

// Prints a failed libflowtune call; returns 1 when rc is an error.
static int ft_failed(const char* call, int rc) {
  if (rc == FT_OK) return 0;
  fprintf(stderr, "explicit_api: %s: %s (%d)\n", call, ft_strerror(rc), rc);
  return 1;
}

// Prints a failed system call (errno); returns 1 when rc is negative.
static int sys_failed(const char* call, long rc) {
  if (rc >= 0) return 0;
  fprintf(stderr, "explicit_api: %s: %s\n", call, strerror(errno));
  return 1;
}

// Connects *tx to *rx over 127.0.0.1 (the listener takes any free port).
static int loopback_pair(int* tx, int* rx) {
  struct sockaddr_in addr;
  socklen_t len = sizeof addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  if (sys_failed("socket", lfd)) return -1;
  int rc = -1;
  if (sys_failed("bind", bind(lfd, (struct sockaddr*)&addr, sizeof addr)) ||
      sys_failed("listen", listen(lfd, 1)) ||
      sys_failed("getsockname", getsockname(lfd, (struct sockaddr*)&addr, &len))) {
    goto out;
  }
  *tx = socket(AF_INET, SOCK_STREAM, 0);
  if (sys_failed("socket", *tx) ||
      sys_failed("connect", connect(*tx, (struct sockaddr*)&addr, sizeof addr))) {
    goto out;
  }
  *rx = accept(lfd, NULL, NULL);
  if (sys_failed("accept", *rx)) goto out;
  // The sender never blocks: this one thread also drains the receiver.
  rc = fcntl(*tx, F_SETFL, fcntl(*tx, F_GETFL) | O_NONBLOCK);
  if (sys_failed("fcntl", rc)) rc = -1;
out:
  close(lfd);
  return rc;
}

// Sends kFlowletBytes on tx, reporting each send with ft_flowlet_sent(), and
// receives them on rx.
static int transfer(ft_client* client, int tx, int rx) {
  static char out[kChunkBytes], in[kChunkBytes];
  uint64_t sent = 0, received = 0;
  memset(out, 'f', sizeof out);
  while (received < kFlowletBytes) {
    struct pollfd fds[2] = {{.fd = tx, .events = sent < kFlowletBytes ? POLLOUT : 0},
                            {.fd = rx, .events = POLLIN}};
    int n = poll(fds, 2, kStallMs);
    if (sys_failed("poll", n)) return -1;
    if (n == 0) {
      fprintf(stderr, "explicit_api: no progress for %d ms\n", kStallMs);
      return -1;
    }
    if (fds[0].revents & POLLOUT) {
      size_t want = kFlowletBytes - sent < kChunkBytes ? kFlowletBytes - sent : kChunkBytes;
      ssize_t w = send(tx, out, want, MSG_NOSIGNAL);
      if (w < 0 && errno != EAGAIN && errno != EINTR) {
        sys_failed("send", w);
        return -1;
      }
      if (w > 0) {
        sent += (uint64_t)w;
        if (ft_failed("ft_flowlet_sent", ft_flowlet_sent(client, tx, (uint64_t)w))) return -1;
      }
    }
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t r = recv(rx, in, sizeof in, 0);
      if (sys_failed("recv", r)) return -1;
      if (r == 0) {
        fprintf(stderr, "explicit_api: receiver saw end of stream early\n");
        return -1;
      }
      received += (uint64_t)r;
    }
  }
  return 0;
}

// Declares the flowlet, moves its bytes, and reports what the library saw.
static int send_flowlet(ft_client* client, int tx, int rx) {
  if (ft_failed("ft_flowlet_begin", ft_flowlet_begin(client, tx, kFlowletBytes, NULL))) return -1;
  if (transfer(client, tx, rx) != 0) return -1;
  uint64_t rate = 0;
  ft_stats stats;
  if (ft_failed("ft_socket_rate", ft_socket_rate(client, tx, &rate)) ||
      ft_failed("ft_client_stats", ft_client_stats(client, &stats))) {
    return -1;
  }
  printf(
      "explicit_api: sent %d bytes as one flowlet over loopback; pacing rate %llu bytes/s "
      "(0 = unpaced), allocator %s\n",
      kFlowletBytes, (unsigned long long)rate, stats.connected ? "connected" : "absent");
  return 0;
}

int main(void) {
  ft_config cfg;
  ft_config_init(&cfg);
  ft_client* client = NULL;
  if (ft_failed("ft_client_open", ft_client_open(&cfg, &client))) return 1;

  int ok = 0, tx = -1, rx = -1;
  if (loopback_pair(&tx, &rx) == 0 &&
      !ft_failed("ft_socket_register", ft_socket_register(client, tx))) {
    ok = send_flowlet(client, tx, rx) == 0;
    // The library must forget the fd before it is closed.
    ok &= !ft_failed("ft_socket_unregister", ft_socket_unregister(client, tx));
  }
  if (tx >= 0) close(tx);
  if (rx >= 0) close(rx);
  ok &= !ft_failed("ft_client_close", ft_client_close(client));
  return ok ? 0 : 1;
}
