// Both sides of the protocol together: endpoint Sessions and one Allocator,
// pure state machines, in one process over a channel that drops, duplicates,
// delays and reorders messages, with an allocator that stalls, restarts and
// rate-limits, under random flowlet workloads. Time is simulated (no clock,
// no sleep); a seed names one run.
//
// Invariant once traffic quiets (no more faults, workload frozen, time for
// every backoff and lease to play out):
//   - the allocator's flows for each endpoint are exactly the endpoint's live
//     reported flowlets;
//   - every live flowlet's applied cap is the rate the allocator last sent it;
//   - no socket holds a cap without a live flow behind it.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "flowtune/daemon/allocator.h"
#include "flowtune/daemon/network.h"
#include "flowtune/wire/codec.h"
#include "session.h"

namespace flowtune::client {
namespace {

using Bytes = std::vector<std::uint8_t>;

struct Faults {
  double drop = 0.05;
  double duplicate = 0.03;
  std::uint64_t max_delay_us = 4'000;  // uniform: messages overtake each other
  double stall_per_sec = 0.3;          // allocator stalls of 0.2-2.5 s
  double restart_per_sec = 0.1;
  double max_messages_per_sec = 400;   // the allocator's per-endpoint limit
};

constexpr std::uint64_t kTickUs = 200;
constexpr int kEndpoints = 3;
constexpr int kSockets = 5;
constexpr double kLinkBytesPerSec = 12.5e6;  // 100 Mbit/s host links

std::string host_ip(int e) { return "10.0.0." + std::to_string(e + 1); }

std::string network_toml() {
  std::string t = "kind = \"big_switch\"\nhost_gbps = 0.1\nhosts = " +
                  std::to_string(kEndpoints) + "\n";
  for (int e = 0; e < kEndpoints; ++e) {
    t += "[[host]]\nindex = " + std::to_string(e) + "\nname = \"" + host_ip(e) + "\"\n";
  }
  return t;
}

// One message in flight.
struct Packet {
  std::uint64_t at_us;
  std::uint64_t order;  // ties: send order
  int endpoint;
  Bytes bytes;
  bool operator<(const Packet& o) const {
    return at_us != o.at_us ? at_us < o.at_us : order < o.order;
  }
};

class Channel {
 public:
  Channel(std::mt19937_64* rng, const Faults* faults) : rng_(rng), faults_(faults) {}
  void send(int endpoint, Bytes b, std::uint64_t now_us, bool faulty) {
    std::uniform_real_distribution<double> u(0, 1);
    if (faulty && u(*rng_) < faults_->drop) return;
    const int copies = faulty && u(*rng_) < faults_->duplicate ? 2 : 1;
    for (int i = 0; i < copies; ++i) {
      const std::uint64_t delay =
          faulty ? std::uniform_int_distribution<std::uint64_t>(0, faults_->max_delay_us)(*rng_)
                 : 0;
      q_.insert({now_us + delay, next_++, endpoint, b});
    }
  }
  // Messages due by now, in delivery order.
  std::vector<Packet> due(std::uint64_t now_us) {
    std::vector<Packet> out;
    while (!q_.empty() && q_.begin()->at_us <= now_us) {
      out.push_back(*q_.begin());
      q_.erase(q_.begin());
    }
    return out;
  }
  bool empty() const { return q_.empty(); }

 private:
  std::mt19937_64* rng_;
  const Faults* faults_;
  std::multiset<Packet> q_;
  std::uint64_t next_ = 0;
};

// What the kernel would hold for one socket: bytes not yet sent, and the cap.
struct FakeSocket {
  SocketRef ref;
  wire::FiveTuple tuple;
  double unsent = 0;
  std::uint64_t cap = 0;  // bytes/s, 0 = none
  bool registered = true;
};

class Model {
 public:
  Model(std::uint64_t seed, Faults faults)
      : rng_(seed), faults_(faults), to_alloc_(&rng_, &faults_) {
    for (int e = 0; e < kEndpoints; ++e) to_eps_.emplace_back(&rng_, &faults_);
    daemon::AllocatorConfig c;
    c.lease_us = 1'000'000;
    c.lease_refresh_us = 300'000;
    c.endpoint_timeout_us = 3'000'000;
    c.max_messages_per_sec = faults_.max_messages_per_sec;
    alloc_config_ = c;
    restart_allocator();
    for (int e = 0; e < kEndpoints; ++e) {
      SessionConfig s;
      s.endpoint_id = "ep" + std::to_string(e);
      s.host = host_ip(e);
      s.min_flowlet_bytes = 64 * 1024;
      s.heartbeat_us = 1'000'000;
      sessions_.push_back(std::make_unique<Session>(s));
      sockets_.emplace_back();
      for (int i = 0; i < kSockets; ++i) {
        FakeSocket f;
        f.ref = SocketRef{10 + i, 1};
        f.tuple = {0x0a000001u + static_cast<std::uint32_t>(e),
                   0x0a000001u + static_cast<std::uint32_t>((e + 1 + i % 2) % kEndpoints),
                   static_cast<std::uint16_t>(40000 + i), 5201, 6};
        sessions_[e]->on_register(f.ref, f.tuple, 1448, now_);
        sockets_[e].push_back(f);
      }
    }
  }

  // Faults and random flowlets for `us`, then quiet for `quiet_us`.
  void run(std::uint64_t us, std::uint64_t quiet_us) {
    const std::uint64_t chaos_end = now_ + us;
    while (now_ < chaos_end) tick(/*faulty=*/true);
    stalled_until_ = 0;
    const std::uint64_t quiet_end = now_ + quiet_us;
    while (now_ < quiet_end) tick(/*faulty=*/false);
  }

  void check() {
    const auto flows = alloc_->flows(now_, 1u << 20);
    for (int e = 0; e < kEndpoints; ++e) {
      const std::string id = "ep" + std::to_string(e);
      std::map<std::uint64_t, std::uint64_t> held;  // key -> bytes/s last sent
      for (const daemon::FlowView& f : flows) {
        if (f.endpoint_id == id) held[f.flow_key] = static_cast<std::uint64_t>(f.sent_rate_bps / 8);
      }
      std::map<std::uint64_t, std::uint64_t> live;  // key -> cap applied
      std::set<int> live_fds;
      for (const FlowletView& v : sessions_[e]->flowlets()) {
        if (v.key == 0) continue;
        live[v.key] = v.rate;
        live_fds.insert(v.socket.fd);
      }
      std::set<std::uint64_t> held_keys, live_keys;
      for (const auto& [k, r] : held) held_keys.insert(k);
      for (const auto& [k, r] : live) live_keys.insert(k);
      EXPECT_EQ(held_keys, live_keys) << id << ": allocator's flows vs endpoint's live flowlets";
      for (const auto& [key, rate] : live) {
        const auto it = held.find(key);
        if (it == held.end()) continue;
        EXPECT_NE(rate, 0u) << id << " flow " << key << " has no cap applied";
        EXPECT_EQ(rate, it->second) << id << " flow " << key << ": cap vs allocator's rate";
      }
      for (const FakeSocket& s : sockets_[e]) {
        if (s.cap != 0) {
          EXPECT_TRUE(live_fds.contains(s.ref.fd))
              << id << " fd " << s.ref.fd << " holds a cap of " << s.cap << " with no live flow";
        }
        EXPECT_EQ(s.cap, sessions_[e]->rate_of(s.ref)) << id << " fd " << s.ref.fd;
      }
    }
  }

  std::size_t live_reported() const {
    std::size_t n = 0;
    for (const auto& s : sessions_) {
      for (const FlowletView& v : s->flowlets()) n += v.key != 0;
    }
    return n;
  }
  const daemon::Counters& counters() const { return alloc_->counters(); }
  std::uint64_t restarts() const { return restarts_; }
  SessionStats stats(int e) const { return sessions_[e]->stats(); }

 private:
  void restart_allocator() {
    alloc_ = std::make_unique<daemon::Allocator>(
        daemon::Network::from_toml_string(network_toml(), "model.toml"), alloc_config_,
        ++epoch_, nullptr);
    ++restarts_;
  }

  void tick(bool faulty) {
    now_ += kTickUs;
    std::uniform_real_distribution<double> u(0, 1);
    const double tick_s = static_cast<double>(kTickUs) * 1e-6;
    if (faulty) {
      if (now_ >= stalled_until_ && u(rng_) < faults_.stall_per_sec * tick_s) {
        stalled_until_ = now_ + std::uniform_int_distribution<std::uint64_t>(200'000, 2'500'000)(rng_);
      }
      if (u(rng_) < faults_.restart_per_sec * tick_s) restart_allocator();
      workload(tick_s);
    }
    drain_kernel(tick_s);
    allocator_turn(faulty);
    for (int e = 0; e < kEndpoints; ++e) endpoint_turn(e, faulty);
  }

  // Random flowlets: begins (handed to the kernel at once, as a write does),
  // explicit ends, and sockets closed and opened again.
  void workload(double tick_s) {
    std::uniform_real_distribution<double> u(0, 1);
    for (int e = 0; e < kEndpoints; ++e) {
      for (FakeSocket& s : sockets_[e]) {
        if (u(rng_) >= 10 * tick_s) continue;  // about 10 events per socket per second
        const double r = u(rng_);
        Session& ses = *sessions_[e];
        if (r < 0.7) {
          // Sizes from mice to transfers longer than the whole run.
          const double exp = std::uniform_real_distribution<double>(9, 29)(rng_);
          const auto bytes = static_cast<std::uint64_t>(std::exp2(exp));
          ses.on_begin(s.ref, bytes, {}, now_);
          ses.on_sent(s.ref, bytes, now_);
          s.unsent += static_cast<double>(bytes);
        } else if (r < 0.9) {
          ses.on_end(s.ref, now_);
        } else {
          // Closed (the application unregisters first) and a new socket on the fd.
          ses.on_unregister(s.ref, now_);
          s.cap = 0;  // SocketTable::release clears it on the application's thread
          s.unsent = 0;
          s.ref.gen += 1;
          s.tuple.src_port = static_cast<std::uint16_t>(s.tuple.src_port + 100);
          ses.on_register(s.ref, s.tuple, 1448, now_);
        }
      }
    }
  }

  void drain_kernel(double tick_s) {
    for (auto& eps : sockets_) {
      for (FakeSocket& s : eps) {
        const double rate = s.cap != 0 ? std::min<double>(static_cast<double>(s.cap), kLinkBytesPerSec)
                                       : kLinkBytesPerSec;
        s.unsent = std::max(0.0, s.unsent - rate * tick_s);
      }
    }
  }

  void allocator_turn(bool faulty) {
    if (now_ < stalled_until_) return;  // stopped: messages wait in the channel
    for (const Packet& p : to_alloc_.due(now_)) {
      alloc_->on_message("ep" + std::to_string(p.endpoint), p.bytes, now_);
    }
    for (int i = 0; i < 8 && alloc_->busy(); ++i) alloc_->iterate(now_);
    if (alloc_->next_timer_us() <= now_) alloc_->on_timer(now_);
    for (daemon::Outgoing& o : alloc_->take_outbox()) {
      const int e = o.peer[2] - '0';
      to_eps_[e].send(e, wire::encode(o.message), now_, faulty);
    }
  }

  void endpoint_turn(int e, bool faulty) {
    Session& ses = *sessions_[e];
    for (const Packet& p : to_eps_[e].due(now_)) {
      wire::AllocatorMessage m;
      ASSERT_TRUE(wire::decode(p.bytes, &m).ok());
      ses.on_message(m, now_);
    }
    ses.on_timer(now_);
    for (const SocketRef& ref : ses.take_drain_queries()) {
      for (FakeSocket& s : sockets_[e]) {
        if (s.ref == ref) ses.on_unsent(ref, static_cast<std::uint64_t>(s.unsent), now_);
      }
    }
    for (const PacingAction& a : ses.take_actions()) {
      for (FakeSocket& s : sockets_[e]) {
        if (s.ref == a.socket) s.cap = a.bytes_per_sec;
      }
    }
    (void)ses.take_ended();
    (void)ses.take_notices();
    while (auto m = ses.take_message(now_)) to_alloc_.send(e, wire::encode(*m), now_, faulty);
  }

  std::mt19937_64 rng_;
  Faults faults_;
  Channel to_alloc_;
  std::vector<Channel> to_eps_;  // one per endpoint
  daemon::AllocatorConfig alloc_config_;
  std::unique_ptr<daemon::Allocator> alloc_;
  std::uint64_t epoch_ = 100;
  std::uint64_t restarts_ = 0;
  std::uint64_t stalled_until_ = 0;
  std::vector<std::unique_ptr<Session>> sessions_;
  std::vector<std::vector<FakeSocket>> sockets_;
  std::uint64_t now_ = 1;
};

class SyncModel : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(SyncModel, BothSidesAgreeOnceTrafficQuiets) {
  // Given: 6 s of faults and random flowlets; then 14 s quiet (the longest
  // backoff a few failures in a row reach, plus leases and timeouts).
  Model m(GetParam(), Faults{});
  m.run(6'000'000, 14'000'000);
  // Expect: both sides agree, and the run exercised the repairs.
  m.check();
  EXPECT_GT(m.live_reported(), 0u) << "no flowlet lived to the end: the check saw nothing";
  std::uint64_t resyncs = 0, asks = 0;
  for (int e = 0; e < kEndpoints; ++e) {
    resyncs += m.stats(e).resyncs;
    asks += m.stats(e).rate_requests;
  }
  std::printf("seed %llu: %llu messages, %llu starts, %llu ends, %llu resyncs, %llu asks, %llu restarts, %zu live\n",
              (unsigned long long)GetParam(), (unsigned long long)m.counters().messages_in,
              (unsigned long long)m.counters().starts, (unsigned long long)m.counters().ends,
              (unsigned long long)resyncs, (unsigned long long)asks,
              (unsigned long long)m.restarts(), m.live_reported());
  RecordProperty("resyncs", std::to_string(resyncs));
  RecordProperty("rate_requests", std::to_string(asks));
  EXPECT_GT(resyncs, 0u);
}

INSTANTIATE_TEST_SUITE_P(Seeds, SyncModel, ::testing::Range<std::uint64_t>(1, 41));

TEST(SyncModelFaults, WithoutFaultsNothingNeedsRepair) {
  // A control run: no drops, stalls or restarts, no rate limit.
  Faults none;
  none.drop = none.duplicate = 0;
  none.max_delay_us = 0;
  none.stall_per_sec = none.restart_per_sec = 0;
  none.max_messages_per_sec = 0;
  Model m(7, none);
  m.run(3'000'000, 3'000'000);
  m.check();
  for (int e = 0; e < kEndpoints; ++e) EXPECT_EQ(m.stats(e).resyncs, 0u);
}

}  // namespace
}  // namespace flowtune::client
