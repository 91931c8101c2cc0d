// End-to-end benchmark of flowtune-allocator over loopback ZeroMQ. It starts
// the real daemon binary and plays endpoints against it from one thread.
//
// throughput: 8 endpoints hold A active flows (resync), then send batched
//   messages of B events (B/2 flowlet ends + B/2 starts, so A stays constant)
//   as fast as the daemon takes them. Reported: events/s absorbed, measured
//   by the daemon's own counters over the timed window (so queued but
//   unprocessed messages do not count), its CPU use, and control bytes per
//   flowlet in both directions.
// latency: background endpoints hold A flows; a probe endpoint sends one
//   flowlet start and times until the rate for that flowlet arrives, then
//   ends it. Reported: p50/p99/p99.9 of that control loop, beside a baseline
//   measured in the same run: a ZeroMQ DEALER/ROUTER echo of a message of the
//   same size over the same transport (the floor any allocator pays).
//
// ctl flood (--ctl-flood): the latency run (100,000 flows carrying 10,000
//   tenant names) with and without a flowtune-ctl client dumping the
//   allocator's whole state 5 times a second (status, then every page of
//   endpoints, flows, links and tenants, as `flowtune-ctl all --limit`
//   does), runs interleaved: the loop's turn p99 and the probe's p99 under
//   the flood against the same figures without it (the control plane must
//   not stall the data plane). The client runs at SCHED_IDLE, as if from
//   another machine. --allocator-binary runs an older daemon.
//
// flood (--flood): legitimate endpoints and a probe from one address, then
//   a flood from another (many endpoints: random, repeated and absurd
//   starts, ends without starts, for 10 s; --quick: 2 s) into hosts whose links
//   theirs do not share, with the per-source quotas on and off, interleaved:
//   the probe's start -> rate p99 and refusals under the flood against the
//   same before it, the largest move of a legitimate flow's rate, what the
//   flood got, and the daemon's memory idle, under the flood and once the
//   flood's endpoints have timed out. --quotas-only skips the runs without
//   quotas; FT_FLOOD_QUOTAS="--flag value ..." adds daemon flags to them;
//   --flood-endpoints N spreads the flood over N endpoints (default 300,
//   --quick 64). The flood runs at nice 19, and on a small machine still
//   takes CPU the daemon and the probe wait for; --apart (root) runs this
//   process and the daemon at SCHED_FIFO and the flood at SCHED_IDLE, as
//   if the flood came from another machine and the daemon had its cores.
//   The kernel's real-time throttle then stops the busy daemon for the rest
//   of each period (50 ms a second by default): the JSON records
//   rt_runtime_us, and the probe's tail is the daemon's only with it off
//   (-1).
// curve (--curve): the throughput run (10,000 flows) and the latency run
//   (1,000 flows, probes 0.5 and 5 ms apart) with the daemon and every
//   client speaking CURVE against the same runs without it, interleaved:
//   what authentication costs the control loop.
//
// early rates (--early-rates): the latency run with the daemon's
//   --early-rates off and on (a start answered before the turn's iteration),
//   at 1,000, 10,000 and 50,000 flows (--quick: 1,000), probes 0.5 and 5 ms
//   apart, interleaved with the bare ZeroMQ echo at each gap, twice (quick:
//   once), the daemon polling without sleeping for --busy-poll-us US after
//   traffic (default 0). Reported per run: p50/p99 and what the daemon adds
//   to the echo of the same round (added_p50_us, added_p99_us), and early
//   rates told and corrected per probe.
//
// memory (--memory): the daemon with its default quotas through rounds of
//   10,000 distinct fake endpoints (each on its own connection from one of
//   four peers, 8 flowlets each, then gone), 5 s of decompression bombs, and
//   connection storms (5,000 at once, half ZeroMQ hellos, half raw TCP
//   sending junk): its RSS idle (the baseline), at each phase's peak, and
//   once the phase's endpoints are gone.
//
// metrics overhead (--metrics-overhead): the latency run at 100,000 flows
//   (--quick: 10,000), 1,000 probes 10 ms apart (quick: 100), with the
//   daemon's --metrics off, and on with a scrape of /metrics every second
//   (bench/metrics_scraper.h), interleaved, twice (quick: once): the loop's
//   turn p99 with scraping over the same without (goal: at most 1.1).
//
// Prints one JSON object (bench/daemon_table.py makes a table of it).
// Machine caveat: generator and daemon share the machine's cores.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "proc_stats.h"
#include "flowtune/common/curve.h"
#include "flowtune/wire/codec.h"
#include "metrics_scraper.h"

extern char** environ;

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace wire = flowtune::wire;

constexpr std::uint32_t kHosts = 512;
constexpr int kEndpoints = 8;
// The daemon under test (--allocator-binary: A/B against another build).
std::string g_allocator_binary = FT_ALLOCATOR_BINARY;
// --flood --apart: as if the flood came from another machine and the daemon
// and the legitimate endpoints had cores of their own (set in main).
bool g_apart = false;
// --flood: the endpoints the flood spreads over (--flood-endpoints).
int g_flood_endpoints = 0;

// CURVE for the runs that set it: the daemon's flags and the one key every
// client (endpoints and control) holds, allowed as an endpoint for any host
// and as a ctl reader.
struct Curve {
  std::vector<std::string> daemon_args;
  flowtune::curve::ClientKeys keys;
};
const Curve* g_curve = nullptr;

void secure(zmq::socket_t& s) {
  if (g_curve != nullptr && flowtune::curve::apply_client(s.handle(), g_curve->keys) != 0) {
    throw std::runtime_error("cannot set CURVE keys");
  }
}

// Keys in a scratch directory (removed by the caller).
Curve make_curve(const std::string& dir) {
  namespace curve = flowtune::curve;
  const curve::KeyPair server = curve::generate();
  const curve::KeyPair client = curve::generate();
  if (server.public_key.empty()) throw std::runtime_error("libzmq has no CURVE");
  for (const char* d : {"", "/clients", "/ctl"}) ::mkdir((dir + d).c_str(), 0700);
  std::ofstream(dir + "/server.key") << "public-key = \"" << server.public_key
                                     << "\"\nsecret-key = \"" << server.secret_key << "\"\n";
  ::chmod((dir + "/server.key").c_str(), 0600);
  for (const char* d : {"/clients", "/ctl"}) {
    std::ofstream(dir + d + "/bench.pub") << "public-key = \"" << client.public_key
                                          << "\"\nhosts = [\"*\"]\n";
  }
  return {{"--curve-secret", dir + "/server.key", "--curve-clients", dir + "/clients",
           "--curve-ctl", dir + "/ctl"},
          {server.public_key, client, {}}};
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class Daemon {
 public:
  Daemon(const std::string& listen, unsigned threads, std::uint64_t busy_poll_us = 0,
         const std::vector<std::string>& extra = {})
      : listen_(listen) {
    std::vector<std::string> args = {g_allocator_binary, "--listen", listen, "--hosts",
                                     std::to_string(kHosts), "--host-gbps", "10", "--threads",
                                     std::to_string(threads), "--log-level", "warn",
                                     "--max-msg-rate", "0", "--max-source-bytes-per-sec", "0",
                                     "--endpoint-timeout-ms", "60000",
                                     "--busy-poll-us", std::to_string(busy_poll_us)};
    if (g_curve != nullptr) args.insert(args.end(), g_curve->daemon_args.begin(), g_curve->daemon_args.end());
    args.insert(args.end(), extra.begin(), extra.end());  // later flags win
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ) != 0) {
      throw std::runtime_error("cannot start " + args[0]);
    }
    for (int i = 0; i < 200 && !ask("status", 50); ++i) {
    }
    if (!ask("status", 1000)) throw std::runtime_error("allocator did not come up");
  }
  ~Daemon() {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  std::optional<json> ask(const std::string& request, int timeout_ms = 2000) {
    zmq::socket_t s(ctx_, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    secure(s);
    s.connect(listen_);
    s.send(zmq::str_buffer("flowtune-ctl"), zmq::send_flags::sndmore);
    s.send(zmq::buffer(request), zmq::send_flags::none);
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms));
    zmq::message_t tag, body;
    if ((item.revents & ZMQ_POLLIN) == 0 || !s.recv(tag) || !s.recv(body)) return std::nullopt;
    return json::parse(body.to_string_view());
  }
  // Waits out "retry_ms" answers, as flowtune-ctl does: under a ctl flood
  // the bench's own requests share the daemon's budget.
  json status() {
    for (int i = 0; i < 500; ++i) {
      json j = ask("status").value();
      if (!j.contains("retry_ms")) return j;
      std::this_thread::sleep_for(std::chrono::milliseconds(j["retry_ms"].get<int>()));
    }
    throw std::runtime_error("the allocator kept answering status with retry_ms");
  }
  // User + system CPU seconds of the daemon so far.
  double cpu_s() const { return flowtune::bench::process_cpu_s(pid_); }
  // Resident memory, MB.
  double rss_mb() const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024;
    }
    return 0;
  }
  // Waits until the daemon holds `flows` flows and has stopped iterating.
  void wait_idle(std::size_t flows, const std::function<void()>& drain) {
    const auto t0 = Clock::now();
    while (seconds_since(t0) < 60) {
      drain();
      const json s = status();
      if (s["flows"] == flows && !s["busy"].get<bool>()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw std::runtime_error("allocator did not settle");
  }

 private:
  zmq::context_t ctx_{1};
  std::string listen_;
  pid_t pid_ = -1;
};

// Distinct tenant names the background flows carry (0: none; the ctl
// flood's runs set it).
std::size_t g_flow_tenants = 0;

wire::FlowletStart flow(std::uint64_t key, std::uint32_t src, std::uint32_t dst) {
  wire::FlowletStart s;
  if (g_flow_tenants > 0) s.tenant = "tenant-" + std::to_string(key % g_flow_tenants);
  s.flow_key = key + 1;  // keys on the wire start at 1
  s.endpoints = wire::HostPair{src, dst};
  s.bytes = 1 << 20;
  return s;
}

struct Endpoint {
  zmq::socket_t socket;
  std::uint32_t host;
  std::uint64_t received = 0;
  std::uint64_t rates = 0;
  Endpoint(zmq::context_t& ctx, const std::string& ep, std::uint32_t h)
      : socket(ctx, zmq::socket_type::dealer), host(h) {
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::sndhwm, 1000);
    socket.set(zmq::sockopt::rcvhwm, 0);
    secure(socket);
    socket.connect(ep);
  }
  void send(const std::vector<std::uint8_t>& bytes) {
    socket.send(zmq::buffer(bytes), zmq::send_flags::none);
  }
  // Reads what is queued; returns the number of messages.
  std::size_t drain() {
    std::size_t n = 0;
    zmq::message_t m;
    while (socket.recv(m, zmq::recv_flags::dontwait)) {
      ++n;
      ++received;
    }
    return n;
  }
};

std::uint32_t dst_for(std::uint64_t key, std::uint32_t src) {
  std::uint64_t x = key * 0x9E3779B97F4A7C15ULL;
  std::uint32_t d = static_cast<std::uint32_t>((x >> 33) % kHosts);
  return d == src ? (d + 1) % kHosts : d;
}

// Registers every endpoint with `per_endpoint` flows (keys 0..per_endpoint-1).
void establish(std::vector<std::unique_ptr<Endpoint>>& eps, std::size_t per_endpoint,
               std::uint64_t id_base) {
  for (std::size_t e = 0; e < eps.size(); ++e) {
    wire::EndpointMessage m;
    m.events.emplace_back(wire::Hello{"bench-" + std::to_string(id_base + e), "h" + std::to_string(eps[e]->host)});
    wire::Resync r;
    for (std::uint64_t k = 0; k < per_endpoint; ++k) r.flows.push_back(flow(k, eps[e]->host, dst_for(k, eps[e]->host)));
    m.events.emplace_back(std::move(r));
    eps[e]->send(wire::encode(m));
  }
}

// Throughput and latency runs hold up to 100,000 flows, all from 127.0.0.1:
// one address, which the per-source quota would hold to its default.
const std::vector<std::string> kNoSourceQuota = {"--max-flows-per-source", "0"};

json throughput_run(const std::string& listen, unsigned threads, std::size_t active,
                    std::size_t batch, double seconds) {
  Daemon d(listen, threads, 0, kNoSourceQuota);
  zmq::context_t ctx(1);
  const std::size_t half = batch / 2;
  // Flows per endpoint: a multiple of half a batch, so the key cycle closes.
  const std::size_t per = std::max<std::size_t>(half, (active / kEndpoints + half / 2) / half * half);
  std::vector<std::unique_ptr<Endpoint>> eps;
  for (int e = 0; e < kEndpoints; ++e) {
    eps.push_back(std::make_unique<Endpoint>(ctx, listen, static_cast<std::uint32_t>(e * (kHosts / kEndpoints))));
  }
  establish(eps, per, 0);
  auto drain_all = [&] {
    for (auto& ep : eps) ep->drain();
  };
  d.wait_idle(per * kEndpoints, drain_all);

  // Pre-encoded cycle: message j ends keys j*h.. and starts keys A+j*h.. (mod A+h).
  const std::size_t key_space = per + half;
  const std::size_t cycle = key_space / half;
  std::vector<std::vector<std::vector<std::uint8_t>>> msgs(eps.size());
  for (std::size_t e = 0; e < eps.size(); ++e) {
    for (std::size_t j = 0; j < cycle; ++j) {
      wire::EndpointMessage m;
      for (std::size_t i = 0; i < half; ++i) {
        m.events.emplace_back(wire::FlowletEnd{(j * half + i) % key_space + 1});
      }
      for (std::size_t i = 0; i < half; ++i) {
        const std::uint64_t k = (per + j * half + i) % key_space;
        m.events.emplace_back(flow(k, eps[e]->host, dst_for(k, eps[e]->host)));
      }
      msgs[e].push_back(wire::encode(m));
    }
  }
  const json s0 = d.status();
  const double cpu0 = d.cpu_s();
  const auto t0 = Clock::now();
  std::vector<std::size_t> next(eps.size(), 0);
  std::uint64_t sent_msgs = 0;
  while (seconds_since(t0) < seconds) {
    for (std::size_t e = 0; e < eps.size(); ++e) {
      // Non-blocking: a full queue means the daemon is behind; move on.
      const auto& bytes = msgs[e][next[e]];
      if (eps[e]->socket.send(zmq::buffer(bytes), zmq::send_flags::dontwait)) {
        next[e] = (next[e] + 1) % cycle;
        ++sent_msgs;
      }
      eps[e]->drain();
    }
  }
  const json s1 = d.status();
  const double elapsed = seconds_since(t0);
  const double cpu = d.cpu_s() - cpu0;
  const json& c0 = s0["counters"];
  const json& c1 = s1["counters"];
  auto delta = [&](const char* k) { return c1[k].get<double>() - c0[k].get<double>(); };
  const double events = delta("events");
  const double msgs_in = delta("messages_in");
  json r = {{"threads", threads},
            {"active_flows", per * kEndpoints},
            {"events_per_message", batch},
            {"seconds", elapsed},
            {"events", events},
            {"events_per_s", events / elapsed},
            {"messages_in", msgs_in},
            {"daemon_cpu_s", cpu},
            {"daemon_cpu_fraction", cpu / elapsed},
            {"iterations", delta("iterations")},
            {"iteration_p50_us", c1["iteration_ns"]["p50"].get<double>() / 1e3},
            {"iteration_p99_us", c1["iteration_ns"]["p99"].get<double>() / 1e3},
            {"rate_updates", delta("rate_updates")},
            {"bytes_in_per_event", delta("bytes_in") / events},
            {"bytes_out_per_rate_update", delta("bytes_out") / std::max(1.0, delta("rate_updates"))},
            {"errors", c1["errors"]},
            {"send_failures", delta("send_failures")}};
  std::cerr << "throughput threads=" << threads << " flows=" << per * kEndpoints << ": "
            << events / elapsed / 1e6 << " M events/s\n";
  return r;
}

struct Quantiles {
  double p50, p99, p999;
};

Quantiles quantiles(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto q = [&](double x) { return v[static_cast<std::size_t>(x * static_cast<double>(v.size() - 1))]; };
  return {q(0.5), q(0.99), q(0.999)};
}

// Round trips of a message of `bytes` bytes through a bare ROUTER echo.
// Two contexts, so each side has its own I/O thread as two processes would.
// Rounds are gap_s apart (waited in poll, not spun) like the probes, so both
// pay the same wake-ups.
Quantiles echo_baseline(const std::string& listen, std::size_t bytes, int rounds, double gap_s) {
  zmq::context_t ctx(1), server_ctx(1);
  zmq::socket_t router(server_ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind(listen);
  std::atomic<bool> stop{false};
  std::thread echo([&] {
    zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
    while (!stop) {
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
      zmq::message_t id, body;
      while (router.recv(id, zmq::recv_flags::dontwait)) {
        (void)router.recv(body);
        router.send(id, zmq::send_flags::sndmore);
        router.send(body, zmq::send_flags::none);
      }
    }
  });
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(listen);
  std::vector<std::uint8_t> payload(bytes, 1);
  std::vector<double> rtt;
  for (int i = 0; i < rounds; ++i) {
    const auto t0 = Clock::now();
    dealer.send(zmq::buffer(payload), zmq::send_flags::none);
    zmq::message_t m;
    (void)dealer.recv(m);
    rtt.push_back(seconds_since(t0) * 1e6);
    std::this_thread::sleep_for(std::chrono::duration<double>(gap_s));
  }
  stop = true;
  echo.join();
  router.close();
  return quantiles(rtt);
}

// Dumps the allocator's state `per_s` times a second, as `flowtune-ctl all
// --limit 100000` does: status, then every page of endpoints, flows, links
// and tenants (each from the previous reply's "next"), waiting out
// "retry_ms" answers; each reply awaited (up to 5 s) before the next
// request. A dump that takes longer than its period starts the next at once.
class CtlFlood {
 public:
  static constexpr const char* kKinds[] = {"status", "endpoints", "flows", "links", "tenants"};
  CtlFlood(const std::string& listen, double per_s) {
    if (per_s <= 0) return;
    thread_ = std::thread([this, listen, per_s] {
      // At SCHED_IDLE, as if from another machine: sending and parsing a
      // reply per 5 ms took CPU the daemon and the probe then waited for
      // on two vCPUs (at nice 19 too: the probe's p50 rose from 0.2 to 1.8
      // ms with the old daemon and the new alike, and with status alone).
      {
        sched_param idle{};
        (void)::sched_setscheduler(0, SCHED_IDLE, &idle);
      }
      zmq::context_t ctx(1);
      zmq::socket_t s(ctx, zmq::socket_type::dealer);
      s.set(zmq::sockopt::linger, 0);
      s.connect(listen);
      const auto period = std::chrono::duration<double>(1.0 / per_s);
      auto next_dump = Clock::now();
      std::size_t kind = 0;
      std::string request = kKinds[0];
      while (!stop_.load()) {
        s.send(zmq::str_buffer("flowtune-ctl"), zmq::send_flags::sndmore);
        s.send(zmq::buffer(request), zmq::send_flags::none);
        zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, std::chrono::milliseconds(5000));
        zmq::message_t tag, body;
        if ((item.revents & ZMQ_POLLIN) == 0 || !s.recv(tag) || !s.recv(body)) continue;
        const json j = json::parse(body.to_string_view(), nullptr, false);
        if (j.is_discarded()) continue;
        if (j.contains("retry_ms")) {
          ++retries_;
          std::this_thread::sleep_for(std::chrono::milliseconds(j["retry_ms"].get<int>()));
          continue;
        }
        ++replies_;
        ++by_kind_[kind];
        bytes_ += body.size();
        if (j.contains("next") && j["next"].is_number()) {
          request = std::string(kKinds[kind]) + " 100000 " + std::to_string(j["next"].get<std::uint64_t>());
          continue;
        }
        kind = (kind + 1) % std::size(kKinds);
        request = kind == 0 ? std::string(kKinds[0]) : std::string(kKinds[kind]) + " 100000";
        if (kind != 0) continue;
        ++dumps_;
        next_dump += std::chrono::duration_cast<Clock::duration>(period);
        while (!stop_.load() && Clock::now() < next_dump) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      }
    });
  }
  ~CtlFlood() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::uint64_t replies() const { return replies_; }
  std::uint64_t bytes() const { return bytes_; }
  std::uint64_t dumps() const { return dumps_; }
  std::uint64_t retries() const { return retries_; }
  // After stop(): replies to each kind of request.
  json replies_by_kind() const {
    json j = json::object();
    for (std::size_t k = 0; k < std::size(kKinds); ++k) j[kKinds[k]] = by_kind_[k];
    return j;
  }

 private:
  std::array<std::uint64_t, std::size(kKinds)> by_kind_{};
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> replies_{0}, bytes_{0}, dumps_{0}, retries_{0};
  std::thread thread_;
};

// One endpoint on each kEndpoints-th host: the background of a latency run.
std::vector<std::unique_ptr<Endpoint>> background(zmq::context_t& ctx, const std::string& listen) {
  std::vector<std::unique_ptr<Endpoint>> bg;
  for (int e = 0; e < kEndpoints; ++e) {
    bg.push_back(std::make_unique<Endpoint>(ctx, listen,
                                            static_cast<std::uint32_t>(e * (kHosts / kEndpoints))));
  }
  return bg;
}

void drain_all(std::vector<std::unique_ptr<Endpoint>>& bg) {
  for (auto& ep : bg) ep->drain();
}

// One latency run: its setting and what it measured.
struct LatencyRun {
  unsigned threads = 0;
  std::size_t flows = 0;  // active around the probe
  int probes = 0;
  double gap_s = 0;
  std::uint64_t busy_poll_us = 0;
  double ctl_per_s = 0;
  std::vector<double> rtt;  // start -> rate of each answered probe, us
  std::size_t start_bytes = 0;
  json s0, s1;     // the daemon's status before and after the probes
  double cpu = 0;  // the daemon's CPU seconds over the probes
  double elapsed = 0;
};

// Probe i: a flowlet start from h1, timed until its rate comes back (at
// most 2 s), then its end.
void probe_once(Endpoint& probe, int i, LatencyRun& run) {
  const std::uint64_t key = 1'000'000 + static_cast<std::uint64_t>(i);
  wire::EndpointMessage m;
  m.seq = static_cast<std::uint64_t>(i);
  m.events.emplace_back(flow(key, 1, dst_for(key, 1)));
  const auto bytes = wire::encode(m);
  run.start_bytes = bytes.size();
  const auto t0 = Clock::now();
  probe.send(bytes);
  bool got = false;
  while (!got && seconds_since(t0) < 2) {
    zmq::message_t reply;
    if (!probe.socket.recv(reply)) continue;
    wire::AllocatorMessage a;
    if (!wire::decode({reply.data<std::uint8_t>(), reply.size()}, &a).ok()) continue;
    for (const auto& r : a.rates) got = got || r.flow_key == key + 1;
  }
  if (got) run.rtt.push_back(seconds_since(t0) * 1e6);
  wire::EndpointMessage end;
  end.events.emplace_back(wire::FlowletEnd{key + 1});
  probe.send(wire::encode(end));
}

// Waits out the gap between probes without spinning (a spinning generator
// would steal the daemon's core), draining everyone.
void wait_gap(std::vector<std::unique_ptr<Endpoint>>& bg, Endpoint& probe, double gap_s) {
  const auto gap = Clock::now();
  std::vector<zmq::pollitem_t> items;
  for (auto& ep : bg) items.push_back({ep->socket.handle(), 0, ZMQ_POLLIN, 0});
  items.push_back({probe.socket.handle(), 0, ZMQ_POLLIN, 0});
  while (seconds_since(gap) < gap_s) {
    const auto left = std::chrono::duration<double>(gap_s - seconds_since(gap));
    zmq::poll(items, std::chrono::duration_cast<std::chrono::milliseconds>(left) +
                         std::chrono::milliseconds(1));
    drain_all(bg);
    probe.drain();
  }
}

// A latency run's JSON (and its line on stderr).
json latency_report(const LatencyRun& run, const CtlFlood& flood) {
  const json& s0 = run.s0;
  const json& s1 = run.s1;
  // A counter's growth over the probes, per probe.
  auto per_probe = [&](const char* counter) {
    return (s1["counters"][counter].get<double>() - s0["counters"][counter].get<double>()) /
           run.probes;
  };
  const Quantiles q = quantiles(run.rtt);
  std::cerr << "latency threads=" << run.threads << " flows=" << run.flows
            << " gap_ms=" << run.gap_s * 1e3 << " busy_poll_us=" << run.busy_poll_us << ": p50 "
            << q.p50 << " us p99 " << q.p99 << " us\n";
  return {
      {"threads", run.threads},
      {"active_flows", run.flows},
      {"probes", run.probes},
      {"answered", run.rtt.size()},
      {"start_message_bytes", run.start_bytes},
      {"p50_us", q.p50},
      {"p99_us", q.p99},
      {"p999_us", q.p999},
      {"gap_ms", run.gap_s * 1e3},
      {"busy_poll_us", run.busy_poll_us},
      {"daemon_turn_p50_us", s1["counters"]["turn_ns"]["p50"].get<double>() / 1e3},
      {"daemon_turn_p99_us", s1["counters"]["turn_ns"]["p99"].get<double>() / 1e3},
      {"daemon_early_answer_p50_us", s1["counters"]["early_answer_ns"]["p50"].get<double>() / 1e3},
      {"daemon_early_answer_p99_us", s1["counters"]["early_answer_ns"]["p99"].get<double>() / 1e3},
      {"daemon_iteration_p50_us", s1["counters"]["iteration_ns"]["p50"].get<double>() / 1e3},
      {"iterations_per_probe", per_probe("iterations")},
      {"early_rates_per_probe", per_probe("early_rates")},
      {"early_rates_corrected_per_probe", per_probe("early_rates_corrected")},
      {"rate_updates_per_probe", per_probe("rate_updates")},
      {"daemon_cpu_fraction", run.cpu / run.elapsed},
      {"ctl_requests_per_s", run.ctl_per_s},
      {"ctl_replies", flood.replies()},
      {"ctl_dumps", flood.dumps()},
      {"ctl_retries", flood.retries()},
      {"ctl_replies_by_kind", flood.replies_by_kind()},
      // Passes over every flow the daemon made for status, links and
      // tenants replies over the probes (ControlCache; an older
      // daemon: null).
      {"daemon_totals_passes",
       s1.contains("totals_passes")
           ? json(s1["totals_passes"].get<double>() - s0["totals_passes"].get<double>())
           : json(nullptr)},
      {"seconds", run.elapsed},
      {"ctl_reply_bytes_mean", flood.replies() > 0 ? static_cast<double>(flood.bytes()) /
                                                         static_cast<double>(flood.replies())
                                                   : 0.0}};
}

json latency_run(const std::string& listen, unsigned threads, std::size_t active, int probes,
                 double gap_s, std::uint64_t busy_poll_us, double ctl_per_s = 0,
                 const std::vector<std::string>& daemon_args = {}) {
  std::vector<std::string> args = kNoSourceQuota;
  args.insert(args.end(), daemon_args.begin(), daemon_args.end());  // later flags win
  Daemon d(listen, threads, busy_poll_us, args);
  zmq::context_t ctx(1);
  std::vector<std::unique_ptr<Endpoint>> bg = background(ctx, listen);
  const std::size_t per = active / kEndpoints;
  establish(bg, per, 0);
  d.wait_idle(per * kEndpoints, [&] { drain_all(bg); });

  Endpoint probe(ctx, listen, 1);
  {
    wire::EndpointMessage hello;
    hello.events.emplace_back(wire::Hello{"probe", "h1"});
    probe.send(wire::encode(hello));
  }
  LatencyRun run;
  run.threads = threads;
  run.flows = per * kEndpoints;
  run.probes = probes;
  run.gap_s = gap_s;
  run.busy_poll_us = busy_poll_us;
  run.ctl_per_s = ctl_per_s;
  run.s0 = d.status();
  const double cpu0 = d.cpu_s();
  CtlFlood flood(listen, ctl_per_s);
  const auto t_begin = Clock::now();
  for (int i = 0; i < probes; ++i) {
    probe_once(probe, i, run);
    wait_gap(bg, probe, gap_s);
  }
  run.elapsed = seconds_since(t_begin);
  flood.stop();
  run.cpu = d.cpu_s() - cpu0;
  run.s1 = d.status();
  return latency_report(run, flood);
}

// ---- metrics overhead (--metrics-overhead) ----

json metrics_overhead_runs(const std::string& listen, bool quick) {
  const std::size_t active = quick ? 10000 : 100000;
  const int n = quick ? 100 : 1000;
  json runs = json::array();
  std::vector<double> ratios;
  for (int round = 0; round < (quick ? 1 : 2); ++round) {
    double off_p99 = 0;
    for (bool on : {false, true}) {
      const int port = on ? flowtune::bench::MetricsScraper::free_port() : 0;
      std::vector<std::string> args;
      if (on) args = {"--metrics", "127.0.0.1:" + std::to_string(port)};
      flowtune::bench::MetricsScraper scraper(port, 1.0);
      json r = latency_run(listen, 1, active, n, 0.01, 0, 0, args);
      scraper.stop();
      r["metrics"] = on;
      r["scrapes"] = scraper.scrapes();
      r["scrape_bytes_mean"] = scraper.scrapes() > 0 ? static_cast<double>(scraper.bytes()) / static_cast<double>(scraper.scrapes()) : 0.0;
      r["round"] = round;
      const double p99 = r["daemon_turn_p99_us"].get<double>();
      if (!on) off_p99 = p99;
      if (on && off_p99 > 0) ratios.push_back(p99 / off_p99);
      std::cerr << "metrics " << (on ? "on" : "off") << ": turn p99 " << p99 << " us, scrapes "
                << scraper.scrapes() << "\n";
      runs.push_back(r);
    }
  }
  std::sort(ratios.begin(), ratios.end());
  return {{"runs", runs},
          {"turn_p99_ratio_by_round", ratios},
          {"turn_p99_ratio_worst", ratios.empty() ? json(nullptr) : json(ratios.back())}};
}

// ---- early rates (--early-rates) ----

json early_rates_runs(const std::string& listen, bool quick, std::uint64_t busy_poll_us) {
  const std::vector<std::size_t> sizes = quick ? std::vector<std::size_t>{1000}
                                               : std::vector<std::size_t>{1000, 10000, 50000};
  json rows = json::array();
  for (int round = 0; round < (quick ? 1 : 2); ++round) {
    for (double gap : {0.0005, 0.005}) {
      const int n = quick ? 200 : (gap > 0.001 ? 400 : 2000);
      for (std::size_t a : sizes) {
        // The echo of this round and gap, then the daemon without and with.
        std::size_t bytes = 0;
        json pair = json::array();
        for (const char* mode : {"off", "on"}) {
          json r = latency_run(listen, 1, a, n, gap, busy_poll_us, 0, {"--early-rates", mode});
          r["early_rates"] = mode;
          r["round"] = round;
          bytes = r["start_message_bytes"].get<std::size_t>();
          pair.push_back(r);
        }
        const Quantiles echo = echo_baseline(listen, bytes, n, gap);
        for (json& r : pair) {
          r["echo_p50_us"] = echo.p50;
          r["echo_p99_us"] = echo.p99;
          r["added_p50_us"] = r["p50_us"].get<double>() - echo.p50;
          r["added_p99_us"] = r["p99_us"].get<double>() - echo.p99;
          rows.push_back(r);
        }
      }
    }
  }
  return rows;
}

// ---- flood (--flood) ----

// An endpoint that keeps the rates it is told.
struct Tracked {
  zmq::socket_t socket;
  std::map<std::uint64_t, std::uint64_t> rates;
  std::set<std::uint64_t> refused;
  Tracked(zmq::context_t& ctx, const std::string& ep) : socket(ctx, zmq::socket_type::dealer) {
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::rcvhwm, 0);
    socket.connect(ep);
  }
  void send(const wire::EndpointMessage& m) { socket.send(zmq::buffer(wire::encode(m)), zmq::send_flags::none); }
  void pump(int timeout_ms = 0) {
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    if (timeout_ms > 0) zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms));
    zmq::message_t msg;
    while (socket.recv(msg, zmq::recv_flags::dontwait)) {
      wire::AllocatorMessage a;
      if (!wire::decode({msg.data<std::uint8_t>(), msg.size()}, &a).ok()) continue;
      for (const auto& r : a.rates) rates[r.flow_key] = r.bytes_per_sec;
      for (const auto& e : a.errors) {
        if (e.flow_key != 0) refused.insert(e.flow_key);
      }
    }
  }
};

// Peers flooding from one address (127.0.0.9): `endpoints` endpoints, each
// on a host of its own among h256..h511, sending messages of 128 events as
// fast as the allocator takes them: starts with random keys (most), repeats
// of a start, ends of flows never started, and starts of absurd sizes, for
// `seconds`.
class Flooder {
 public:
  Flooder(const std::string& port, int endpoints, double seconds) {
    thread_ = std::thread([this, port, endpoints, seconds] {
      // On a real network the flood comes from another machine; here it
      // shares the cores with the daemon and the probe, so it runs at the
      // lowest priority and takes what they leave (its libzmq I/O thread,
      // started below, inherits the priority).
      // With --apart it runs only on CPU nobody else wants, and gives it
      // up the moment the daemon or a legitimate endpoint wakes.
      if (g_apart) {
        sched_param sp{};
        (void)::sched_setscheduler(0, SCHED_IDLE, &sp);
      } else {
        (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
      }
      zmq::context_t ctx(1);
      std::vector<std::unique_ptr<zmq::socket_t>> socks;
      for (int i = 0; i < endpoints; ++i) {
        auto s = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
        s->set(zmq::sockopt::linger, 0);
        s->set(zmq::sockopt::sndhwm, 100);
        // A full queue holds the flood back up to 100 ms a message: it runs
        // as fast as the daemon takes it, and a short flood still arrives.
        s->set(zmq::sockopt::sndtimeo, 100);
        s->connect("tcp://127.0.0.9:0;127.0.0.1:" + port);
        wire::EndpointMessage hello;
        hello.events.emplace_back(wire::Hello{"flood-" + std::to_string(i),
                                              "h" + std::to_string(256 + i % 256)});
        s->send(zmq::buffer(wire::encode(hello)), zmq::send_flags::none);
        socks.push_back(std::move(s));
      }
      std::mt19937_64 rng(7);
      std::uint64_t seq = 0;
      zmq::message_t junk;
      const auto t0 = Clock::now();
      while (!stop_.load() && seconds_since(t0) < seconds) {
        for (std::size_t i = 0; i < socks.size(); ++i) {
          const auto host = static_cast<std::uint32_t>(256 + i % 256);
          wire::EndpointMessage m;
          m.seq = ++seq;
          std::uint64_t last = 0;
          // One message in ten carries absurd sizes: the codec refuses
          // such a message whole, so the others are left valid.
          const bool absurd = seq % 10 == 0;
          for (int e = 0; e < 128; ++e) {
            const std::uint64_t r = rng();
            // 2: absurd size; 3: an end never started; 4: a repeated start.
            const int kind = absurd ? 2 : 3 + static_cast<int>(r % 9);
            if (kind == 3) {
              m.events.emplace_back(wire::FlowletEnd{(r >> 8) | 1});  // never started
              continue;
            }
            wire::FlowletStart f = flow(kind == 4 && last != 0 ? last - 1 : r >> 16, host,
                                        256 + static_cast<std::uint32_t>((r >> 40) % 256));
            if (kind == 2) f.bytes = std::uint64_t{1} << 62;  // absurd
            last = f.flow_key;
            m.events.emplace_back(f);
            starts_.fetch_add(1);
          }
          // Past the send timeout the message is dropped, as a flooder
          // that does not care would.
          (void)socks[i]->send(zmq::buffer(wire::encode(m)), zmq::send_flags::none);
          while (socks[i]->recv(junk, zmq::recv_flags::dontwait)) {
          }
        }
      }
      done_.store(true);
      while (!stop_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    });
  }
  ~Flooder() { stop(); }
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  bool done() const { return done_.load(); }
  std::uint64_t starts() const { return starts_.load(); }

 private:
  std::thread thread_;
  std::atomic<bool> stop_{false}, done_{false};
  std::atomic<std::uint64_t> starts_{0};
};

// Starts `n` probe flowlets 5 ms apart from h1 and times each start -> rate;
// *refused counts those the allocator refused.
std::vector<double> probe_run(Tracked& probe, int n, std::uint64_t first_key, int* refused,
                              const std::function<void()>& tick,
                              const std::function<bool()>& until = {}) {
  std::vector<double> rtt;
  // With `until`, probes run while it is false (the flood), else n of them.
  for (int i = 0; until ? !until() : i < n; ++i) {
    const std::uint64_t key = first_key + static_cast<std::uint64_t>(i);
    wire::EndpointMessage m;
    m.events.emplace_back(flow(key, 1, 8 + static_cast<std::uint32_t>(key % 248)));
    const auto t0 = Clock::now();
    probe.send(m);
    bool got = false;
    while (!got && seconds_since(t0) < 2) {
      probe.pump(10);
      got = probe.rates.contains(key + 1);
      if (probe.refused.contains(key + 1)) break;
    }
    if (got) rtt.push_back(seconds_since(t0) * 1e6);
    else ++*refused;
    wire::EndpointMessage end;
    end.events.emplace_back(wire::FlowletEnd{key + 1});
    probe.send(end);
    const auto gap = Clock::now();
    while (seconds_since(gap) < 0.005) probe.pump(2);
    tick();
  }
  return rtt;
}

// The daemon's flags for a flood run: quotas on (the defaults, or
// FT_FLOOD_QUOTAS's) or off.
std::vector<std::string> flood_daemon_args(bool quotas) {
  std::vector<std::string> extra = {"--max-msg-rate", "100000", "--endpoint-timeout-ms", "3000",
                                    "--lease-refresh-ms", "300"};
  if (!quotas) {
    extra.insert(extra.end(), {"--max-flows-per-source", "0", "--max-endpoints-per-source", "0",
                               "--max-source-bytes-per-sec", "0"});
  } else {
    extra.insert(extra.end(), {"--max-source-bytes-per-sec", "1000000"});  // the default
  }
  if (const char* more = std::getenv("FT_FLOOD_QUOTAS"); quotas && more != nullptr) {
    // Other quotas to try, e.g. "--max-flows-per-source 16384".
    std::istringstream words(more);
    for (std::string w; words >> w;) extra.push_back(w);
  }
  return extra;
}

// The legitimate endpoints, on h0..h7, 125 flows each into h8..h255.
std::vector<std::unique_ptr<Tracked>> legit_endpoints(zmq::context_t& ctx,
                                                      const std::string& legit) {
  std::vector<std::unique_ptr<Tracked>> eps;
  for (std::uint32_t h = 0; h < 8; ++h) {
    eps.push_back(std::make_unique<Tracked>(ctx, legit));
    wire::EndpointMessage m;
    m.events.emplace_back(wire::Hello{"legit-" + std::to_string(h), "h" + std::to_string(h)});
    for (std::uint64_t k = 0; k < 125; ++k) m.events.emplace_back(flow(k, h, 8 + static_cast<std::uint32_t>((h * 31 + k) % 248)));
    eps.back()->send(m);
  }
  return eps;
}

using LegitRates = std::map<std::pair<std::size_t, std::uint64_t>, std::uint64_t>;

LegitRates rates_of(const std::vector<std::unique_ptr<Tracked>>& eps) {
  LegitRates before;
  for (std::size_t i = 0; i < eps.size(); ++i) {
    for (const auto& [k, r] : eps[i]->rates) before[{i, k}] = r;
  }
  return before;
}

// One flood run: what it measured.
struct FloodRun {
  int flooders = 0;
  std::uint64_t starts = 0;  // the flood's
  double flood_s = 0;
  json s_before, s_flood;  // the daemon's status before and at the end of the flood
  int n = 0;               // probes while idle
  Quantiles idle{};
  std::vector<double> under;  // the probes' start -> rate under the flood, us
  int refused_idle = 0, refused_flood = 0;
  double worst = 0;         // the largest relative move of a legitimate flow's rate
  std::size_t missing = 0;  // legitimate flows without a rate
  double rss_idle = 0, rss_flood = 0, rss_after = 0;
};

// The largest relative move of a legitimate rate since `before`, and how
// many legitimate flows have no rate.
void rate_moves(const std::vector<std::unique_ptr<Tracked>>& eps, const LegitRates& before,
                FloodRun& run) {
  double worst = 0;
  std::size_t missing = 0;
  for (std::size_t i = 0; i < eps.size(); ++i) {
    for (const auto& [k, r] : eps[i]->rates) {
      const auto it = before.find({i, k});
      if (it == before.end()) continue;
      worst = std::max(worst, std::abs(static_cast<double>(r) / static_cast<double>(it->second) - 1));
    }
    missing += 125 - std::min<std::size_t>(125, eps[i]->rates.size());
  }
  run.worst = worst;
  run.missing = missing;
}

// The daemon's RSS once the flood's endpoints have timed out (9 endpoints
// left), or 0 when they have not within 15 s.
double rss_once_gone(Daemon& d, Tracked& probe, const std::function<void()>& tick) {
  const auto t_gone = Clock::now();
  double rss_after = 0;
  while (seconds_since(t_gone) < 15) {
    tick();
    probe.pump();
    const json s = d.status();
    if (s["endpoints"] == 9) {
      rss_after = d.rss_mb();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return rss_after;
}

// A flood run's JSON (and its line on stderr).
json flood_report(bool quotas, const FloodRun& run) {
  const json& s_before = run.s_before;
  const json& s_flood = run.s_flood;
  const Quantiles& idle = run.idle;
  const Quantiles q = quantiles(run.under.empty() ? std::vector<double>{0} : run.under);
  const json& errs = s_flood["counters"]["errors"];
  std::cerr << "flood quotas=" << quotas << ": " << run.starts << " starts in " << run.flood_s
            << " s; flows " << s_flood["flows"] << "; probe p99 " << idle.p99 << " -> " << q.p99
            << " us, refused " << run.refused_idle << " -> " << run.refused_flood
            << "; worst legit rate move " << run.worst << "; rss " << run.rss_idle << " -> "
            << run.rss_flood << " -> " << run.rss_after << " MB\n";
  auto grew = [&](const char* k) {
    return s_flood["counters"][k].get<double>() - s_before["counters"][k].get<double>();
  };
  return {{"quotas", quotas},
          {"apart", g_apart},
          {"flood_endpoints", run.flooders},
          {"flood_starts", run.starts},
          {"daemon_messages_in", grew("messages_in")},
          {"daemon_bytes_in", grew("bytes_in")},
          {"daemon_starts", grew("starts")},
          {"flood_seconds", run.flood_s},
          {"flows_during_flood", s_flood["flows"]},
          {"max_flows_per_source", s_flood["config"]["max_flows_per_source"]},
          {"endpoints_during_flood", s_flood["endpoints"]},
          {"refused_too_many_flows", errs.value("too_many_flows", 0)},
          {"refused_too_many_endpoints", errs.value("too_many_endpoints", 0)},
          {"refused_rate_limited", errs.value("rate_limited", 0)},
          {"refused_bad_value", errs.value("bad_value", 0)},
          {"refused_unknown_flow", errs.value("unknown_flow", 0)},
          {"probes_idle", run.n},
          {"probes_under_flood", run.under.size() + static_cast<std::size_t>(run.refused_flood)},
          {"probe_refused_idle", run.refused_idle},
          {"probe_refused_under_flood", run.refused_flood},
          {"probe_p50_us_idle", idle.p50},
          {"probe_p99_us_idle", idle.p99},
          {"probe_p50_us_flood", q.p50},
          {"probe_p99_us_flood", q.p99},
          {"probe_p99_vs_idle", idle.p99 > 0 ? q.p99 / idle.p99 : 0.0},
          {"legit_flows_without_rate", run.missing},
          {"legit_worst_rate_change", run.worst},
          {"iterations_flood", grew("iterations")},
          {"iteration_p50_us", s_flood["counters"]["iteration_ns"]["p50"].get<double>() / 1e3},
          {"iteration_p99_us", s_flood["counters"]["iteration_ns"]["p99"].get<double>() / 1e3},
          {"turn_p99_us", s_flood["counters"]["turn_ns"]["p99"].get<double>() / 1e3},
          // The tick's scan, a slice per call (over the whole run).
          {"timer_p99_us", s_flood["counters"]["timer_ns"]["p99"].get<double>() / 1e3},
          {"timer_p999_us", s_flood["counters"]["timer_ns"]["p999"].get<double>() / 1e3},
          {"rss_mb_idle", run.rss_idle},
          {"rss_mb_flood", run.rss_flood},
          // null: the flood's endpoints had not all timed out within 15 s
          {"rss_mb_after", run.rss_after > 0 ? json(run.rss_after) : json(nullptr)}};
}

// Legitimate endpoints (from 127.0.0.2, on h0..h7, 125 flows each into
// h8..h255) and a probe; then a flood from 127.0.0.9 into h256..h511, whose
// flows share no link with theirs: whatever the flood does, their rates
// should not move, and the probe's flowlets should be taken and rated as
// fast as before. quotas: the default per-source quotas, or none.
json flood_run(const std::string& port, bool quotas, bool quick) {
  const std::string listen = "tcp://127.0.0.1:" + port;
  const std::string legit = "tcp://127.0.0.2:0;127.0.0.1:" + port;
  Daemon d(listen, 1, 0, flood_daemon_args(quotas));
  zmq::context_t ctx(1);
  std::vector<std::unique_ptr<Tracked>> eps = legit_endpoints(ctx, legit);
  auto pump_all = [&] {
    for (auto& e : eps) e->pump();
  };
  // The endpoints say they are alive twice a second (the timeout is 3 s).
  Tracked* probe_ptr = nullptr;
  auto last_beat = Clock::now();
  auto tick = [&] {
    pump_all();
    if (seconds_since(last_beat) < 0.5) return;
    last_beat = Clock::now();
    wire::EndpointMessage beat;
    beat.events.emplace_back(wire::Heartbeat{});
    for (auto& e : eps) e->send(beat);
    if (probe_ptr != nullptr) probe_ptr->send(beat);
  };
  d.wait_idle(1000, pump_all);
  pump_all();
  const LegitRates before = rates_of(eps);
  Tracked probe(ctx, legit);
  probe_ptr = &probe;
  {
    wire::EndpointMessage hello;
    hello.events.emplace_back(wire::Hello{"probe", "h1"});
    probe.send(hello);
  }
  FloodRun run;
  run.n = quick ? 100 : 300;
  run.rss_idle = d.rss_mb();
  run.idle = quantiles(probe_run(probe, run.n, 1'000'000, &run.refused_idle, tick));
  const double flood_seconds = quick ? 2 : 10;
  run.flooders = g_flood_endpoints > 0 ? g_flood_endpoints : quick ? 64 : 300;
  run.s_before = d.status();
  Flooder flood(port, run.flooders, flood_seconds);
  const auto t_flood = Clock::now();
  run.under =
      probe_run(probe, run.n, 2'000'000, &run.refused_flood, tick, [&] { return flood.done(); });
  run.flood_s = seconds_since(t_flood);
  pump_all();
  run.s_flood = d.status();
  run.rss_flood = d.rss_mb();
  rate_moves(eps, before, run);
  flood.stop();  // its sockets close: its endpoints time out
  run.rss_after = rss_once_gone(d, probe, tick);
  run.starts = flood.starts();
  return flood_report(quotas, run);
}

// ---- memory (--memory) ----

// A context with room for thousands of sockets (libzmq's default is 1,023).
std::unique_ptr<zmq::context_t> big_context() {
  auto ctx = std::make_unique<zmq::context_t>(1);
  ctx->set(zmq::ctxopt::max_sockets, 60000);
  return ctx;
}

// Samples the daemon's RSS every 50 ms while `work` runs; the peak, MB.
double peak_rss_while(Daemon& d, const std::function<void()>& work) {
  std::atomic<bool> done{false};
  double peak = d.rss_mb();
  std::thread sampler([&] {
    while (!done.load()) {
      peak = std::max(peak, d.rss_mb());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  work();
  done.store(true);
  sampler.join();
  return std::max(peak, d.rss_mb());
}

// Waits (up to `limit_s`) until the daemon holds no endpoint and no flow and
// has stopped iterating, then 6 s more (it weighs its free memory every 5 s
// when not iterating); the seconds until it was empty, or -1.
double wait_empty(Daemon& d, double limit_s) {
  const auto t0 = Clock::now();
  double empty_s = -1;
  while (seconds_since(t0) < limit_s) {
    const json s = d.status();
    if (s["endpoints"] == 0 && s["flows"] == 0 && !s["busy"].get<bool>()) {
      empty_s = seconds_since(t0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(6000));
  return empty_s;
}

// The daemon's heap in use as its last memory check weighed it, MB (-1:
// not weighed yet).
double heap_mb(Daemon& d) {
  const json h = d.status()["heap"]["in_use_bytes"];
  return h.is_number() ? h.get<double>() / (1 << 20) : -1;
}

// One round of `n` distinct fake endpoints, each on its own connection from
// one of `sources` peer addresses (127.0.1.x), saying hello with a new id
// and starting `flows` flowlets, made 500 connections at a time; each batch
// is closed once sent (its endpoints stay until they time out, as a peer's
// that vanished would).
json endpoints_round(Daemon& d, const std::string& port, int round, int n, int sources, int flows) {
  const json before = d.status();
  int peak_endpoints = 0;
  std::size_t peak_flows = 0;
  const auto t0 = Clock::now();
  const double peak = peak_rss_while(d, [&] {
    std::mt19937_64 rng(static_cast<std::uint64_t>(round) + 1);
    for (int first = 0; first < n; first += 500) {
      // A context per batch: its end waits for the batch's sockets to have
      // sent and closed, so descriptors do not pile up.
      auto ctx = big_context();
      std::vector<std::unique_ptr<zmq::socket_t>> batch;
      for (int i = first; i < std::min(n, first + 500); ++i) {
        auto s = std::make_unique<zmq::socket_t>(*ctx, zmq::socket_type::dealer);
        s->set(zmq::sockopt::linger, 5000);  // the bytes go out before it closes
        s->connect("tcp://127.0.1." + std::to_string(1 + i % sources) + ":0;127.0.0.1:" + port);
        wire::EndpointMessage m;
        const auto host = static_cast<std::uint32_t>(i % kHosts);
        m.events.emplace_back(wire::Hello{"fake-" + std::to_string(round) + "-" + std::to_string(i),
                                          "h" + std::to_string(host)});
        for (int f = 0; f < flows; ++f) {
          const std::uint64_t r = rng();
          m.events.emplace_back(flow(r >> 16, host, static_cast<std::uint32_t>((host + 1 + r % (kHosts - 1)) % kHosts)));
        }
        s->send(zmq::buffer(wire::encode(m)), zmq::send_flags::none);
        batch.push_back(std::move(s));
      }
      batch.clear();  // closed: linger sends what is queued
      ctx.reset();
      const json s = d.status();
      peak_endpoints = std::max(peak_endpoints, s["endpoints"].get<int>());
      peak_flows = std::max(peak_flows, s["flows"].get<std::size_t>());
    }
    // Until the daemon has taken them all (or they start timing out).
    for (int i = 0; i < 100; ++i) {
      const json s = d.status();
      peak_endpoints = std::max(peak_endpoints, s["endpoints"].get<int>());
      peak_flows = std::max(peak_flows, s["flows"].get<std::size_t>());
      if (s["counters"]["hellos"].get<int>() - before["counters"]["hellos"].get<int>() >= n) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  const double made_s = seconds_since(t0);
  const double gone_s = wait_empty(d, 30);
  const json after = d.status();
  auto grew = [&](const char* k) {
    return after["counters"][k].get<double>() - before["counters"][k].get<double>();
  };
  return {{"phase", "endpoints"},
          {"round", round},
          {"endpoints", n},
          {"sources", sources},
          {"flows_per_endpoint", flows},
          {"hellos_taken", grew("hellos")},
          {"peak_endpoints", peak_endpoints},
          {"peak_flows", peak_flows},
          {"made_s", made_s},
          {"gone_after_s", gone_s},
          {"rss_mb_peak", peak},
          {"rss_mb_after", d.rss_mb()},
          {"heap_in_use_mb_after", heap_mb(d)},
          {"memory_trims", after["counters"].value("memory_trims", 0) - before["counters"].value("memory_trims", 0)}};
}

// Decompression bombs (4 KB that unpack to 4 MiB) from `sources` peers as
// fast as the daemon takes them for `seconds`.
json bomb_round(Daemon& d, const std::string& port, int sources, double seconds) {
  std::vector<std::uint8_t> bomb = {0x40, 0x08};  // one segment of 2^19 words
  while (bomb.size() < 4096) {
    bomb.push_back(0x00);
    bomb.push_back(0xff);
  }
  const json before = d.status();
  std::uint64_t sent = 0;
  const double peak = peak_rss_while(d, [&] {
    zmq::context_t ctx(1);
    std::vector<std::unique_ptr<zmq::socket_t>> socks;
    for (int i = 0; i < sources; ++i) {
      auto s = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
      s->set(zmq::sockopt::linger, 0);
      s->set(zmq::sockopt::sndtimeo, 10);
      s->connect("tcp://127.0.2." + std::to_string(1 + i) + ":0;127.0.0.1:" + port);
      socks.push_back(std::move(s));
    }
    const auto t0 = Clock::now();
    zmq::message_t junk;
    while (seconds_since(t0) < seconds) {
      for (auto& s : socks) {
        if (s->send(zmq::buffer(bomb), zmq::send_flags::none)) ++sent;
        while (s->recv(junk, zmq::recv_flags::dontwait)) {
        }
      }
    }
  });
  const double idle_s = wait_empty(d, 30);
  const json after = d.status();
  return {{"phase", "bombs"},
          {"sources", sources},
          {"seconds", seconds},
          {"bombs_sent", sent},
          {"messages_in", after["counters"]["messages_in"].get<double>() - before["counters"]["messages_in"].get<double>()},
          {"settled_after_s", idle_s},
          {"memory_trims", after["counters"].value("memory_trims", 0) - before["counters"].value("memory_trims", 0)},
          {"rss_mb_peak", peak},
          {"rss_mb_after", d.rss_mb()},
          {"heap_in_use_mb_after", heap_mb(d)}};
}

// A connection storm: `n` connections open at once from `sources` peers,
// half ZeroMQ peers that say hello, half raw TCP that send junk instead of
// ZMTP's greeting; then all close.
json storm_round(Daemon& d, const std::string& port, int round, int n, int sources) {
  const json before = d.status();
  int peak_endpoints = 0;
  int raw_open = 0;
  double made_s = 0;
  const double peak = peak_rss_while(d, [&] {
    const auto t0 = Clock::now();
    auto ctx = big_context();
    std::vector<std::unique_ptr<zmq::socket_t>> socks;
    std::vector<int> raw;
    for (int i = 0; i < n; ++i) {
      const std::string src = "127.0.3." + std::to_string(1 + i % sources);
      if (i % 2 == 0) {
        auto s = std::make_unique<zmq::socket_t>(*ctx, zmq::socket_type::dealer);
        s->set(zmq::sockopt::linger, 0);
        s->connect("tcp://" + src + ":0;127.0.0.1:" + port);
        wire::EndpointMessage m;
        m.events.emplace_back(wire::Hello{"storm-" + std::to_string(round) + "-" + std::to_string(i),
                                          "h" + std::to_string(i % kHosts)});
        s->send(zmq::buffer(wire::encode(m)), zmq::send_flags::none);
        socks.push_back(std::move(s));
        continue;
      }
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      ::inet_pton(AF_INET, src.c_str(), &a.sin_addr);
      if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        if (fd >= 0) ::close(fd);
        continue;
      }
      a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(port)));
      ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        static const char junk[] = "GET / HTTP/1.1\r\n\r\n";
        (void)!::write(fd, junk, sizeof junk - 1);
        ++raw_open;
      }
      raw.push_back(fd);
    }
    made_s = seconds_since(t0);
    for (int i = 0; i < 40; ++i) {  // up to 2 s for the daemon to see them
      peak_endpoints = std::max(peak_endpoints, d.status()["endpoints"].get<int>());
      if (peak_endpoints >= n / 2) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    for (const int fd : raw) ::close(fd);
  });
  const double gone_s = wait_empty(d, 30);
  const json after = d.status();
  return {{"phase", "storm"},
          {"round", round},
          {"connections", n},
          {"made_s", made_s},
          {"raw_tcp_connected", raw_open},
          {"sources", sources},
          {"hellos_taken", after["counters"]["hellos"].get<double>() - before["counters"]["hellos"].get<double>()},
          {"peak_endpoints", peak_endpoints},
          {"gone_after_s", gone_s},
          {"memory_trims", after["counters"].value("memory_trims", 0) - before["counters"].value("memory_trims", 0)},
          {"rss_mb_peak", peak},
          {"rss_mb_after", d.rss_mb()},
          {"heap_in_use_mb_after", heap_mb(d)}};
}

// The daemon with its default quotas, and endpoints that time out after
// 3 s: rounds of 10,000 distinct fake endpoints, bombs, connection storms;
// its RSS idle (the baseline), at each phase's peak and once the phase's
// endpoints are gone.
json memory_run(const std::string& port, bool quick) {
  Daemon d("tcp://127.0.0.1:" + port, 1, 0,
           {"--max-msg-rate", "100000", "--max-source-bytes-per-sec", "1000000",
            "--endpoint-timeout-ms", "3000"});
  const double idle = d.rss_mb();
  json out = {{"rss_mb_idle", idle}, {"heap_in_use_mb_idle", heap_mb(d)}};
  const int n = quick ? 2000 : 10000;
  for (int r = 0; r < (quick ? 1 : 3); ++r) out["phases"].push_back(endpoints_round(d, port, r, n, 4, 8));
  out["phases"].push_back(bomb_round(d, port, 4, quick ? 1.0 : 5.0));
  for (int r = 0; r < (quick ? 1 : 3); ++r) {
    out["phases"].push_back(storm_round(d, port, r, quick ? 1000 : 5000, 4));
  }
  double worst_after = 0, worst_peak = 0;
  for (json& p : out["phases"]) {
    p["rss_after_vs_idle"] = p["rss_mb_after"].get<double>() / idle;
    worst_after = std::max(worst_after, p["rss_mb_after"].get<double>());
    worst_peak = std::max(worst_peak, p["rss_mb_peak"].get<double>());
    std::cerr << "memory " << p["phase"].get<std::string>() << ": rss " << idle << " -> "
              << p["rss_mb_peak"] << " -> " << p["rss_mb_after"] << " MB\n";
  }
  const json checks = d.status()["counters"]["memory_check_ns"];
  out["memory_checks"] = checks["count"];
  out["memory_check_p50_us"] = checks["p50"].get<double>() / 1e3;
  out["memory_check_p99_us"] = checks["p99"].get<double>() / 1e3;
  out["memory_check_p999_us"] = checks["p999"].get<double>() / 1e3;
  out["rss_mb_peak"] = worst_peak;
  out["rss_mb_after_worst"] = worst_after;
  out["rss_after_vs_idle_worst"] = worst_after / idle;
  return out;
}
// daemon_bench's command line.
struct BenchArgs {
  bool quick = false;
  bool latency_only = false;
  bool throughput_only = false;
  bool ctl_flood = false;
  bool metrics_overhead = false;
  bool curve = false;
  bool flood = false;
  bool memory = false;
  bool quotas_only = false;
  bool early = false;
  std::uint64_t early_busy_poll_us = 0;
  std::string transport;
};

// Reads the command line into `out`; an exit status when main should stop
// (after --help, or on a bad option).
std::optional<int> parse_args(int argc, char** argv, BenchArgs& out) {
  // --quick: one short run per kind (CI smoke); default: the full grid.
  // --latency-only skips the throughput runs; --quotas-only (with --flood)
  // the runs without quotas; --busy-poll-us (with --early-rates) is the
  // daemon's --busy-poll-us.
  out = BenchArgs{};
  out.transport = "tcp";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") out.quick = true;
    else if (a == "--ipc") out.transport = "ipc";
    else if (a == "--latency-only") out.latency_only = true;
    else if (a == "--throughput-only") out.throughput_only = true;
    else if (a == "--ctl-flood") out.ctl_flood = true;
    else if (a == "--metrics-overhead") out.metrics_overhead = true;
    else if (a == "--curve") out.curve = true;
    else if (a == "--flood") out.flood = true;
    else if (a == "--memory") out.memory = true;
    else if (a == "--early-rates") out.early = true;
    else if (a == "--busy-poll-us" && i + 1 < argc) out.early_busy_poll_us = std::stoull(argv[++i]);
    else if (a == "--quotas-only") out.quotas_only = true;
    else if (a == "--apart") g_apart = true;
    else if (a == "--flood-endpoints" && i + 1 < argc) {
      g_flood_endpoints = std::atoi(argv[++i]);
      if (g_flood_endpoints < 1 || g_flood_endpoints > 4096) {
        std::cerr << "daemon_bench: --flood-endpoints takes 1-4096\n";
        return 2;
      }
    }
    else if (a == "--allocator-binary" && i + 1 < argc) g_allocator_binary = argv[++i];
    else if (a == "-h" || a == "--help") {
      std::cout << "usage: daemon_bench [--quick] [--ipc] [--latency-only | --throughput-only |\n"
                   "                    --ctl-flood | --metrics-overhead | --curve |\n"
                   "                    --flood [--quotas-only] [--apart] [--flood-endpoints N] |\n"
                   "                    --memory |\n"
                   "                    --early-rates [--busy-poll-us US]]\n"
                   "                    [--allocator-binary PATH]   (prints JSON; see the file's header)\n";
      return 0;
    } else {
      std::cerr << "daemon_bench: unknown option " << a << "\n";
      return 2;
    }
  }
  return std::nullopt;
}

// --ctl-flood: latency runs without and with a flowtune-ctl flood.
void ctl_flood_runs(json& out, const std::string& listen, bool quick) {
  // Interleaved: without, with, without, with; 100,000 flows (quick:
  // 10,000), 1,000 probes 10 ms apart (quick: 100).
  // The flows carry 10,000 distinct tenant names (quick: 2,000), each
  // in the tenants pages (status once listed them all).
  const std::size_t active = quick ? 10000 : 100000;
  const int n = quick ? 100 : 1000;
  g_flow_tenants = quick ? 2000 : 10000;
  for (int round = 0; round < (quick ? 1 : 2); ++round) {
    for (double per_s : {0.0, 5.0}) {
      json r = latency_run(listen, 1, active, n, 0.01, 0, per_s);
      r["tenants"] = g_flow_tenants;
      r["round"] = round;
      out["ctl_flood"].push_back(r);
    }
  }
  g_flow_tenants = 0;
}

// --flood --apart: this process (and so the daemon) in SCHED_FIFO; false
// (said on stderr) when it cannot be.
bool go_apart(json& out) {
  // The daemon, spawned from here, inherits the class; the flood
  // thread leaves it for SCHED_IDLE.
  sched_param sp{};
  sp.sched_priority = 1;
  if (::sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
    std::cerr << "daemon_bench: --apart needs SCHED_FIFO (root or CAP_SYS_NICE): "
              << std::strerror(errno) << "\n";
    return false;
  }
  // The real-time throttle (top of file): recorded, not changed, since
  // it is the machine's setting.
  std::ifstream rt("/proc/sys/kernel/sched_rt_runtime_us");
  long long runtime_us = 0;
  if (rt >> runtime_us) {
    out["rt_runtime_us"] = runtime_us;
    if (runtime_us >= 0) {
      std::cerr << "daemon_bench: the kernel's real-time throttle is on (sched_rt_runtime_us "
                << runtime_us << "): a busy daemon is stopped for the rest of each period; "
                << "'echo -1 > /proc/sys/kernel/sched_rt_runtime_us' turns it off\n";
    }
  }
  return true;
}

// --flood: flood runs with quotas and without.
void flood_runs(json& out, bool quick, bool quotas_only) {
  // Interleaved: quotas on, off (quick: on only, the CI check).
  const std::string port = std::to_string(20000 + getpid() % 20000);
  for (int round = 0; round < (quick ? 1 : 2); ++round) {
    for (bool quotas : {true, false}) {
      if ((quick || quotas_only) && !quotas) continue;
      out["flood"].push_back(flood_run(port, quotas, quick));
    }
  }
}

// --memory: room for thousands of descriptors.
void raise_fd_limit() {
  // Thousands of connections: the bench's and the daemon's (which
  // inherits the limit) descriptors.
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < 65536) {
    lim.rlim_cur = std::min<rlim_t>(std::max<rlim_t>(lim.rlim_max, 65536), 1 << 20);
    if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) {
      lim.rlim_cur = lim.rlim_max;
      (void)::setrlimit(RLIMIT_NOFILE, &lim);
    }
  }
}

// --curve: throughput and latency runs without and with CURVE.
void curve_runs(json& out, const std::string& listen, bool quick) {
  // Interleaved: without, with, twice (quick: once); each with its own
  // keys, removed after.
  const std::string dir = "/tmp/ft-bench-curve-" + std::to_string(getpid());
  const Curve keys = make_curve(dir);
  const int n = quick ? 200 : 2000;
  for (int round = 0; round < (quick ? 1 : 2); ++round) {
    for (bool on : {false, true}) {
      g_curve = on ? &keys : nullptr;
      json t = throughput_run(listen, 1, 10000, 128, quick ? 1.0 : 3.0);
      t["curve"] = on;
      out["curve"]["throughput"].push_back(t);
      for (double gap : {0.0005, 0.005}) {
        json l = latency_run(listen, 1, 1000, n, gap, 0);
        l["curve"] = on;
        out["curve"]["latency"].push_back(l);
      }
    }
  }
  g_curve = nullptr;
  std::filesystem::remove_all(dir);
}

// The default latency grid, and a bare ZeroMQ echo to compare it with.
void latency_runs(json& out, const std::string& listen, bool quick,
                  const std::vector<unsigned>& threads) {
  const std::vector<std::size_t> lat_sizes =
      quick ? std::vector<std::size_t>{1000} : std::vector<std::size_t>{1000, 10000};
  const int probes = quick ? 500 : 5000;
  for (unsigned t : threads) {
    for (std::size_t a : lat_sizes) {
      // Probes 0.5 ms apart keep the allocator iterating (churn); 5 ms
      // apart most find it settled and blocked in poll.
      for (double gap : {0.0005, 0.005}) {
        const int n = gap > 0.001 && !quick ? probes / 5 : probes;
        out["latency"].push_back(latency_run(listen, t, a, n, gap, 0));
        // The same with the daemon spinning 1 ms after traffic.
        if (t == 1) out["latency"].push_back(latency_run(listen, t, a, n, gap, 1000));
      }
    }
  }
  // Baseline in the same run: bare ZeroMQ echo of a start-sized message,
  // with the probes' gaps.
  const std::size_t bytes = out["latency"][0]["start_message_bytes"].get<std::size_t>();
  for (double gap : {0.0005, 0.005}) {
    const Quantiles b = echo_baseline(listen, bytes, quick ? probes : probes / 2, gap);
    out["zmq_echo_baseline"].push_back({{"message_bytes", bytes},
                                        {"gap_ms", gap * 1e3},
                                        {"p50_us", b.p50},
                                        {"p99_us", b.p99},
                                        {"p999_us", b.p999}});
    for (json& l : out["latency"]) {
      if (std::abs(l["gap_ms"].get<double>() - gap * 1e3) > 1e-9) continue;
      l["echo_p50_us"] = b.p50;
      l["echo_p99_us"] = b.p99;
      l["p50_vs_echo"] = l["p50_us"].get<double>() / b.p50;
      l["p99_vs_echo"] = l["p99_us"].get<double>() / b.p99;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  BenchArgs o;
  if (const std::optional<int> exit = parse_args(argc, argv, o)) return *exit;
  const bool quick = o.quick;
  const std::string transport = o.transport;
  const std::string listen = transport == "tcp"
                                 ? "tcp://127.0.0.1:" + std::to_string(20000 + getpid() % 20000)
                                 : "ipc:///tmp/ft-bench-" + std::to_string(getpid());
  json out = {{"benchmark", "daemon"}, {"transport", transport}, {"allocator", g_allocator_binary}};
  const std::vector<std::size_t> sizes = quick ? std::vector<std::size_t>{1000}
                                               : std::vector<std::size_t>{1000, 10000, 50000};
  const std::vector<unsigned> threads = quick ? std::vector<unsigned>{1} : std::vector<unsigned>{1, 2};
  const double seconds = quick ? 1.0 : 3.0;
  try {
    if (o.ctl_flood) {
      ctl_flood_runs(out, listen, quick);
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    if (o.metrics_overhead) {
      out["metrics_overhead"] = metrics_overhead_runs(listen, quick);
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    if (o.flood) {
      if (g_apart && !go_apart(out)) return 2;
      flood_runs(out, quick, o.quotas_only);
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    if (o.early) {
      out["early_rates"] = early_rates_runs(listen, quick, o.early_busy_poll_us);
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    if (o.memory) {
      raise_fd_limit();
      out["memory"] = memory_run(std::to_string(20000 + getpid() % 20000), quick);
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    if (o.curve) {
      curve_runs(out, listen, quick);
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    for (unsigned t : threads) {
      if (o.latency_only) break;
      for (std::size_t a : sizes) out["throughput"].push_back(throughput_run(listen, t, a, 128, seconds));
    }
    if (o.throughput_only) {
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    latency_runs(out, listen, quick, threads);
  } catch (const std::exception& e) {
    std::cerr << "daemon_bench: " << e.what() << "\n";
    return 1;
  }
  std::cout << out.dump(2) << "\n";
  return 0;
}
