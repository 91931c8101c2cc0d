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
// ctl flood (--ctl-flood): the latency run with and without a flowtune-ctl
//   client dumping every flow 5 times a second (page after page, as
//   flowtune-ctl --limit does; against an allocator that does not page, one
//   request a dump), runs interleaved: the loop's turn p99 and the probe's p99 under the flood
//   against the same figures without it (the control plane must not stall
//   the data plane).
//
// Prints one JSON object (bench/daemon_table.py makes a table of it).
// Machine caveat: generator and daemon share the machine's cores.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "flowtune/wire/codec.h"

extern char** environ;

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace wire = flowtune::wire;

constexpr std::uint32_t kHosts = 512;
constexpr int kEndpoints = 8;
// The daemon under test (--allocator-binary: A/B against another build).
std::string g_allocator_binary = FT_ALLOCATOR_BINARY;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class Daemon {
 public:
  Daemon(const std::string& listen, unsigned threads, std::uint64_t busy_poll_us = 0)
      : listen_(listen) {
    std::vector<std::string> args = {g_allocator_binary, "--listen", listen, "--hosts",
                                     std::to_string(kHosts), "--host-gbps", "10", "--threads",
                                     std::to_string(threads), "--log-level", "warn",
                                     "--max-msg-rate", "0", "--endpoint-timeout-ms", "60000",
                                     "--busy-poll-us", std::to_string(busy_poll_us)};
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
    s.connect(listen_);
    s.send(zmq::str_buffer("flowtune-ctl"), zmq::send_flags::sndmore);
    s.send(zmq::buffer(request), zmq::send_flags::none);
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms));
    zmq::message_t tag, body;
    if ((item.revents & ZMQ_POLLIN) == 0 || !s.recv(tag) || !s.recv(body)) return std::nullopt;
    return json::parse(body.to_string_view());
  }
  json status() { return ask("status").value(); }
  // User + system CPU seconds of the daemon so far.
  double cpu_s() const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/stat");
    std::string tok;
    double t = 0;
    for (int i = 1; i <= 15 && f >> tok; ++i) {
      if (i == 14 || i == 15) t += std::stod(tok);
    }
    return t / static_cast<double>(sysconf(_SC_CLK_TCK));
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

wire::FlowletStart flow(std::uint64_t key, std::uint32_t src, std::uint32_t dst) {
  wire::FlowletStart s;
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

json throughput_run(const std::string& listen, unsigned threads, std::size_t active,
                    std::size_t batch, double seconds) {
  Daemon d(listen, threads);
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

// Dumps every flow `per_s` times a second, as flowtune-ctl --limit does:
// "flows 100000", then page after page from each reply's "next", waiting
// out "retry_ms" answers; each reply awaited (up to 5 s) before the next
// request. A dump that takes longer than its period starts the next at once.
class CtlFlood {
 public:
  CtlFlood(const std::string& listen, double per_s) {
    if (per_s <= 0) return;
    thread_ = std::thread([this, listen, per_s] {
      zmq::context_t ctx(1);
      zmq::socket_t s(ctx, zmq::socket_type::dealer);
      s.set(zmq::sockopt::linger, 0);
      s.connect(listen);
      const auto period = std::chrono::duration<double>(1.0 / per_s);
      auto next_dump = Clock::now();
      std::string request = "flows 100000";
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
        bytes_ += body.size();
        if (j.contains("next") && j["next"].is_number()) {
          request = "flows 100000 " + std::to_string(j["next"].get<std::uint64_t>());
          continue;
        }
        ++dumps_;
        request = "flows 100000";
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

 private:
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> replies_{0}, bytes_{0}, dumps_{0}, retries_{0};
  std::thread thread_;
};

json latency_run(const std::string& listen, unsigned threads, std::size_t active, int probes,
                 double gap_s, std::uint64_t busy_poll_us, double ctl_per_s = 0) {
  Daemon d(listen, threads, busy_poll_us);
  zmq::context_t ctx(1);
  std::vector<std::unique_ptr<Endpoint>> bg;
  for (int e = 0; e < kEndpoints; ++e) {
    bg.push_back(std::make_unique<Endpoint>(ctx, listen, static_cast<std::uint32_t>(e * (kHosts / kEndpoints))));
  }
  const std::size_t per = active / kEndpoints;
  establish(bg, per, 0);
  auto drain_all = [&] {
    for (auto& ep : bg) ep->drain();
  };
  d.wait_idle(per * kEndpoints, drain_all);

  Endpoint probe(ctx, listen, 1);
  {
    wire::EndpointMessage hello;
    hello.events.emplace_back(wire::Hello{"probe", "h1"});
    probe.send(wire::encode(hello));
  }
  std::vector<double> rtt;
  std::size_t start_bytes = 0;
  const json s0 = d.status();
  const double cpu0 = d.cpu_s();
  CtlFlood flood(listen, ctl_per_s);
  const auto t_begin = Clock::now();
  for (int i = 0; i < probes; ++i) {
    const std::uint64_t key = 1'000'000 + static_cast<std::uint64_t>(i);
    wire::EndpointMessage m;
    m.seq = static_cast<std::uint64_t>(i);
    m.events.emplace_back(flow(key, 1, dst_for(key, 1)));
    const auto bytes = wire::encode(m);
    start_bytes = bytes.size();
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
    if (got) rtt.push_back(seconds_since(t0) * 1e6);
    wire::EndpointMessage end;
    end.events.emplace_back(wire::FlowletEnd{key + 1});
    probe.send(wire::encode(end));
    // Wait out the gap without spinning (a spinning generator would steal
    // the daemon's core), draining everyone.
    const auto gap = Clock::now();
    std::vector<zmq::pollitem_t> items;
    for (auto& ep : bg) items.push_back({ep->socket.handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({probe.socket.handle(), 0, ZMQ_POLLIN, 0});
    while (seconds_since(gap) < gap_s) {
      const auto left = std::chrono::duration<double>(gap_s - seconds_since(gap));
      zmq::poll(items, std::chrono::duration_cast<std::chrono::milliseconds>(left) +
                           std::chrono::milliseconds(1));
      drain_all();
      probe.drain();
    }
  }
  const double elapsed = seconds_since(t_begin);
  flood.stop();
  const double cpu = d.cpu_s() - cpu0;
  const json s1 = d.status();
  const double iterations =
      s1["counters"]["iterations"].get<double>() - s0["counters"]["iterations"].get<double>();
  const Quantiles q = quantiles(rtt);
  std::cerr << "latency threads=" << threads << " flows=" << per * kEndpoints << " gap_ms="
            << gap_s * 1e3 << " busy_poll_us=" << busy_poll_us << ": p50 " << q.p50
            << " us p99 " << q.p99 << " us\n";
  return {{"threads", threads},
          {"active_flows", per * kEndpoints},
          {"probes", probes},
          {"answered", rtt.size()},
          {"start_message_bytes", start_bytes},
          {"p50_us", q.p50},
          {"p99_us", q.p99},
          {"p999_us", q.p999},
          {"gap_ms", gap_s * 1e3},
          {"busy_poll_us", busy_poll_us},
          {"daemon_turn_p50_us", s1["counters"]["turn_ns"]["p50"].get<double>() / 1e3},
          {"daemon_turn_p99_us", s1["counters"]["turn_ns"]["p99"].get<double>() / 1e3},
          {"daemon_iteration_p50_us", s1["counters"]["iteration_ns"]["p50"].get<double>() / 1e3},
          {"iterations_per_probe", iterations / probes},
          {"daemon_cpu_fraction", cpu / elapsed},
          {"ctl_requests_per_s", ctl_per_s},
          {"ctl_replies", flood.replies()},
          {"ctl_dumps", flood.dumps()},
          {"ctl_retries", flood.retries()},
          {"ctl_reply_bytes_mean",
           flood.replies() > 0 ? static_cast<double>(flood.bytes()) / static_cast<double>(flood.replies()) : 0.0}};
}

}  // namespace

int main(int argc, char** argv) {
  // --quick: one short run per kind (CI smoke); default: the full grid.
  // --latency-only skips the throughput runs.
  bool quick = false;
  bool latency_only = false;
  bool throughput_only = false;
  bool ctl_flood = false;
  std::string transport = "tcp";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--ipc") transport = "ipc";
    else if (a == "--latency-only") latency_only = true;
    else if (a == "--throughput-only") throughput_only = true;
    else if (a == "--ctl-flood") ctl_flood = true;
    else if (a == "--allocator-binary" && i + 1 < argc) g_allocator_binary = argv[++i];
    else if (a == "-h" || a == "--help") {
      std::cout << "usage: daemon_bench [--quick] [--ipc] [--latency-only | --throughput-only |\n"
                   "                    --ctl-flood]\n"
                   "                    [--allocator-binary PATH]   (prints JSON; see the file's header)\n";
      return 0;
    } else {
      std::cerr << "daemon_bench: unknown option " << a << "\n";
      return 2;
    }
  }
  const std::string listen = transport == "tcp"
                                 ? "tcp://127.0.0.1:" + std::to_string(20000 + getpid() % 20000)
                                 : "ipc:///tmp/ft-bench-" + std::to_string(getpid());
  json out = {{"benchmark", "daemon"}, {"transport", transport}, {"allocator", g_allocator_binary}};
  const std::vector<std::size_t> sizes = quick ? std::vector<std::size_t>{1000}
                                               : std::vector<std::size_t>{1000, 10000, 50000};
  const std::vector<unsigned> threads = quick ? std::vector<unsigned>{1} : std::vector<unsigned>{1, 2};
  const double seconds = quick ? 1.0 : 3.0;
  try {
    if (ctl_flood) {
      // Interleaved: without, with, without, with; 100,000 flows (quick:
      // 10,000), probes 10 ms apart.
      const std::size_t active = quick ? 10000 : 100000;
      const int n = quick ? 100 : 300;
      for (int round = 0; round < (quick ? 1 : 2); ++round) {
        for (double per_s : {0.0, 5.0}) {
          out["ctl_flood"].push_back(latency_run(listen, 1, active, n, 0.01, 0, per_s));
        }
      }
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    for (unsigned t : threads) {
      if (latency_only) break;
      for (std::size_t a : sizes) out["throughput"].push_back(throughput_run(listen, t, a, 128, seconds));
    }
    if (throughput_only) {
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    const std::vector<std::size_t> lat_sizes = quick ? std::vector<std::size_t>{1000}
                                                     : std::vector<std::size_t>{1000, 10000};
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
      out["zmq_echo_baseline"].push_back({{"message_bytes", bytes}, {"gap_ms", gap * 1e3},
                                          {"p50_us", b.p50}, {"p99_us", b.p99},
                                          {"p999_us", b.p999}});
      for (json& l : out["latency"]) {
        if (std::abs(l["gap_ms"].get<double>() - gap * 1e3) > 1e-9) continue;
        l["echo_p50_us"] = b.p50;
        l["echo_p99_us"] = b.p99;
        l["p50_vs_echo"] = l["p50_us"].get<double>() / b.p50;
        l["p99_vs_echo"] = l["p99_us"].get<double>() / b.p99;
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "daemon_bench: " << e.what() << "\n";
    return 1;
  }
  std::cout << out.dump(2) << "\n";
  return 0;
}
