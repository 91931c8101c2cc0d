// A synthetic endpoint swarm against the real allocator, with and without
// relays (docs/scale.md#relays). One process plays H endpoints (one DEALER
// each, a host each, speaking the wire protocol as libflowtune does: one
// message per start and per end, a heartbeat after a silent second),
// driven by Poisson flowlet arrivals whose sizes come from a flow-size CDF
// (default websearch, ../shared/data); a flowlet ends after its size at the
// host link's rate, and lives at least 20 ms, past its first rate in every
// configuration. Each configuration is measured in the same run:
//
//   direct     every endpoint connected to the allocator
//   relayed    endpoints split evenly over R rack relays (--per-relay hosts
//              each), under one pod relay when R > 1
//
// Figures: the allocator's CPU seconds per flowlet event (start or end;
// /proc/PID/stat), its messages in per second, the relays' CPU, and
// start -> first rate latency p50/p99 (µs) at the endpoints, with the
// starts never rated counted (not left out). The relays' own cost is
// measured beside them: the round trip of a rate request the allocator
// answers at once (an unknown key), idle, through the relays less direct
// (one hop at 144 hosts, two with a pod relay; each holds a message up to
// --batch-us). Checked: the allocator saw every event, no relay dropped one.
//
//   swarm_bench [--hosts 144,1152,4608] [--per-relay 192] [--starts-per-s 2000]
//               [--seconds 10] [--workload websearch] [--quick]
// prints one JSON document: runs[] and ratios (direct / relayed CPU per event).
#include <signal.h>
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "flowtune/wire/codec.h"
#include "proc_stats.h"
#include "../allocator/sim/workload.h"  // flow-size CDFs (bench/workload.h is another)

extern char** environ;

namespace {

using flowtune::sim::FlowSizeCdf;
using flowtune::sim::Rng;
namespace wire = flowtune::wire;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr double kHostBps = 10e9;
constexpr double kMinLifeS = 0.020;

double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

// A child process (the allocator or a relay), killed at the end.
class Child {
 public:
  explicit Child(std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ) != 0) {
      throw std::runtime_error("cannot start " + args[0]);
    }
  }
  ~Child() {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
  double cpu_s() const { return flowtune::bench::process_cpu_s(pid_); }

 private:
  pid_t pid_ = -1;
};

std::optional<json> ask(zmq::context_t& ctx, const std::string& ep, const std::string& req, int ms) {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.connect(ep);
  s.send(zmq::str_buffer("flowtune-ctl"), zmq::send_flags::sndmore);
  s.send(zmq::buffer(req), zmq::send_flags::none);
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  zmq::poll(&item, 1, std::chrono::milliseconds(ms));
  zmq::message_t tag, body;
  if ((item.revents & ZMQ_POLLIN) == 0 || !s.recv(tag) || !s.recv(body)) return std::nullopt;
  return json::parse(body.to_string_view(), nullptr, false);
}

void wait_up(zmq::context_t& ctx, const std::string& ep) {
  for (int i = 0; i < 200; ++i) {
    if (ask(ctx, ep, "status", 50)) return;
  }
  throw std::runtime_error(ep + " did not come up");
}

struct Endpoint {
  zmq::socket_t s;
  int fd = -1;
  std::uint32_t host;
  std::uint64_t next_key = 1;
  bool acked = false;
  double last_sent = 0;  // as libflowtune, a heartbeat only after a silent second
  Endpoint(zmq::context_t& ctx, const std::string& ep, std::uint32_t h)
      : s(ctx, zmq::socket_type::dealer), host(h) {
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::sndhwm, 10000);
    s.connect(ep);
    fd = s.get(zmq::sockopt::fd);
  }
};

struct Quantiles {
  double p50 = 0, p99 = 0;
  std::size_t n = 0;
};
Quantiles quantiles(std::vector<double> v) {
  Quantiles q;
  q.n = v.size();
  if (v.empty()) return q;
  std::sort(v.begin(), v.end());
  q.p50 = v[v.size() / 2];
  q.p99 = v[std::min(v.size() - 1, static_cast<std::size_t>(static_cast<double>(v.size()) * 0.99))];
  return q;
}

struct Options {
  std::vector<std::uint32_t> hosts = {144, 1152, 4608};
  std::uint32_t per_relay = 192;
  double starts_per_s = 2000;
  double seconds = 10;
  std::string workload = "websearch";
  std::string allocator = FT_ALLOCATOR_BINARY;
  std::string relay = FT_RELAY_BINARY;
  std::uint64_t batch_us = 500;  // each relay's --batch-us
};

class Swarm {
 public:
  Swarm(zmq::context_t& ctx, const Options& o, std::uint32_t hosts, const std::vector<std::string>& targets)
      : o_(o), rng_(hosts * 7919 + 1) {
    ep_fd_ = epoll_create1(EPOLL_CLOEXEC);
    timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    add_fd(timer_fd_, UINT32_MAX);
    for (std::uint32_t h = 0; h < hosts; ++h) {
      eps_.push_back(std::make_unique<Endpoint>(ctx, targets[h % targets.size()], h));
      add_fd(eps_.back()->fd, h);
    }
  }
  ~Swarm() {
    ::close(ep_fd_);
    ::close(timer_fd_);
  }
  // Every endpoint says hello; waits for every acknowledgement.
  void hello() {
    for (auto& e : eps_) {
      wire::EndpointMessage m;
      m.events.emplace_back(wire::Hello{"swarm-" + std::to_string(e->host), "h" + std::to_string(e->host)});
      send(*e, m);
    }
    const double deadline = now_s() + 60;
    while (acked_ < eps_.size() && now_s() < deadline) wait_until(now_s() + 0.01);
    if (acked_ < eps_.size()) throw std::runtime_error("not every endpoint was acknowledged");
  }
  // Poisson starts for `seconds`; returns flowlet events sent.
  std::uint64_t run(double seconds, const FlowSizeCdf& sizes) {
    const double t0 = now_s();
    const double end = t0 + seconds;
    double next_start = t0 + rng_.exponential(1.0 / o_.starts_per_s);
    double next_beat = t0 + 0.1;
    std::uint64_t events = 0;
    while (true) {
      const double now = now_s();
      if (now >= end) break;
      while (next_start <= now) {
        start(sizes, now);
        ++events;
        next_start += rng_.exponential(1.0 / o_.starts_per_s);
      }
      while (!ends_.empty() && ends_.top().at <= now) {
        finish(ends_.top());
        ends_.pop();
        ++events;
      }
      if (next_beat <= now) {
        for (auto& e : eps_) {
          if (now - e->last_sent < 1.0) continue;
          wire::EndpointMessage m;
          m.events.emplace_back(wire::Heartbeat{});
          send(*e, m);
        }
        next_beat += 0.1;
      }
      double due = std::min({next_start, next_beat, end});
      if (!ends_.empty()) due = std::min(due, ends_.top().at);
      wait_until(due);
    }
    return events;
  }
  std::vector<double> latencies_us() const { return lat_us_; }
  std::uint64_t unrated() const { return unrated_ + pending_.size(); }
  std::uint64_t send_failures() const { return send_failures_; }
  // The round trip of a rate request for a key the allocator does not hold
  // (answered at once with unknownFlow), from endpoint 0, n times, idle.
  std::vector<double> echo_us(int n) {
    std::vector<double> out;
    Endpoint& e = *eps_[0];
    for (int i = 0; i < n; ++i) {
      wire::EndpointMessage m;
      echo_key_ = (1ull << 40) + static_cast<std::uint64_t>(i);
      m.events.emplace_back(wire::RateRequest{{echo_key_}});
      echo_seen_ = false;
      const double t = now_s();
      send(e, m);
      while (!echo_seen_ && now_s() < t + 1) wait_until(now_s() + 0.001);
      if (echo_seen_) out.push_back((echo_at_ - t) * 1e6);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return out;
  }

 private:
  struct End {
    double at;
    std::uint32_t ep;
    std::uint64_t key;
    bool operator>(const End& o) const { return at > o.at; }
  };
  void add_fd(int fd, std::uint32_t tag) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = tag;
    (void)epoll_ctl(ep_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
  void send(Endpoint& e, const wire::EndpointMessage& m) {
    if (!e.s.send(zmq::buffer(wire::encode(m)), zmq::send_flags::dontwait)) ++send_failures_;
    e.last_sent = now_s();
    drain(e);  // a send can take the fd's edge
  }
  void start(const FlowSizeCdf& sizes, double now) {
    Endpoint& e = *eps_[rng_.below(static_cast<std::uint32_t>(eps_.size()))];
    std::uint32_t dst = rng_.below(static_cast<std::uint32_t>(eps_.size()));
    if (dst == e.host) dst = (dst + 1) % static_cast<std::uint32_t>(eps_.size());
    const double bytes = std::max(1.0, sizes.sample(rng_));
    wire::FlowletStart s;
    s.flow_key = e.next_key++;
    s.endpoints = wire::HostPair{e.host, dst};
    s.bytes = static_cast<std::uint64_t>(bytes);
    wire::EndpointMessage m;
    m.events.emplace_back(s);
    pending_[(static_cast<std::uint64_t>(e.host) << 40) | s.flow_key] = now;
    send(e, m);
    // At least 20 ms: every flowlet lives past its first rate in every
    // configuration, so each costs the allocator the same work.
    ends_.push({now + std::max(kMinLifeS, bytes * 8 / kHostBps), e.host, s.flow_key});
  }
  void finish(const End& x) {
    wire::EndpointMessage m;
    m.events.emplace_back(wire::FlowletEnd{x.key});
    // Ended before its first rate came: counted, not silently left out.
    unrated_ += pending_.erase((static_cast<std::uint64_t>(x.ep) << 40) | x.key);
    send(*eps_[x.ep], m);
  }
  void drain(Endpoint& e) {
    zmq::message_t msg;
    while (e.s.recv(msg, zmq::recv_flags::dontwait)) {
      wire::AllocatorMessage a;
      if (!wire::decode({msg.data<std::uint8_t>(), msg.size()}, &a).ok()) continue;
      const double t = now_s();
      if (a.hello_ack && !e.acked) {
        e.acked = true;
        ++acked_;
      }
      for (const auto& r : a.rates) {
        const auto it = pending_.find((static_cast<std::uint64_t>(e.host) << 40) | r.flow_key);
        if (it == pending_.end()) continue;
        lat_us_.push_back((t - it->second) * 1e6);
        pending_.erase(it);
      }
      for (const auto& err : a.errors) {
        if (err.code == wire::ErrorCode::kUnknownFlow && err.flow_key == echo_key_) {
          echo_seen_ = true;
          echo_at_ = t;
        }
      }
    }
  }
  void wait_until(double t) {
    const double d = t - now_s();
    itimerspec spec{};
    if (d > 0) {
      spec.it_value.tv_sec = static_cast<time_t>(d);
      spec.it_value.tv_nsec = std::max(1L, static_cast<long>((d - static_cast<double>(spec.it_value.tv_sec)) * 1e9));
    } else {
      spec.it_value.tv_nsec = 1;
    }
    (void)timerfd_settime(timer_fd_, 0, &spec, nullptr);
    epoll_event evs[256];
    const int n = epoll_wait(ep_fd_, evs, 256, -1);
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.u32 == UINT32_MAX) {
        std::uint64_t x;
        (void)!::read(timer_fd_, &x, sizeof x);
        continue;
      }
      drain(*eps_[evs[i].data.u32]);
    }
  }

  const Options& o_;
  Rng rng_;
  int ep_fd_ = -1, timer_fd_ = -1;
  std::vector<std::unique_ptr<Endpoint>> eps_;
  std::size_t acked_ = 0;
  std::unordered_map<std::uint64_t, double> pending_;  // (host, key) -> start sent at
  std::priority_queue<End, std::vector<End>, std::greater<End>> ends_;
  std::vector<double> lat_us_;
  bool echo_seen_ = false;
  double echo_at_ = 0;
  std::uint64_t echo_key_ = 0;
  std::uint64_t unrated_ = 0;
  std::uint64_t send_failures_ = 0;
};

json run_one(const Options& o, std::uint32_t hosts, std::uint32_t relays, const FlowSizeCdf& sizes, int id) {
  zmq::context_t ctx(1);
  ctx.set(zmq::ctxopt::max_sockets, 65536);
  const std::string tag = std::to_string(::getpid()) + "-" + std::to_string(id);
  const std::string alloc_ep = "ipc:///tmp/ft-swarm-" + tag + "-a.sock";
  Child alloc({o.allocator, "--listen", alloc_ep, "--hosts", std::to_string(hosts), "--host-gbps", "10",
               "--log-level", "error", "--max-msg-rate", "0", "--max-source-bytes-per-sec", "0",
               "--endpoint-timeout-ms", "60000"});
  wait_up(ctx, alloc_ep);
  std::vector<std::unique_ptr<Child>> relay_procs;
  std::vector<std::string> targets;
  // Rack relays, and above them (when there are several) one pod relay, as
  // the paper stacks them: the allocator hears one batch where it would
  // hear one message from each rack.
  std::string above = alloc_ep;
  std::vector<std::string> relay_eps;
  if (relays > 1) {
    above = "ipc:///tmp/ft-swarm-" + tag + "-top.sock";
    relay_eps.push_back(above);
    relay_procs.push_back(std::make_unique<Child>(std::vector<std::string>{
        o.relay, "--listen", above, "--upstream", alloc_ep, "--batch-us", std::to_string(o.batch_us)}));
    wait_up(ctx, above);
  }
  for (std::uint32_t r = 0; r < relays; ++r) {
    const std::string ep = "ipc:///tmp/ft-swarm-" + tag + "-r" + std::to_string(r) + ".sock";
    relay_procs.push_back(std::make_unique<Child>(std::vector<std::string>{
        o.relay, "--listen", ep, "--upstream", above, "--batch-us", std::to_string(o.batch_us)}));
    wait_up(ctx, ep);
    targets.push_back(ep);
    relay_eps.push_back(ep);
  }
  if (targets.empty()) targets.push_back(alloc_ep);
  Swarm swarm(ctx, o, hosts, targets);
  swarm.hello();
  const std::vector<double> echo = swarm.echo_us(200);
  const json before = ask(ctx, alloc_ep, "status", 2000).value_or(json{});
  const double cpu0 = alloc.cpu_s();
  double relay_cpu0 = 0;
  for (auto& r : relay_procs) relay_cpu0 += r->cpu_s();
  const double t0 = now_s();
  const std::uint64_t events = swarm.run(o.seconds, sizes);
  const double wall = now_s() - t0;
  const double cpu = alloc.cpu_s() - cpu0;
  double relay_cpu = -relay_cpu0;
  for (auto& r : relay_procs) relay_cpu += r->cpu_s();
  const json after = ask(ctx, alloc_ep, "status", 2000).value_or(json{});
  const auto msgs = after.value("/counters/messages_in"_json_pointer, 0.0) - before.value("/counters/messages_in"_json_pointer, 0.0);
  const auto iters = after.value("/counters/iterations"_json_pointer, 0.0) - before.value("/counters/iterations"_json_pointer, 0.0);
  auto delta = [&](const char* c) {
    const json::json_pointer p(std::string("/counters/") + c);
    return after.value(p, 0.0) - before.value(p, 0.0);
  };
  const double seen = delta("starts") + delta("ends");
  double relay_dropped = 0;
  for (std::uint32_t r = 0; r < relay_eps.size(); ++r) {
    relay_dropped += ask(ctx, relay_eps[r], "status", 2000).value_or(json{}).value("/counters/dropped"_json_pointer, 0.0);
  }
  const Quantiles lat = quantiles(swarm.latencies_us());
  const Quantiles hop = quantiles(echo);
  return {{"hosts", hosts},
          {"relays", relays},
          {"pod_relay", relays > 1},
          {"batch_us", relays > 0 ? o.batch_us : 0},
          {"seconds", wall},
          {"flowlet_events", events},
          {"allocator_cpu_s", cpu},
          {"allocator_cpu_us_per_event", events > 0 ? cpu * 1e6 / static_cast<double>(events) : 0},
          {"allocator_messages_per_s", msgs / wall},
          {"allocator_iterations_per_event", events > 0 ? iters / static_cast<double>(events) : 0},
          {"relays_cpu_s", relays > 0 ? relay_cpu : 0},
          {"all_cpu_us_per_event", events > 0 ? (cpu + (relays > 0 ? relay_cpu : 0)) * 1e6 / static_cast<double>(events) : 0},
          {"events_seen_by_allocator", seen},
          {"relay_dropped", relay_dropped},
          {"send_failures", swarm.send_failures()},
          {"starts_unrated", swarm.unrated()},
          {"start_to_rate_us", {{"p50", lat.p50}, {"p99", lat.p99}, {"n", lat.n}}},
          {"idle_round_trip_us", {{"p50", hop.p50}, {"p99", hop.p99}}}};
}

std::vector<std::uint32_t> parse_list(const std::string& s) {
  std::vector<std::uint32_t> v;
  std::size_t at = 0;
  while (at < s.size()) {
    const std::size_t c = std::min(s.find(',', at), s.size());
    v.push_back(static_cast<std::uint32_t>(std::stoul(s.substr(at, c - at))));
    at = c + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "swarm_bench: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--hosts") o.hosts = parse_list(val());
    else if (a == "--per-relay") o.per_relay = static_cast<std::uint32_t>(std::stoul(val()));
    else if (a == "--starts-per-s") o.starts_per_s = std::stod(val());
    else if (a == "--seconds") o.seconds = std::stod(val());
    else if (a == "--workload") o.workload = val();
    else if (a == "--batch-us") o.batch_us = std::stoull(val());
    else if (a == "--quick") {
      o.hosts = {144, 1152};
      o.seconds = 3;
    } else if (a == "-h" || a == "--help") {
      std::cout << "usage: swarm_bench [--hosts 144,1152,4608] [--per-relay 192] [--starts-per-s 2000]\n"
                   "                   [--seconds 10] [--workload NAME|FILE] [--batch-us 500] [--quick]\n";
      return 0;
    } else {
      std::cerr << "swarm_bench: unknown flag " << a << " (see --help)\n";
      return 2;
    }
  }
  if (o.hosts.empty() || o.per_relay == 0 || !(o.starts_per_s > 0) || !(o.seconds > 0)) {
    std::cerr << "swarm_bench: hosts, --per-relay, --starts-per-s and --seconds must be positive\n";
    return 2;
  }
  try {
    const FlowSizeCdf sizes = flowtune::sim::load_workload(o.workload);
    json runs = json::array(), ratios = json::array();
    int id = 0;
    for (std::uint32_t h : o.hosts) {
      const std::uint32_t relays = std::max<std::uint32_t>(1, (h + o.per_relay - 1) / o.per_relay);
      const json direct = run_one(o, h, 0, sizes, id++);
      const json relayed = run_one(o, h, relays, sizes, id++);
      runs.push_back(direct);
      runs.push_back(relayed);
      const double d = direct["allocator_cpu_us_per_event"], r = relayed["allocator_cpu_us_per_event"];
      const double ra = relayed["all_cpu_us_per_event"];
      ratios.push_back({{"hosts", h},
                        {"relays", relays},
                        {"cpu_per_event_direct_over_relayed", r > 0 ? d / r : 0},
                        {"cpu_per_event_direct_over_relayed_with_relays_cpu", ra > 0 ? d / ra : 0},
                        {"p99_growth_us", relayed["/start_to_rate_us/p99"_json_pointer].get<double>() -
                                              direct["/start_to_rate_us/p99"_json_pointer].get<double>()},
                        {"relay_hop_us_p50", relayed["/idle_round_trip_us/p50"_json_pointer].get<double>() -
                                                 direct["/idle_round_trip_us/p50"_json_pointer].get<double>()}});
      std::cerr << "swarm_bench: " << h << " hosts done\n";
    }
    std::cout << json{{"bench", "swarm"},
                      {"starts_per_s", o.starts_per_s},
                      {"seconds", o.seconds},
                      {"workload", o.workload},
                      {"per_relay", o.per_relay},
                      {"runs", runs},
                      {"ratios", ratios}}
                     .dump(2)
              << "\n";
  } catch (const std::exception& e) {
    std::cerr << "swarm_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
