// flowtune-pacer: the host's aggregate pacer (flowtune/pacer/pacer.h). Runs
// in the host's network namespace, as root (CAP_NET_ADMIN), one per host;
// the allocator tells it the host's rate and it keeps a tbf on the host's
// egress at that rate. Removing the qdisc on exit puts the host back as it was.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include <zmq.h>

#include "flowtune/common/cli.h"
#include "flowtune/common/curve.h"
#include "flowtune/common/endpoint.h"
#include "flowtune/metrics/exposer.h"
#include "flowtune/pacer/metrics.h"
#include "flowtune/pacer/pacer.h"
#include "flowtune/wire/codec.h"
#include "flowtune/wire/messages.h"

namespace {

using namespace flowtune;

constexpr const char* kUsage = R"(usage: flowtune-pacer --dev DEV --host HOST [options]

Paces a whole host: keeps a tbf on DEV (the host's egress) at the sum of the
rates the allocator gave the host's flows, so the host never sends more than
its rates however its sockets' pacing timers fire (with --qdisc htb, small
packets and traffic to the allocator go around it). Needs root (tc) and
runs in the host's network namespace, one per host. The qdisc is removed
on exit (SIGTERM, SIGINT, SIGHUP); if the allocator goes silent for a
lease, DEV is shaped to the link rate until it answers again. Killed outright (SIGKILL), it leaves its qdisc (starting it
again replaces it) and, if it had changed it, the packet-size setting at 0
(see --small-tso-below), which the next pacer in the namespace puts back.

options:
  --dev DEV              the host's egress device (required)
  --host HOST            the host's name or address in the allocator's
                         topology (required; default $FLOWTUNE_HOST)
  --allocator ENDPOINT   default $FLOWTUNE_ALLOCATOR or tcp://127.0.0.1:5555
  --curve-server KEY     the allocator's public key (Z85, or its .pub file):
                         speak CURVE (default $FLOWTUNE_CURVE_SERVER)
  --curve-key FILE       this host's key pair (default $FLOWTUNE_CURVE_KEY,
                         or $FLOWTUNE_CURVE_SECRET); docs/security.md
  --link-rate RATE       the host's link, e.g. 1gbit, 100mbit (default 1gbit)
  --margin F             shape to the sum times (1 + F) (default 0.01)
  --overhead F           wire bytes per payload byte (default 1514/1448)
  --floor RATE           added for unscheduled traffic (default 0)
  --min-rate RATE        never shape an allocation below this (default 0)
  --idle-rate RATE       the rate while no flow of the host is rated
                         (default: the link rate)
  --cut-hysteresis F     a lower allocation is applied only once it is F
                         below the rate in force (default 0)
  --raise-slack F        a raise sets the rate F above the allocation, so
                         the moves after it within that band need no
                         change (default 0)
  --burst BYTES          the smallest tbf bucket, and an idle host's
                         (default 3028: two full frames)
  --burst-us US          an allocated host's bucket: US microseconds at its
                         rate, at least --burst (default 0: --burst
                         always)
  --burst-gap-share F    tbf fills its bucket at every change: a change's
                         bucket is at most F of what the rate sends since
                         the previous change, so frequent changes keep
                         --burst (default 0.05; 1: no bound)
  --idle-hold-ms MS      keep the host's last rate this long after its last
                         rated flow ends (default 100)
  --lease-ms MS          shape to the allocator's rate this long after its
                         last message (default 1000, the allocator's lease)
  --qdisc tbf|htb        tbf (default): one tbf for all of DEV's traffic,
                         ACKs and control too; htb: packets below 256
                         bytes (pure ACKs, requests) and traffic to the
                         allocator in a class of their own, the rest
                         through the tbf, for hosts that receive far more
                         than they send (costs CPU: docs/pacer.md)
  --while-pid PID        exit (removing the qdisc) when process PID exits
                         (flowtune-run --pacer uses it)
  --small-tso-below RATE while the host's flows' mean rate (or, with none,
                         DEV's) is below RATE, or DEV's shaped rate is
                         below --small-tso-host-below, the host's sockets
                         build packets of about 1 ms at their rate
                         (net.ipv4.tcp_tso_rtt_log 0, put back once both
                         are at twice theirs, and on exit; one pacer per
                         namespace manages it); 0: no such test (default
                         10mbit). A socket with a small RTT otherwise
                         sends 64 KB at a time however low its rate, and
                         waits 64 KB / rate before its next send even
                         after its rate is raised: 52 ms at 10 Mbit/s,
                         half a second at the 1 Mbit/s a starved priority
                         class keeps
  --small-tso-host-below RATE
                         the host's test (default 100mbit: a 64 KB packet
                         sits 5 ms in DEV's tbf, and the delay holds its
                         socket's congestion window back)
  --metrics ADDR:PORT    serve Prometheus metrics at http://ADDR:PORT/metrics:
                         the qdisc's statistics (as tc -s shows them: drops,
                         overlimits, bytes) and the rate applied (off by
                         default; docs/operate.md)
  --verbose              print every change on standard error
  -h, --help             show this help

Prints "registered" on standard output once the allocator has accepted it
("busy" when another pacer shapes DEV).

One pacer per device: a second one for the same device (in the same network
namespace) exits with status 3 and leaves the first in charge.

exit status: 0 stopped (a signal, or --while-pid's process ended), 1 tc or
ZeroMQ failed, 2 bad usage, 3 another pacer already shapes DEV.
)";

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

std::uint64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// "1gbit", "116mbit", "500kbit", "1000000" (bit/s).
double parse_rate(cli::Args& args) {
  const std::string v = args.value();
  // A decimal number, then a unit: strtod alone would also take 0x10 and inf.
  const std::size_t digits = v.find_first_not_of("0123456789+-.eE");
  const std::string number = v.substr(0, digits);
  const std::string unit = digits == std::string::npos ? "" : v.substr(digits);
  char* end = nullptr;
  const double x = number.empty() ? -1 : std::strtod(number.c_str(), &end);
  const double mult = unit == "" || unit == "bit" ? 1 : unit == "kbit" ? 1e3
                      : unit == "mbit" ? 1e6 : unit == "gbit" ? 1e9 : -1;
  if (number.empty() || *end != '\0' || mult < 0 || !(x >= 0) || !std::isfinite(x)) {
    args.fail("expected a rate such as 1gbit or 100mbit, got '" + v + "'");
  }
  return x * mult;
}

struct Options {
  pacer::PacerConfig config;
  std::string dev, host, allocator;
  std::string curve_server, curve_key;
  flowtune::curve::ClientCurve curve;
  pacer::Qdisc qdisc = pacer::Qdisc::kTbf;
  int while_pid = 0;
  bool verbose = false;
  pacer::PacketSizeRule packets;
  std::string metrics;  // ADDR:PORT; empty: off
};

Options parse(int argc, char** argv) {
  Options o;
  if (const char* h = std::getenv("FLOWTUNE_HOST")) o.host = h;
  const char* a = std::getenv("FLOWTUNE_ALLOCATOR");
  o.allocator = a != nullptr && *a != 0 ? a : "tcp://127.0.0.1:5555";
  cli::Args args("flowtune-pacer", kUsage, argc, argv);
  while (args.next()) {
    if (args.is("--dev")) o.dev = args.value();
    else if (args.is("--host")) o.host = args.value();
    else if (args.is("--allocator")) o.allocator = args.value();
    else if (args.is("--curve-server")) o.curve_server = args.value();
    else if (args.is("--curve-key")) o.curve_key = args.value();
    else if (args.is("--link-rate")) o.config.link_bps = parse_rate(args);
    else if (args.is("--margin")) o.config.margin = args.number();
    else if (args.is("--overhead")) o.config.overhead = args.number();
    else if (args.is("--floor")) o.config.floor_bps = parse_rate(args);
    else if (args.is("--min-rate")) o.config.min_bps = parse_rate(args);
    else if (args.is("--idle-rate")) o.config.idle_bps = parse_rate(args);
    else if (args.is("--cut-hysteresis")) o.config.lower_hysteresis = args.number(0, 0.99);
    else if (args.is("--raise-slack")) o.config.raise_slack = args.number(0, 1);
    else if (args.is("--burst")) o.config.burst_bytes = static_cast<std::uint32_t>(args.count(64u << 20));
    else if (args.is("--burst-us")) o.config.burst_us = args.count(1'000'000);
    else if (args.is("--burst-gap-share")) o.config.burst_gap_share = args.number();
    else if (args.is("--idle-hold-ms")) o.config.idle_hold_us = static_cast<std::uint64_t>(args.number(0, 3.6e6) * 1000);
    else if (args.is("--lease-ms")) o.config.lease_us = static_cast<std::uint64_t>(args.number(0, 3.6e6) * 1000);
    else if (args.is("--qdisc")) o.qdisc = args.choice<pacer::Qdisc>(
        {{"tbf", pacer::Qdisc::kTbf}, {"htb", pacer::Qdisc::kHtb}});
    else if (args.is("--while-pid")) o.while_pid = static_cast<int>(args.count(1 << 22));
    else if (args.is("--verbose")) o.verbose = true;
    else if (args.is("--metrics")) o.metrics = args.value();
    else if (args.is("--small-tso-below")) o.packets.flow_below_bps = parse_rate(args);
    else if (args.is("--small-tso-host-below")) o.packets.host_below_bps = parse_rate(args);
    else args.unknown();
  }
  if (o.dev.empty()) args.usage_error("flowtune-pacer", "--dev is required");
  if (const std::string why = o.metrics.empty() ? "" : metrics::listen_error(o.metrics); !why.empty()) {
    args.usage_error("flowtune-pacer", "--metrics: " + why);
  }
  if (o.host.empty()) args.usage_error("flowtune-pacer", "--host (or $FLOWTUNE_HOST) is required");
  if (const std::string why = endpoint_port_error(o.allocator); !why.empty()) {
    args.usage_error("flowtune-pacer", "allocator endpoint " + why);
  }
  auto curve = flowtune::curve::client_keys(o.curve_server, o.curve_key);
  if (!curve) args.usage_error("flowtune-pacer", "CURVE: " + curve.error().message);
  o.curve = std::move(curve).value();
  try {
    pacer::validate(o.config);
  } catch (const std::invalid_argument& e) {
    args.usage_error("flowtune-pacer", e.what());
  }
  return o;
}

class Link {
 public:
  // `endpoint` passed endpoint_port_error in parse().
  // keys: null, or CURVE's (parse() loaded them).
  Link(const std::string& endpoint, const flowtune::curve::ClientKeys* keys) : endpoint_(endpoint) {
    if (keys != nullptr) keys_ = *keys;
    ctx_ = zmq_ctx_new();
    sock_ = ctx_ != nullptr ? zmq_socket(ctx_, ZMQ_DEALER) : nullptr;
    const int linger = 0;
    if (sock_ == nullptr || zmq_setsockopt(sock_, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
        (keys != nullptr && flowtune::curve::apply_client(sock_, *keys) != 0) ||
        zmq_connect(sock_, endpoint.c_str()) != 0) {
      throw std::runtime_error("cannot connect to " + endpoint + ": " + zmq_strerror(zmq_errno()));
    }
  }
  ~Link() {
    if (sock_ != nullptr) zmq_close(sock_);
    if (ctx_ != nullptr) zmq_ctx_term(ctx_);
  }
  // The allocator rotated its key (docs/security.md): with its key named by
  // a file, the file is read again; a new key is connected with. Called
  // while the allocator is silent, at most once a second.
  void follow_server_key() {
    if (!keys_) return;
    const flowtune::Result<bool> changed = flowtune::curve::follow_server_key(&*keys_);
    if (!changed) {
      const std::string& why = changed.error().message;
      if (why != key_error_) std::fprintf(stderr, "flowtune-pacer: %s; the key in use stays\n", why.c_str());
      key_error_ = why;
      return;
    }
    key_error_.clear();
    if (!*changed) return;
    if (int e = flowtune::curve::reconnect(sock_, *keys_, endpoint_); e != 0) {
      std::fprintf(stderr, "flowtune-pacer: reconnecting with the allocator's new key: %s\n", zmq_strerror(e));
      return;
    }
    std::fprintf(stderr, "flowtune-pacer: the allocator's key changed (%s); reconnected\n",
                 keys_->server_file.c_str());
  }
  void send(std::vector<wire::EndpointEvent> events) {
    wire::EndpointMessage m;
    m.seq = ++seq_;
    m.events = std::move(events);
    const std::vector<std::uint8_t> bytes = wire::encode(m);
    (void)zmq_send(sock_, bytes.data(), bytes.size(), ZMQ_DONTWAIT);  // lost: retried
  }
  // Waits up to timeout_ms for a message; false on timeout, a signal, or
  // `also` (an fd, -1 = none) becoming readable (*also_ready is set).
  bool receive(long timeout_ms, wire::AllocatorMessage* out, int also, bool* also_ready) {
    zmq_pollitem_t items[2] = {{sock_, 0, ZMQ_POLLIN, 0}, {nullptr, also, ZMQ_POLLIN, 0}};
    if (zmq_poll(items, also >= 0 ? 2 : 1, timeout_ms) <= 0) return false;
    if (also >= 0 && (items[1].revents & ZMQ_POLLIN) != 0) {
      *also_ready = true;
      return false;
    }
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    bool ok = false;
    if (zmq_msg_recv(&msg, sock_, ZMQ_DONTWAIT) >= 0) {
      const auto* p = static_cast<const std::uint8_t*>(zmq_msg_data(&msg));
      ok = wire::decode({p, zmq_msg_size(&msg)}, out).ok();
    }
    zmq_msg_close(&msg);
    return ok;
  }

 private:
  std::string endpoint_;
  std::optional<flowtune::curve::ClientKeys> keys_;
  std::string key_error_;  // the last one told
  void* ctx_ = nullptr;
  void* sock_ = nullptr;
  std::uint64_t seq_ = 0;
};

// The allocator's IPv4 address and port from a tcp:// endpoint, for the
// shaper's control class (--qdisc htb); {0, 0} for other transports (ipc://
// is local).
std::pair<std::uint32_t, std::uint16_t> control_address(const std::string& endpoint) {
  const std::string prefix = "tcp://";
  if (endpoint.rfind(prefix, 0) != 0) return {0, 0};
  const std::string rest = endpoint.substr(prefix.size());
  const auto colon = rest.rfind(':');
  if (colon == std::string::npos) return {0, 0};
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (getaddrinfo(rest.substr(0, colon).c_str(), nullptr, &hints, &res) != 0 || res == nullptr) {
    throw std::runtime_error("cannot resolve the allocator's address in " + endpoint);
  }
  const std::uint32_t ip = ntohl(reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr.s_addr);
  freeaddrinfo(res);
  const long port = std::strtol(rest.c_str() + colon + 1, nullptr, 10);
  if (port <= 0 || port > 65535) throw std::runtime_error("bad port in " + endpoint);
  return {ip, static_cast<std::uint16_t>(port)};
}

constexpr int kExitBusy = 3;

// /run/flowtune-pacer.<network namespace's inode>.<name>, opened and locked
// exclusively; the fd stays open, so the lock lives with the process. fd -1
// when there is no /run or no namespace to name the file by: nothing guards
// then, and the caller goes on as the lock's holder.
struct RunLock {
  int fd = -1;
  bool held = true;  // false: another process holds it
};
RunLock lock_run_file(const std::string& name) {
  struct stat ns{};
  if (stat("/proc/self/ns/net", &ns) != 0) return {};
  const std::string path = "/run/flowtune-pacer." + std::to_string(ns.st_ino) + "." + name;
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return {};
  if (flock(fd, LOCK_EX | LOCK_NB) == 0) return {fd, true};
  close(fd);
  return {-1, false};
}

// One pacer per (network namespace, device). False when another pacer holds it.
bool lock_device(const std::string& dev) { return lock_run_file(dev + ".lock").held; }

// The host's sockets' packet size (pacer::small_packets says when): TCP
// sizes a packet to about 1 ms at its rate, but since Linux 5.18 a socket
// with a small minimum RTT may add up to 64 KB whatever its rate
// (net.ipv4.tcp_tso_rtt_log; 0 turns that off). Measured: bulk flows took
// 133-254 ms, not 50, to take a 100 Mbit/s link back after a class-0
// transfer had held them at 1 Mbit/s; 40-46 ms with the setting at 0.
// Always 0 costs CPU at high rates (more, smaller packets), hence only
// while the host's flows are slow (HostPacer::mean_flow_bps: each socket is
// paced at its own rate, which can be far below the host's total, as for
// 60 flows sharing a 250 Mbit/s host in a shuffle) or the host itself is
// (a 64 KB packet queued in its tbf inflates its socket's RTT): a tenant's
// 16 flows at 29 Mbit/s each on a 470 Mbit/s host lost a fifth of their
// host's share with small packets.
//
// The setting is per network namespace, so one pacer per namespace manages
// it (a lock beside the device locks). The value to put back is kept in the
// lock file while the setting is 0, so a pacer that was killed before it
// could put it back is undone by the next one.
class PacketSize {
 public:
  PacketSize(const pacer::PacketSizeRule& rule, bool verbose) : rule_(rule), verbose_(verbose) {
    const bool off = rule_.flow_below_bps <= 0 && rule_.host_below_bps <= 0;
    if (off || (old_ = read()).empty()) return;  // off, or an older kernel
    const RunLock lock = lock_run_file("tso_rtt_log");
    if (!lock.held) {
      if (verbose_) std::fprintf(stderr, "flowtune-pacer: another pacer manages %s\n", kPath);
      old_.clear();
      return;
    }
    lock_fd_ = lock.fd;
    const std::string saved = saved_value();
    if (!saved.empty() && old_ == "0") {
      old_ = saved;  // left at 0 by a pacer that died: ours to put back
      small_ = true;
    }
  }
  ~PacketSize() {
    if (small_ && read() == "0" && write(old_)) save("");
  }
  PacketSize(const PacketSize&) = delete;
  PacketSize& operator=(const PacketSize&) = delete;

  void follow(const pacer::HostPacer& state) {
    // Not ours, or already 0 before any pacer: nothing to do.
    if (old_.empty() || old_ == "0" || failed_) return;
    tests_ = state.packet_size(tests_, rule_);
    const bool small = tests_.small();
    if (small == small_) return;
    if (small) save(old_);
    if (!write(small ? "0" : old_)) {
      std::fprintf(stderr, "flowtune-pacer: warning: cannot write %s (%s): slow flows may stall "
                   "after their rate is raised\n", kPath, std::strerror(errno));
      failed_ = true;
      return;
    }
    if (!small) save("");
    small_ = small;
    if (verbose_) {
      std::fprintf(stderr,
                   "flowtune-pacer: %s now %s (flows at %.1f Mbit/s, host shaped at %.1f Mbit/s)\n",
                   kPath, small ? "0" : old_.c_str(), state.mean_flow_bps() / 1e6,
                   state.current_bps() / 1e6);
    }
  }

 private:
  static constexpr const char* kPath = "/proc/sys/net/ipv4/tcp_tso_rtt_log";
  static std::string read() {
    std::FILE* f = std::fopen(kPath, "re");
    if (f == nullptr) return "";
    char buf[32] = {};
    const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
    std::fclose(f);
    std::string v = ok ? buf : "";
    while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
    return v;
  }
  static bool write(const std::string& v) {
    std::FILE* f = std::fopen(kPath, "we");
    if (f == nullptr) return false;
    const bool ok = std::fputs(v.c_str(), f) >= 0;
    return std::fclose(f) == 0 && ok;
  }
  // Without the lock file (no /run) nothing is saved: the pacer manages the
  // setting alone, as it would holding the lock.
  std::string saved_value() const {
    if (lock_fd_ < 0) return "";
    char buf[32] = {};
    const ssize_t n = pread(lock_fd_, buf, sizeof buf - 1, 0);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
  }
  void save(const std::string& v) const {
    if (lock_fd_ < 0) return;
    (void)!ftruncate(lock_fd_, 0);
    (void)!pwrite(lock_fd_, v.data(), v.size(), 0);
  }
  pacer::PacketSizeRule rule_;
  pacer::PacketSizeState tests_;  // each test's state; small_ is what is written
  bool verbose_;
  std::string old_;  // the value to put back; empty: the setting is not ours
  int lock_fd_ = -1;  // the lock file, which holds old_ while the setting is 0
  bool small_ = false, failed_ = false;
};

// A pidfd that becomes readable when `pid` exits; -1 when none is watched.
int watch_pid(int pid) {
  if (pid <= 0) return -1;
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) throw std::runtime_error("--while-pid " + std::to_string(pid) + ": no such process");
  return fd;
}

// What the loop applied, for --metrics (pacer/metrics.h).
void publish(pacer::PacerState& m, const pacer::Shape& s, const pacer::HostPacer& state,
             const pacer::Shaper& shaper) {
  m.shaped_bps.store(s.bps, std::memory_order_relaxed);
  m.burst_bytes.store(s.burst_bytes, std::memory_order_relaxed);
  m.host_rate_bytes_per_sec.store(state.host_rate(), std::memory_order_relaxed);
  m.changes.store(shaper.changes(), std::memory_order_relaxed);
}

// --metrics: the qdisc's statistics and what the loop applied; empty when off.
metrics::Exposition start_metrics(const Options& o, const pacer::PacerState& m) {
  if (o.metrics.empty()) return {};
  metrics::Exposition e =
      metrics::expose("--metrics", o.metrics, std::make_shared<pacer::PacerCollector>(o.dev, m));
  std::fprintf(stderr, "flowtune-pacer: metrics on http://%s/metrics (port %d)\n", o.metrics.c_str(), e.port());
  return e;
}

constexpr std::uint64_t kHeartbeatUs = 1'000'000;

// The host's registration with the allocator: hellos (backing off) until
// one is acknowledged, then heartbeats.
struct Registration {
  bool registered = false, told_unknown = false, said_registered = false;
  std::uint64_t epoch = 0, backoff_us = 10'000, next_send_us = 0;
};

// A hello or a heartbeat, when one is due at `now`.
void send_due(Link& link, Registration& r, const wire::Hello& hello, std::mt19937_64& rng,
              std::uint64_t now) {
  if (now < r.next_send_us) return;
  if (r.registered) {
    link.send({wire::Heartbeat{}});
    r.next_send_us = now + kHeartbeatUs;
    return;
  }
  link.send({hello});
  // Unanswered or refused hellos back off, with jitter, up to 10 s.
  r.next_send_us = now + r.backoff_us / 2 + rng() % (r.backoff_us / 2 + 1);
  r.backoff_us = std::min<std::uint64_t>(r.backoff_us * 2, 10'000'000);
}

// Takes the allocator's message `m` into `r`: a new epoch or a refusal ends
// the registration, a hello_ack makes one. True when the host is registered
// (the message's rates apply); otherwise a hello is due at once, unless the
// allocator refused the last.
bool on_reply(const wire::AllocatorMessage& m, Registration& r) {
  if (r.epoch != 0 && m.epoch != r.epoch) r.registered = false;  // a new allocator: hello again
  r.epoch = m.epoch;
  bool refused = false;
  for (const wire::ErrorReport& e : m.errors) {
    if (e.code == wire::ErrorCode::kNotRegistered) refused = true, r.registered = false;
    if (e.code == wire::ErrorCode::kUnknownHost) {
      refused = true;
      if (!r.told_unknown) std::fprintf(stderr, "flowtune-pacer: %s\n", e.text.c_str());
      r.told_unknown = true;
    }
  }
  if (m.hello_ack) {
    if (!r.registered && !r.said_registered) {
      // For scripts that wait for it (the first time only).
      std::printf("registered\n");
      std::fflush(stdout);
      r.said_registered = true;
    }
    r.registered = true;
    r.backoff_us = 10'000;
    r.next_send_us = now_us() + kHeartbeatUs;
  }
  if (!r.registered && !refused) r.next_send_us = 0;  // say hello at once
  return r.registered;
}

int run(const Options& o) {
  if (!lock_device(o.dev)) {
    std::fprintf(stderr, "flowtune-pacer: another pacer already shapes %s; leaving it in charge\n",
                 o.dev.c_str());
    std::printf("busy\n");  // for scripts that wait for "registered"
    return kExitBusy;
  }
  const int pidfd = watch_pid(o.while_pid);
  PacketSize packets(o.packets, o.verbose);
  pacer::HostPacer state(o.config);
  const auto [control_ip, control_port] = control_address(o.allocator);
  // Until the allocator answers, the host runs as if unpaced: the link's rate
  // and bucket.
  const pacer::Shape unshaped{o.config.link_bps,
                              state.bucket_bytes(o.config.link_bps, /*allocated=*/true)};
  pacer::Shaper shaper(o.dev, o.qdisc, o.config.link_bps, o.config.burst_bytes, unshaped,
                       control_ip, control_port);
  Link link(o.allocator, o.curve.on ? &o.curve.keys : nullptr);
  pacer::PacerState shown;
  publish(shown, unshaped, state, shaper);
  const metrics::Exposition exposition = start_metrics(o, shown);
  std::mt19937_64 rng(std::random_device{}());
  const std::string id = "pacer-" + o.host + "-" + std::to_string(getpid()) + "-" +
                         std::to_string(rng() % 1000000);
  const wire::Hello hello{id, o.host, true};
  Registration reg;
  std::uint64_t heard_us = now_us(), next_key_check_us = 0;
  const auto apply = [&](std::optional<pacer::Shape> s, const char* why) {
    packets.follow(state);
    if (!s) return true;
    if (o.verbose) {
      std::fprintf(stderr,
                   "flowtune-pacer: %s: %s now %.1f Mbit/s, bucket %u B (host rate %.1f Mbit/s)\n",
                   why, o.dev.c_str(), s->bps / 1e6, s->burst_bytes,
                   static_cast<double>(state.host_rate()) * 8e-6);
    }
    const bool ok = shaper.set(*s);
    publish(shown, *s, state, shaper);
    return ok;
  };
  while (g_stop == 0) {
    const std::uint64_t now = now_us();
    send_due(link, reg, hello, rng, now);
    if (!apply(state.on_tick(now), "lease lapsed or idle")) return 1;
    const std::uint64_t wake = std::min(reg.next_send_us, state.next_tick_us());
    const long timeout_ms = static_cast<long>((wake > now ? wake - now : 0) / 1000) + 1;
    wire::AllocatorMessage m;
    bool owner_gone = false;
    if (!link.receive(timeout_ms, &m, pidfd, &owner_gone)) {
      if (owner_gone) break;
      // Silent for a heartbeat: the allocator's key may have rotated.
      const std::uint64_t t = now_us();
      if (t - heard_us > kHeartbeatUs && t >= next_key_check_us) {
        next_key_check_us = t + kHeartbeatUs;
        link.follow_server_key();
      }
      continue;
    }
    heard_us = now_us();
    shown.messages.fetch_add(1, std::memory_order_relaxed);
    const bool registered = on_reply(m, reg);
    shown.registered.store(registered, std::memory_order_relaxed);
    if (!registered) continue;
    if (!apply(state.on_message(m, now_us()), "allocator")) return 1;
  }
  // Always said: how often the shaper changed is what a pacer costs.
  std::fprintf(stderr, "flowtune-pacer: %llu changes; removing the qdisc from %s\n",
               static_cast<unsigned long long>(shaper.changes()), o.dev.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flowtune-pacer: %s\n", e.what());
    return 1;
  }
}
