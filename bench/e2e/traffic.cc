// flowtune-traffic: the end-to-end experiments' sender and receiver.
//
// What it measures: per-transfer start and finish times (CLOCK_REALTIME,
// which every network namespace on the machine shares, so a sender's start
// and the receiver's finish compare directly) and, at the receiver, the bytes
// each sender delivered in fixed time bins.
//
//   flowtune-traffic recv --listen IP:PORT [--expect N] [--bin-ms MS] [--origin T] [--timeout-s S]
//   flowtune-traffic send --to IP:PORT --sender ID [--flows K] [--bytes B | --stop-at T]
//                         [--start-at T] [--cc NAME] [--pace-bps R] [--api shim|explicit]
//                         [--deadline-ms MS] [--tenant NAME] [--class N]
//
// The sender uses one thread per connection with blocking write() only, so
// the same binary runs plain, under flowtune-run (the shim sees every write)
// and under trickle (which wraps blocking calls best). `--api explicit`
// declares each transfer through libflowtune instead. Each connection opens
// with a 32-byte header (sender, flow, size, start time); the receiver prints
// one JSON object at the end: every transfer plus the per-sender bins.
#include <arpa/inet.h>
#include <fcntl.h>
#include <flowtune/flowtune.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

constexpr std::uint32_t kMagic = 0x46545446;  // "FTTF"
constexpr std::size_t kChunk = 64 * 1024;

struct Header {
  std::uint32_t magic;
  std::uint32_t sender;
  std::uint32_t flow;
  std::uint32_t reserved;
  std::uint64_t bytes;     // payload after the header; 0 = until the sender closes
  std::int64_t start_ns;   // CLOCK_REALTIME when the sender began this transfer
};
static_assert(sizeof(Header) == 32);

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "flowtune-traffic: %s\n(run 'flowtune-traffic --help' for usage)\n",
               msg.c_str());
  std::exit(2);
}

const char kHelp[] = R"(flowtune-traffic: sender and receiver for the end-to-end experiments.

  flowtune-traffic recv --listen IP:PORT [options]
    --expect N       exit after N transfers completed (default: run until SIGTERM/SIGINT
                     or --timeout-s)
    --bin-ms MS      per-sender delivered bytes in bins of MS ms (default 0: no bins)
    --origin T       bins start at this CLOCK_REALTIME time, seconds (default: now)
    --timeout-s S    give up after S seconds and report what arrived (default 120)
    Prints "ready" on stdout once listening, then one JSON object at exit.

  flowtune-traffic send --to IP:PORT --sender ID [options]
    --flows K        parallel connections, one thread each (default 1)
    --bytes B        bytes per connection (default 1 MB)
    --stop-at T      instead of --bytes: send until CLOCK_REALTIME T (seconds), then close
    --start-at T     wait until CLOCK_REALTIME T (seconds) before connecting
    --cc NAME        TCP_CONGESTION for every connection (e.g. cubic, bbr)
    --pace-bps R     static SO_MAX_PACING_RATE per connection, bytes/s
    --wait-rate-ms MS  with --api explicit and --bytes: hold the first byte until the
                     allocator's rate is applied, for at most MS ms
    --rate-latency   record each connection's rate latency: from its first write (after
                     ft_flowlet_begin with --api explicit) until a finite
                     SO_MAX_PACING_RATE is on the socket, polled every 50 us for up to 1 s
                     (threads only); printed as "rate_latency_us" (-1: none came)
    --fork           one process per connection instead of one thread (for trickle,
                     which is not thread-safe; its cap then applies per connection)
    --api shim|explicit  explicit: declare each transfer with libflowtune's C API
                     (allocator and host from $FLOWTUNE_ALLOCATOR, $FLOWTUNE_HOST);
                     shim (default): plain write()s, which flowtune-run may manage
    --deadline-ms MS, --tenant NAME, --class N
                     with --api explicit: each transfer's flowlet carries this deadline
                     (from its begin; sized transfers only), tenant (at most 256 bytes)
                     and strict priority class (0 highest .. 7)
    Prints one JSON line: bytes sent, errors, and libflowtune's counters with
    --api explicit.
)";

std::int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

sockaddr_in parse_addr(const std::string& s) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos) usage_error("expected IP:PORT, got '" + s + "'");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (inet_pton(AF_INET, s.substr(0, colon).c_str(), &a.sin_addr) != 1)
    usage_error("not an IPv4 address in '" + s + "'");
  char* end = nullptr;
  long port = std::strtol(s.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port <= 0 || port > 65535) usage_error("bad port in '" + s + "'");
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  return a;
}

double parse_number(const std::string& flag, const char* v) {
  if (v == nullptr) usage_error(flag + " needs a value");
  char* end = nullptr;
  double d = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(d >= 0)) usage_error(flag + ": not a non-negative number: " + v);
  return d;
}

// A whole number in [lo, hi], for flags whose value is cast to an integer.
long parse_integer(const std::string& flag, const char* v, long lo, long hi) {
  const double d = parse_number(flag, v);
  if (d != std::floor(d) || d < static_cast<double>(lo) || d > static_cast<double>(hi)) {
    usage_error(flag + " must be a whole number in " + std::to_string(lo) + ".." +
                std::to_string(hi) + ", got " + v);
  }
  return static_cast<long>(d);
}

double secs(std::int64_t ns) { return static_cast<double>(ns) / 1e9; }

void sleep_until_ns(std::int64_t t) {
  if (t <= 0) return;
  timespec ts{static_cast<time_t>(t / 1'000'000'000), static_cast<long>(t % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

// ---------------------------------------------------------------- receiver

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }

struct Conn {
  Header h{};
  std::size_t header_got = 0;
  std::uint64_t bytes = 0;
  std::int64_t finish_ns = 0;
  bool done = false;
};

struct Transfer {
  Header h;
  std::uint64_t bytes;
  std::int64_t finish_ns;
  bool complete;
};

struct RecvOpts {
  std::string listen;
  long expect = -1;
  double bin_ms = 0, timeout_s = 120;
  std::int64_t origin = 0;
};

RecvOpts parse_recv(int argc, char** argv) {
  std::string listen;
  long expect = -1;
  double bin_ms = 0, timeout_s = 120;
  std::int64_t origin = 0;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--listen" && v) listen = v, ++i;
    else if (a == "--expect") expect = static_cast<long>(parse_number(a, v)), ++i;
    else if (a == "--bin-ms") bin_ms = parse_number(a, v), ++i;
    else if (a == "--origin") origin = static_cast<std::int64_t>(parse_number(a, v) * 1e9), ++i;
    else if (a == "--timeout-s") timeout_s = parse_number(a, v), ++i;
    else usage_error("recv: unknown or incomplete option '" + a + "'");
  }
  if (listen.empty()) usage_error("recv needs --listen IP:PORT");
  return {listen, expect, bin_ms, timeout_s, origin};
}

// The receiver's connections and what they delivered.
struct Receiver {
  int lfd = -1;
  int ep = -1;
  std::int64_t origin = 0;
  std::int64_t bin_ns = 0;
  std::map<int, std::unique_ptr<Conn>> conns;
  std::vector<Transfer> transfers;
  std::map<std::uint32_t, std::vector<std::uint64_t>> bins;  // sender -> bytes per bin
  std::vector<char> buf = std::vector<char>(256 * 1024);
  long completed = 0;
};

// A non-blocking listening socket on `addr` in an epoll set; false (said
// on stderr) when it cannot listen.
bool open_listener(Receiver& rx, const sockaddr_in& addr, const std::string& listen) {
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(lfd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(lfd, 4096) != 0) {
    std::fprintf(stderr, "flowtune-traffic: cannot listen on %s: %s\n", listen.c_str(),
                 std::strerror(errno));
    return false;
  }
  int ep = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = lfd;
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
  rx.lfd = lfd;
  rx.ep = ep;
  return true;
}

void finish(Receiver& rx, int fd, Conn& c) {
  rx.transfers.push_back(
      {c.h, c.bytes, c.finish_ns ? c.finish_ns : now_ns(),
       c.header_got == sizeof(Header) && (c.h.bytes == 0 || c.bytes >= c.h.bytes)});
  ++rx.completed;
  epoll_ctl(rx.ep, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
  rx.conns.erase(fd);
}

void accept_all(Receiver& rx) {
  for (;;) {
    int c = accept4(rx.lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c < 0) break;
    epoll_event cev{};
    cev.events = EPOLLIN | EPOLLRDHUP;
    cev.data.fd = c;
    epoll_ctl(rx.ep, EPOLL_CTL_ADD, c, &cev);
    rx.conns[c] = std::make_unique<Conn>();
  }
}

// Counts `got` bytes of `c` that arrived at t in its sender's bin.
void bin_bytes(Receiver& rx, const Conn& c, std::uint64_t got, std::int64_t t) {
  if (rx.bin_ns > 0 && t >= rx.origin && c.header_got == sizeof(Header)) {
    auto& b = rx.bins[c.h.sender];
    std::size_t idx = static_cast<std::size_t>((t - rx.origin) / rx.bin_ns);
    if (idx < 1'000'000) {
      if (b.size() <= idx) b.resize(idx + 1, 0);
      b[idx] += got;
    }
  }
}

// Reads what fd holds now; true when the connection closed, failed or
// does not speak this protocol.
bool read_conn(Receiver& rx, int fd, Conn& c) {
  bool closed = false;
  for (;;) {
    ssize_t r = read(fd, rx.buf.data(), rx.buf.size());
    if (r == 0) {
      closed = true;
      break;
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) closed = true;
      break;
    }
    std::size_t off = 0;
    if (c.header_got < sizeof(Header)) {
      std::size_t take = std::min(sizeof(Header) - c.header_got, static_cast<std::size_t>(r));
      std::memcpy(reinterpret_cast<char*>(&c.h) + c.header_got, rx.buf.data(), take);
      c.header_got += take;
      off = take;
      if (c.header_got == sizeof(Header) && c.h.magic != kMagic) {
        closed = true;
        break;
      }
    }
    std::uint64_t got = static_cast<std::uint64_t>(r) - off;
    if (got == 0) continue;
    c.bytes += got;
    std::int64_t t = now_ns();
    bin_bytes(rx, c, got, t);
    if (c.h.bytes != 0 && c.bytes >= c.h.bytes && c.finish_ns == 0) c.finish_ns = t;
  }
  return closed;
}

// The receiver's report: every transfer and, with --bin-ms, each sender's
// bytes per bin.
std::string recv_report(const Receiver& rx, double bin_ms) {
  std::string out = "{\"origin_s\":" + std::to_string(secs(rx.origin)) +
                    ",\"bin_ms\":" + std::to_string(bin_ms) + ",\"transfers\":[";
  char line[256];
  for (std::size_t i = 0; i < rx.transfers.size(); ++i) {
    const Transfer& t = rx.transfers[i];
    std::snprintf(line, sizeof line,
                  "%s{\"sender\":%u,\"flow\":%u,\"size\":%llu,\"bytes\":%llu,\"start_s\":%.6f,"
                  "\"finish_s\":%.6f,\"complete\":%s}",
                  i ? "," : "", t.h.sender, t.h.flow, static_cast<unsigned long long>(t.h.bytes),
                  static_cast<unsigned long long>(t.bytes), secs(t.h.start_ns), secs(t.finish_ns),
                  t.complete ? "true" : "false");
    out += line;
  }
  out += "],\"bins\":{";
  bool first = true;
  for (const auto& [sender, b] : rx.bins) {
    out += (first ? "\"" : ",\"") + std::to_string(sender) + "\":[";
    first = false;
    for (std::size_t i = 0; i < b.size(); ++i) out += (i ? "," : "") + std::to_string(b[i]);
    out += "]";
  }
  out += "}}\n";
  return out;
}

int run_recv(int argc, char** argv) {
  const RecvOpts o = parse_recv(argc, argv);
  sockaddr_in addr = parse_addr(o.listen);
  Receiver rx;
  rx.origin = o.origin == 0 ? now_ns() : o.origin;
  rx.bin_ns = static_cast<std::int64_t>(o.bin_ms * 1e6);

  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  if (!open_listener(rx, addr, o.listen)) return 1;
  std::printf("ready\n");
  std::fflush(stdout);

  std::int64_t deadline = now_ns() + static_cast<std::int64_t>(o.timeout_s * 1e9);
  std::vector<epoll_event> events(1024);
  while (!g_stop.load() && (o.expect < 0 || rx.completed < o.expect) && now_ns() < deadline) {
    int n = epoll_wait(rx.ep, events.data(), static_cast<int>(events.size()), 100);
    for (int e = 0; e < n; ++e) {
      int fd = events[e].data.fd;
      if (fd == rx.lfd) {
        accept_all(rx);
        continue;
      }
      auto it = rx.conns.find(fd);
      if (it == rx.conns.end()) continue;
      Conn& c = *it->second;
      const bool closed = read_conn(rx, fd, c);
      // A sized transfer is complete at its last byte: closing then lets the
      // sender see EOF and leave without waiting for its own FIN's turn.
      if (closed || (c.h.bytes != 0 && c.finish_ns != 0)) finish(rx, fd, c);
    }
  }
  // Whatever is still open is reported as incomplete (or, for unsized
  // transfers, as what arrived until now).
  while (!rx.conns.empty()) finish(rx, rx.conns.begin()->first, *rx.conns.begin()->second);

  const std::string out = recv_report(rx, o.bin_ms);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

// ------------------------------------------------------------------ sender

struct RateWatch;

struct SendOpts {
  sockaddr_in to{};
  std::uint32_t sender = 0;
  std::uint64_t bytes = 1'000'000;
  std::int64_t stop_at = 0;
  std::string cc;
  std::uint64_t pace = 0;
  ft_client* ft = nullptr;  // --api explicit
  ft_flowlet_opts flowlet{};  // --api explicit: deadline, tenant, class
  std::int64_t wait_rate_ns = 0;
  RateWatch* watch = nullptr;  // --rate-latency
};

struct FlowResult {
  std::uint64_t sent = 0;
  std::string error;
};

// --rate-latency: a thread polls every connection's SO_MAX_PACING_RATE until
// a finite rate is on it (the allocator's rate, applied by the shim or the
// library). A connection publishes its fd and start time under its mutex and
// withdraws the fd before closing it, so the poller never reads a reused fd.
struct RateWatch {
  struct Slot {
    std::mutex m;
    int fd = -1;
    std::int64_t start_ns = 0;
    std::int64_t latency_us = -1;
    bool done = false;  // measured, or the connection is gone
  };
  explicit RateWatch(unsigned n) : slots(n) {}
  std::vector<Slot> slots;
  std::atomic<bool> stop{false};

  void watch(unsigned f, int fd) {
    std::lock_guard<std::mutex> g(slots[f].m);
    slots[f].fd = fd;
    slots[f].start_ns = now_ns();
  }
  void forget(unsigned f) {
    std::lock_guard<std::mutex> g(slots[f].m);
    slots[f].fd = -1;
    slots[f].done = true;
  }
  void run() {
    const std::int64_t give_up = now_ns() + 1'000'000'000LL * 60;
    while (!stop.load() && now_ns() < give_up) {
      bool pending = false;
      for (Slot& s : slots) {
        std::lock_guard<std::mutex> g(s.m);
        if (s.done) continue;
        pending = true;
        if (s.fd < 0) continue;
        const std::int64_t t = now_ns();
        if (t - s.start_ns > 1'000'000'000LL) {
          s.done = true;  // none within a second: reported as -1
          continue;
        }
        std::uint64_t rate = 0;
        socklen_t len = sizeof rate;
        if (getsockopt(s.fd, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, &len) == 0 && len == sizeof rate &&
            rate != ~std::uint64_t{0} && rate != ~std::uint32_t{0}) {
          s.latency_us = (t - s.start_ns) / 1000;
          s.done = true;
        }
      }
      if (!pending) return;
      timespec ts{0, 50'000};
      nanosleep(&ts, nullptr);
    }
  }
};

bool write_all(const SendOpts& o, int fd, const char* p, std::size_t n, FlowResult& r) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      r.error = std::string("write: ") + std::strerror(errno);
      return false;
    }
    if (o.ft) ft_flowlet_sent(o.ft, fd, static_cast<std::uint64_t>(w));
    p += w;
    n -= static_cast<std::size_t>(w);
    r.sent += static_cast<std::uint64_t>(w);
  }
  return true;
}

void send_flow(const SendOpts& o, std::uint32_t flow, FlowResult& r) {
  // Plain SOCK_STREAM: trickle only manages sockets whose type is exactly
  // that (flags such as SOCK_CLOEXEC hide them from it).
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    r.error = std::string("socket: ") + std::strerror(errno);
    return;
  }
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  if (!o.cc.empty() &&
      setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, o.cc.data(), static_cast<socklen_t>(o.cc.size())) != 0) {
    r.error = "TCP_CONGESTION " + o.cc + ": " + std::strerror(errno);
    close(fd);
    return;
  }
  if (o.pace != 0) setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &o.pace, sizeof o.pace);
  Header h{kMagic, o.sender, flow, 0, o.stop_at ? 0 : o.bytes, now_ns()};
  if (connect(fd, reinterpret_cast<const sockaddr*>(&o.to), sizeof o.to) != 0) {
    r.error = std::string("connect: ") + std::strerror(errno);
    close(fd);
    return;
  }
  if (o.ft) {
    ft_socket_register(o.ft, fd);
    // A sized transfer is declared whole, so its end goes out in advance;
    // a timed one is declared as it is written (as the shim does).
    const int rc = o.stop_at ? FT_OK : ft_flowlet_begin(o.ft, fd, o.bytes + sizeof h, &o.flowlet);
    if (rc != FT_OK) {
      r.error = std::string("ft_flowlet_begin: ") + ft_strerror(rc);
      ft_socket_unregister(o.ft, fd);
      close(fd);
      return;
    }
    // An application that knows its transfer ahead can hold its first byte
    // until the allocator's rate is on the socket, so even the initial
    // window leaves paced instead of as a burst into the bottleneck.
    if (!o.stop_at && o.wait_rate_ns > 0) {
      std::int64_t until = now_ns() + o.wait_rate_ns;
      std::uint64_t rate = 0;
      while (now_ns() < until && ft_socket_rate(o.ft, fd, &rate) == FT_OK && rate == 0) {
        timespec ts{0, 200'000};
        nanosleep(&ts, nullptr);
      }
    }
  }
  static const std::vector<char> payload(kChunk, 'x');
  if (o.watch) o.watch->watch(flow, fd);
  bool ok = write_all(o, fd, reinterpret_cast<const char*>(&h), sizeof h, r);
  if (o.stop_at) {
    while (ok && now_ns() < o.stop_at) {
      if (o.ft && ft_flowlet_active(o.ft, fd) != 1) {
        const int rc = ft_flowlet_begin(o.ft, fd, 1ull << 30, &o.flowlet);
        if (rc != FT_OK) {
          r.error = std::string("ft_flowlet_begin: ") + ft_strerror(rc);
          break;
        }
      }
      ok = write_all(o, fd, payload.data(), payload.size(), r);
    }
  } else {
    std::uint64_t left = o.bytes;
    while (ok && left > 0) {
      std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, kChunk));
      ok = write_all(o, fd, payload.data(), n, r);
      left -= n;
    }
  }
  if (o.ft && o.stop_at) ft_flowlet_end(o.ft, fd);
  // Wait for the receiver's close, so the process outlives its last bytes.
  shutdown(fd, SHUT_WR);
  char c;
  while (read(fd, &c, 1) > 0) {
  }
  if (o.ft) ft_socket_unregister(o.ft, fd);
  if (o.watch) o.watch->forget(flow);
  close(fd);
  r.sent -= std::min<std::uint64_t>(r.sent, sizeof h);
}

// The send command's options: SendOpts and how to run its connections.
struct SendArgs {
  SendOpts o;
  std::string api;
  std::string tenant;  // o.flowlet.tenant points here (run_send sets it)
  unsigned flows = 1;
  std::int64_t start_at = 0;
  bool fork_each = false;
  bool rate_latency = false;
};

SendArgs parse_send(int argc, char** argv) {
  SendOpts o;
  std::string to, api = "shim", tenant;
  ft_flowlet_opts_init(&o.flowlet);
  bool flowlet_opts = false;
  unsigned flows = 1;
  std::int64_t start_at = 0;
  bool have_sender = false;
  bool fork_each = false;
  bool rate_latency = false;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--to" && v) to = v, ++i;
    else if (a == "--sender") o.sender = static_cast<std::uint32_t>(parse_number(a, v)), have_sender = true, ++i;
    else if (a == "--flows") flows = static_cast<unsigned>(parse_number(a, v)), ++i;
    else if (a == "--bytes") o.bytes = static_cast<std::uint64_t>(parse_number(a, v)), ++i;
    else if (a == "--stop-at") o.stop_at = static_cast<std::int64_t>(parse_number(a, v) * 1e9), ++i;
    else if (a == "--start-at") start_at = static_cast<std::int64_t>(parse_number(a, v) * 1e9), ++i;
    else if (a == "--cc" && v) o.cc = v, ++i;
    else if (a == "--pace-bps") o.pace = static_cast<std::uint64_t>(parse_number(a, v)), ++i;
    else if (a == "--api" && v) api = v, ++i;
    else if (a == "--fork") fork_each = true;
    else if (a == "--rate-latency") rate_latency = true;
    else if (a == "--deadline-ms") o.flowlet.deadline_ms = static_cast<std::uint32_t>(parse_integer(a, v, 1, 86'400'000)), flowlet_opts = true, ++i;
    else if (a == "--tenant" && v) tenant = v, flowlet_opts = true, ++i;
    else if (a == "--class") o.flowlet.priority_class = static_cast<std::int32_t>(parse_integer(a, v, 0, FT_NUM_CLASSES - 1)), flowlet_opts = true, ++i;
    else if (a == "--wait-rate-ms") o.wait_rate_ns = static_cast<std::int64_t>(parse_number(a, v) * 1e6), ++i;
    else usage_error("send: unknown or incomplete option '" + a + "'");
  }
  if (to.empty()) usage_error("send needs --to IP:PORT");
  if (!have_sender) usage_error("send needs --sender ID");
  if (flows == 0 || flows > 10000) usage_error("--flows must be 1..10000");
  if (api != "shim" && api != "explicit") usage_error("--api must be shim or explicit");
  if (fork_each && api == "explicit") usage_error("--fork and --api explicit do not mix");
  if (flowlet_opts && api != "explicit") usage_error("--deadline-ms, --tenant and --class need --api explicit");
  if (o.flowlet.deadline_ms != 0 && o.stop_at != 0) usage_error("--deadline-ms needs --bytes (a sized transfer)");
  if (tenant.size() > 256) usage_error("--tenant: at most 256 bytes");
  if (fork_each && rate_latency) usage_error("--rate-latency needs threads (not --fork)");
  if (o.bytes == 0 && o.stop_at == 0) usage_error("--bytes must be positive");
  o.to = parse_addr(to);
  return {o, api, tenant, flows, start_at, fork_each, rate_latency};
}

// --api explicit: a library client of its own; false (said on stderr) when
// it cannot open.
bool open_explicit(SendOpts& o) {
  ft_config cfg;
  ft_config_init(&cfg);
  // Scheduled whatever the size: every transfer of the experiment counts.
  cfg.min_flowlet_bytes = 1;
  int rc = ft_client_open(&cfg, &o.ft);
  if (rc != FT_OK) {
    std::fprintf(stderr, "flowtune-traffic: ft_client_open: %s\n", ft_strerror(rc));
    return false;
  }
  return true;
}

// One process per connection, each reporting into a shared page: for
// wrappers that are not thread-safe (trickle crashes with threads). False
// (said on stderr) when the page cannot be mapped.
bool send_forked(const SendOpts& o, unsigned flows, std::vector<FlowResult>& results) {
  struct Shared {
    std::uint64_t sent;
    int failed;
  };
  void* m = mmap(nullptr, sizeof(Shared) * flows, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    std::fprintf(stderr, "flowtune-traffic: mmap: %s\n", std::strerror(errno));
    return false;
  }
  auto* shared = static_cast<Shared*>(m);
  std::vector<pid_t> kids;
  const pid_t parent = getpid();
  for (unsigned f = 0; f < flows; ++f) {
    pid_t pid = fork();
    if (pid == 0) {
      // A child outlives nothing: if the sender dies, so do its flows.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);  // it died before the line above
      FlowResult r;
      send_flow(o, f, r);
      shared[f] = {r.sent, r.error.empty() ? 0 : 1};
      if (!r.error.empty()) std::fprintf(stderr, "flowtune-traffic: %s\n", r.error.c_str());
      std::fflush(stderr);
      _exit(0);
    }
    if (pid < 0) {
      results[f].error = std::string("fork: ") + std::strerror(errno);
      continue;
    }
    kids.push_back(pid);
  }
  for (pid_t k : kids) {
    int st = 0;
    while (waitpid(k, &st, 0) < 0 && errno == EINTR) {
    }
  }
  for (unsigned f = 0; f < flows; ++f) {
    if (!results[f].error.empty()) continue;
    results[f].sent = shared[f].sent;
    if (shared[f].failed) results[f].error = "a connection failed (see above)";
  }
  munmap(m, sizeof(Shared) * flows);
  return true;
}

// A thread per connection; with --rate-latency, the report's
// rate_latency_us member (else empty).
std::string send_threaded(SendOpts& o, unsigned flows, bool rate_latency,
                          std::vector<FlowResult>& results) {
  std::string rate_latency_json;
  std::unique_ptr<RateWatch> watch;
  std::thread watcher;
  if (rate_latency) {
    watch = std::make_unique<RateWatch>(flows);
    o.watch = watch.get();
    watcher = std::thread([&watch] { watch->run(); });
  }
  std::vector<std::thread> threads;
  threads.reserve(flows);
  for (unsigned f = 0; f < flows; ++f)
    threads.emplace_back([&o, f, &results] { send_flow(o, f, results[f]); });
  for (auto& t : threads) t.join();
  if (watch) {
    watch->stop = true;
    watcher.join();
    rate_latency_json = ",\"rate_latency_us\":[";
    for (unsigned f = 0; f < flows; ++f) {
      rate_latency_json += (f ? "," : "") + std::to_string(watch->slots[f].latency_us);
    }
    rate_latency_json += "]";
  }
  return rate_latency_json;
}

// Prints the sender's report (and closes its library client); the exit
// status: 1 when a connection failed.
int report_send(const SendOpts& o, unsigned flows, const std::vector<FlowResult>& results,
                const std::string& rate_latency_json) {
  std::uint64_t sent = 0;
  unsigned errors = 0;
  std::string first_error;
  for (const auto& r : results) {
    sent += r.sent;
    if (!r.error.empty()) {
      if (errors++ == 0) first_error = r.error;
    }
  }
  std::string stats;
  if (o.ft) {
    ft_stats st{};
    ft_client_stats(o.ft, &st);
    char b[512];
    std::snprintf(b, sizeof b,
                  ",\"ft\":{\"flowlets_started\":%llu,\"flowlets_ended\":%llu,"
                  "\"rates_applied\":%llu,\"connected\":%d}",
                  static_cast<unsigned long long>(st.flowlets_started),
                  static_cast<unsigned long long>(st.flowlets_ended),
                  static_cast<unsigned long long>(st.rates_applied), st.connected);
    stats = b;
    ft_client_close(o.ft);
  }
  std::printf("{\"sender\":%u,\"flows\":%u,\"bytes\":%llu,\"errors\":%u%s%s%s%s%s}\n", o.sender,
              flows, static_cast<unsigned long long>(sent), errors,
              errors ? ",\"first_error\":\"" : "", first_error.c_str(), errors ? "\"" : "",
              stats.c_str(), rate_latency_json.c_str());
  if (errors) std::fprintf(stderr, "flowtune-traffic: %u of %u connections failed: %s\n", errors,
                           flows, first_error.c_str());
  return errors ? 1 : 0;
}

int run_send(int argc, char** argv) {
  SendArgs s = parse_send(argc, argv);
  SendOpts& o = s.o;
  o.flowlet.tenant = s.tenant.c_str();
  if (s.api == "explicit" && !open_explicit(o)) return 1;
  sleep_until_ns(s.start_at);
  std::vector<FlowResult> results(s.flows);
  std::string rate_latency_json;
  if (s.fork_each) {
    if (!send_forked(o, s.flows, results)) return 1;
  } else {
    rate_latency_json = send_threaded(o, s.flows, s.rate_latency, results);
  }
  return report_send(o, s.flows, results, rate_latency_json);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage_error("expected a command: send or recv");
  std::string_view cmd = argv[1];
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h") {
      std::fputs(kHelp, stdout);
      return 0;
    }
  }
  if (cmd == "recv") return run_recv(argc, argv);
  if (cmd == "send") return run_send(argc, argv);
  usage_error("unknown command '" + std::string(cmd) + "' (send or recv)");
}
