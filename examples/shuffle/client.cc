#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "flowtune/common/result.h"
#include "service.h"

namespace flowtune::shuffle {

namespace {

using Clock = std::chrono::steady_clock;

std::string seconds(std::uint32_t ms) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", ms / 1000.0);
  return b;
}

// A connected socket whose connect, sends and receives each fail with
// EAGAIN (EINPROGRESS for connect) after timeout_ms without progress, or
// why there is none (the last address's failure).
Result<int> connect_to(const std::string& host, std::uint16_t port, std::uint32_t timeout_ms) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    return fail(ErrorCause::kNotFound, "cannot resolve " + host + ": " + ::gai_strerror(rc));
  }
  int fd = -1;
  std::string why;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::string("cannot open a socket: ") + std::strerror(errno);
      continue;
    }
    set_timeouts(fd, timeout_ms);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      const int e = errno;
      why = "cannot connect to " + host + ":" + std::to_string(port) + ": " +
            (e == EINPROGRESS ? "no answer in " + seconds(timeout_ms) + " s (read timeout)"
                              : std::string(std::strerror(e)));
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0) return fail(ErrorCause::kUnavailable, why);
  return fd;
}

// A block's body as fetch_from() reads it after the header: its CRC, the
// start of the server's message when the block was refused, and whether
// it came whole (if not, the errno of the receive that failed).
struct BlockBody {
  std::uint32_t crc = 0;
  std::string message;
  bool whole = true;
  int lost_errno = 0;
};

BlockBody recv_body(int fd, const BlockHeader& h, std::vector<char>& buf) {
  BlockBody body;
  std::uint64_t left = h.length;
  while (left > 0) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, buf.size()));
    if (!recv_all(fd, buf.data(), n)) {
      body.whole = false;
      body.lost_errno = errno;
      break;
    }
    body.crc = crc32c(body.crc, buf.data(), n);
    if (h.status != Status::kOk && body.message.size() < 4096) body.message.append(buf.data(), n);
    left -= n;
  }
  return body;
}

// One source: every request at once, then the answers in order.
void fetch_from(const FetchSource& src, std::uint32_t shuffle, std::uint32_t partition,
                std::uint64_t coflow, std::uint32_t read_timeout_ms, Clock::time_point t0,
                std::vector<BlockResult>& out) {
  for (std::uint32_t m = src.first_map; m <= src.last_map; ++m) out.push_back({m, 0, 0, ""});
  const Result<int> connected = connect_to(src.host, src.port, read_timeout_ms);
  const auto fail_rest = [&](std::size_t from, const std::string& e) {
    for (std::size_t k = from; k < out.size(); ++k) out[k].error = e;
  };
  // Why a send or receive failed, from its errno: the peer's end (0),
  // nothing moving for the read timeout (EAGAIN), or the error.
  const auto lost = [&](const std::string& what, int e) {
    if (e == EAGAIN || e == EWOULDBLOCK) {
      return "read timeout: nothing from " + src.host + ":" + std::to_string(src.port) + " for " +
             seconds(read_timeout_ms) + " s (" + what + ")";
    }
    return e == 0 ? "connection closed " + what : what + ": " + std::strerror(e);
  };
  if (!connected) {
    fail_rest(0, connected.error().message);
    return;
  }
  const int fd = *connected;
  // At most kWindow requests outstanding: the server stops reading requests
  // it cannot queue, and a client blocked writing more of them while the
  // server waits for it to read answers would never make progress.
  constexpr std::size_t kWindow = 64;
  const auto request = [&](std::size_t k) {
    return format_fetch({shuffle, out[k].map, partition, coflow});
  };
  std::string first;
  for (std::size_t k = 0; k < std::min(kWindow, out.size()); ++k) first += request(k);
  if (!send_all(fd, first.data(), first.size())) {
    fail_rest(0, lost("sending requests", errno));
    ::close(fd);
    return;
  }
  std::vector<char> buf(256 * 1024);
  for (std::size_t k = 0; k < out.size(); ++k) {
    const std::string more = k > 0 && k + kWindow - 1 < out.size() ? request(k + kWindow - 1) : "";
    if (!more.empty() && !send_all(fd, more.data(), more.size())) {
      fail_rest(k, lost("sending requests", errno));
      break;
    }
    std::uint8_t raw[kHeaderBytes];
    if (!recv_all(fd, raw, sizeof raw)) {
      fail_rest(k, lost("before the block's header", errno));
      break;
    }
    const auto h = decode_header(raw);
    if (!h) {
      fail_rest(k, "not a flowtune-shuffle server (bad header)");
      break;
    }
    const BlockBody body = recv_body(fd, *h, buf);
    BlockResult& b = out[k];
    b.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!body.whole) {
      fail_rest(k, lost("mid-block", body.lost_errno));
      break;
    }
    if (body.crc != h->crc) {
      b.error = "CRC mismatch";
    } else if (h->status != Status::kOk) {
      b.error = std::string(to_string(h->status)) + ": " + body.message;
    } else {
      b.bytes = h->length;
    }
  }
  ::close(fd);
}

}  // namespace

FetchResult fetch_partition(const std::vector<FetchSource>& sources, std::uint32_t shuffle,
                            std::uint32_t partition, std::uint64_t coflow,
                            std::uint32_t read_timeout_ms) {
  const auto t0 = Clock::now();
  std::vector<std::vector<BlockResult>> per(sources.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    threads.emplace_back(fetch_from, std::cref(sources[i]), shuffle, partition, coflow,
                         read_timeout_ms, t0, std::ref(per[i]));
  }
  for (auto& t : threads) t.join();
  FetchResult r;
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  for (auto& v : per) {
    for (auto& b : v) {
      r.bytes += b.bytes;
      if (!b.error.empty()) ++r.failed;
      r.blocks.push_back(std::move(b));
    }
  }
  return r;
}

}  // namespace flowtune::shuffle
