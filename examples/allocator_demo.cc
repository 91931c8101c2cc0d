// allocator_demo: a live look at flowtune-allocator. Four endpoints (hosts
// 10.0.0.1-4) speak the wire protocol to a running allocator and send
// flowlets to one receiver (10.0.0.100) that join, then leave, one per
// step. After each step it prints the rate each live flowlet was told
// beside the fair share of the receiver's link, so convergence is visible.
//
// Usage: allocator_demo [--allocator ENDPOINT] [--link-gbps G] [--step-ms MS]
// (the allocator must run with --unknown-hosts add, its default without a
// topology file, and host links of G Gbit/s).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "flowtune/wire/codec.h"

namespace {

namespace wire = flowtune::wire;
using Clock = std::chrono::steady_clock;

constexpr std::uint32_t kReceiver = 0x0a000064;  // 10.0.0.100

struct Sender {
  int index;
  zmq::socket_t socket;
  std::uint64_t rate = 0;  // bytes/s last told
  bool live = false;
  std::uint64_t errors = 0;
};

void send(Sender& s, std::vector<wire::EndpointEvent> events) {
  wire::EndpointMessage m;
  m.events = std::move(events);
  const auto bytes = wire::encode(m);
  s.socket.send(zmq::buffer(bytes), zmq::send_flags::none);
}

wire::FlowletStart flowlet(int i) {
  wire::FlowletStart f;
  f.flow_key = 1;
  f.endpoints = wire::FiveTuple{0x0a000000u + static_cast<std::uint32_t>(i), kReceiver,
                                static_cast<std::uint16_t>(40000 + i), 5201, 6};
  f.bytes = 100u << 20;
  return f;
}

// Reads every reply that arrives within `ms`, keeping the last rate of each.
void pump(std::vector<std::unique_ptr<Sender>>& senders, int ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(ms);
  std::vector<zmq::pollitem_t> items;
  for (auto& s : senders) items.push_back({s->socket.handle(), 0, ZMQ_POLLIN, 0});
  while (Clock::now() < deadline) {
    zmq::poll(items, std::chrono::milliseconds(5));
    for (auto& s : senders) {
      zmq::message_t msg;
      while (s->socket.recv(msg, zmq::recv_flags::dontwait)) {
        wire::AllocatorMessage a;
        if (!wire::decode({msg.data<std::uint8_t>(), msg.size()}, &a).ok()) continue;
        for (const auto& r : a.rates) s->rate = r.bytes_per_sec;
        for (const auto& e : a.errors) {
          if (s->errors++ == 0) {
            std::fprintf(stderr, "sender %d: allocator error: %s\n", s->index, e.text.c_str());
          }
        }
      }
    }
  }
}

void report(double t, const std::vector<std::unique_ptr<Sender>>& senders, double link_bps,
            double threshold) {
  int live = 0;
  for (const auto& s : senders) live += s->live;
  std::printf("t=%4.1fs  %d flowlet(s) into 10.0.0.100", t, live);
  if (live > 0) {
    std::printf("  fair share %6.1f Mbit/s |", link_bps * (1 - threshold) / live / 1e6);
    for (const auto& s : senders) {
      if (s->live) std::printf("  10.0.0.%d: %6.1f", s->index, static_cast<double>(s->rate) * 8 / 1e6);
    }
  }
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string allocator = "tcp://127.0.0.1:5555";
  double link_gbps = 1;
  int step_ms = 400;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--allocator") allocator = argv[i + 1];
    else if (a == "--link-gbps") link_gbps = std::atof(argv[i + 1]);
    else if (a == "--step-ms") step_ms = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: allocator_demo [--allocator EP] [--link-gbps G] [--step-ms MS]\n");
      return 2;
    }
  }
  zmq::context_t ctx(1);
  std::vector<std::unique_ptr<Sender>> senders;
  for (int i = 1; i <= 4; ++i) {
    auto s = std::make_unique<Sender>(Sender{i, zmq::socket_t(ctx, zmq::socket_type::dealer)});
    s->socket.set(zmq::sockopt::linger, 0);
    s->socket.connect(allocator);
    send(*s, {wire::Hello{"demo-sender-" + std::to_string(i) + "-" + std::to_string(getpid()),
                          "10.0.0." + std::to_string(i)}});
    senders.push_back(std::move(s));
  }
  const double link_bps = link_gbps * 1e9;
  double t = 0;
  auto step = [&](int who, bool start) {
    Sender& s = *senders[static_cast<std::size_t>(who)];
    if (start) {
      send(s, {flowlet(s.index)});
    } else {
      send(s, {wire::FlowletEnd{1}});
    }
    s.live = start;
    for (auto& other : senders) {
      if (other.get() != &s) send(*other, {wire::Heartbeat{}});
    }
    pump(senders, step_ms);
    t += step_ms / 1000.0;
    report(t, senders, link_bps, 0.01);
  };
  for (int i = 0; i < 4; ++i) step(i, true);
  for (int i = 0; i < 4; ++i) step(i, false);
  int errors = 0;
  for (const auto& s : senders) errors += static_cast<int>(s->errors);
  return errors == 0 ? 0 : 1;
}
