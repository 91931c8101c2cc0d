// Protocol state machine tests: hand-built endpoint messages go into one
// Allocator (no sockets, time advanced by hand), and the test asserts on the
// messages it emits. Rates are checked against closed forms: n equal flows on
// one bottleneck get (1 - threshold) * capacity / n each.
#include "flowtune/daemon/allocator.h"
#include "flowtune/daemon/control.h"

#include <capnp/message.h>
#include <capnp/serialize-packed.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <kj/io.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <optional>

#include "flowtune.capnp.h"
#include "flowtune/wire/codec.h"
#include "flowtune/wire/relay.h"

namespace flowtune::daemon {
namespace {

using wire::AllocatorMessage;
using wire::EndpointMessage;
using wire::ErrorCode;

constexpr double kGbps = 1e9;

wire::FlowletStart start_of(std::uint64_t key, std::uint32_t src, std::uint32_t dst,
                            float weight = 1) {
  wire::FlowletStart s;
  s.flow_key = key;
  s.endpoints = wire::HostPair{src, dst};
  s.bytes = 1 << 20;
  s.weight = weight;
  return s;
}

class AllocatorTest : public ::testing::Test {
 protected:
  AllocatorConfig config() {
    AllocatorConfig c;
    c.threshold = 0.01;
    c.lease_us = 1'000'000;
    c.lease_refresh_us = 300'000;
    c.endpoint_timeout_us = 3'000'000;
    return c;
  }
  void make(AllocatorConfig c, std::uint32_t hosts = 8, std::uint32_t spare = 0,
            std::uint64_t epoch = 42) {
    alloc_ = std::make_unique<Allocator>(Network::big_switch(hosts, kGbps, spare), c, epoch,
                                         &log_);
  }
  void SetUp() override { make(config()); }

  // address: the peer's IP address as the server gives it (TCP), or none.
  void send(std::string_view peer, std::vector<wire::EndpointEvent> events,
            std::string_view address = {}) {
    EndpointMessage m;
    m.events = std::move(events);
    const auto bytes = wire::encode(m);
    alloc_->on_message(peer, bytes, now_, nullptr, address);
  }
  void hello(std::string_view peer, std::string id, std::string host) {
    send(peer, {wire::Hello{std::move(id), std::move(host)}});
  }
  // flowtune-ctl's request, answered from sums made now.
  std::string ctl(const std::string& request) {
    ControlCache fresh;
    return control_reply(*alloc_, {"x", 0, {}, {}, {}}, request, now_, fresh);
  }
  // Iterates until the allocator is idle; collects everything it emits.
  std::vector<Outgoing> settle() {
    std::vector<Outgoing> all = alloc_->take_outbox();
    for (int i = 0; i < 100000 && alloc_->busy(); ++i) {
      now_ += 10;
      alloc_->iterate(now_);
      for (auto& o : alloc_->take_outbox()) all.push_back(std::move(o));
    }
    EXPECT_FALSE(alloc_->busy()) << "did not settle";
    return all;
  }
  // The last rate each (peer, key) was told, bytes/s.
  static std::map<std::pair<std::string, std::uint64_t>, std::uint64_t> last_rates(
      const std::vector<Outgoing>& out) {
    std::map<std::pair<std::string, std::uint64_t>, std::uint64_t> r;
    for (const auto& o : out) {
      for (const auto& u : o.message.rates) r[{o.peer, u.flow_key}] = u.bytes_per_sec;
    }
    return r;
  }
  static std::vector<wire::ErrorReport> errors_to(const std::vector<Outgoing>& out,
                                                  std::string_view peer) {
    std::vector<wire::ErrorReport> e;
    for (const auto& o : out) {
      if (o.peer != peer) continue;
      e.insert(e.end(), o.message.errors.begin(), o.message.errors.end());
    }
    return e;
  }
  std::uint64_t errors(Cause c) const { return alloc_->counters().errors[static_cast<int>(c)]; }
  // Four seconds of lease ticks in which only peer b heartbeats: every other
  // endpoint passes its 3 s timeout.
  void only_b_heartbeats_past_the_timeout() {
    for (int i = 0; i < 4; ++i) {
      now_ += 1'000'000;
      send("b", {wire::Heartbeat{}});
      alloc_->on_timer(now_);
    }
  }

  std::vector<std::string> lines_;
  Log log_{[this](std::string_view l) { lines_.emplace_back(l); }, LogLevel::kDebug, 1'000'000};
  std::unique_ptr<Allocator> alloc_;
  std::uint64_t now_ = 1'000;
};

// The scheduled share of one 1 Gbit/s link among n equal flows, bytes/s.
double share(double n, double threshold = 0.01) { return kGbps * (1 - threshold) / 8 / n; }

TEST_F(AllocatorTest, StartGetsTheWholeScheduledLinkAsItsFirstRate) {
  // Given: a registered endpoint on h0.
  hello("p0", "ep0", "h0");
  // When: it starts one flowlet to h1.
  send("p0", {start_of(7, 0, 1)});
  const auto out = settle();
  // Expect: one rate for key 7 near the link's scheduled capacity, with a lease and the epoch.
  const auto rates = last_rates(out);
  ASSERT_EQ(rates.size(), 1u);
  EXPECT_NEAR(static_cast<double>(rates.at({"p0", 7})), share(1), share(1) * 1e-3);
  for (const auto& o : out) {
    EXPECT_EQ(o.message.epoch, 42u);
    for (const auto& u : o.message.rates) EXPECT_EQ(u.lease_us, 1'000'000u);
  }
  EXPECT_EQ(alloc_->counters().starts, 1u);
}

TEST_F(AllocatorTest, FlowsIntoOneHostSplitItsDownlinkEvenly) {
  hello("a", "ep-a", "h0");
  hello("b", "ep-b", "h1");
  hello("c", "ep-c", "h2");
  send("a", {start_of(1, 0, 3)});
  send("b", {start_of(1, 1, 3)});
  send("c", {start_of(1, 2, 3), start_of(2, 2, 4)});
  const auto rates = last_rates(settle());
  // h3's downlink carries a, b and c1; h2's uplink carries c1 and c2. With
  // prices p (h3 down) and q (h2 up), proportional fairness gives a = b = 1/p,
  // c1 = 1/(p+q), c2 = 1/q; both links full gives p = 2q and
  // a = b = 3C/8, c1 = C/4, c2 = 3C/4.
  const double c = share(1);
  EXPECT_NEAR(static_cast<double>(rates.at({"a", 1})), 3 * c / 8, c * 0.01);
  EXPECT_NEAR(static_cast<double>(rates.at({"b", 1})), 3 * c / 8, c * 0.01);
  EXPECT_NEAR(static_cast<double>(rates.at({"c", 1})), c / 4, c * 0.01);
  EXPECT_NEAR(static_cast<double>(rates.at({"c", 2})), 3 * c / 4, c * 0.01);
}

// The loop's engine on two threads, on every schedule, tells endpoints the
// rates the single-threaded one does (4 FlowBlocks against 1: equal up to
// rounding), under churn. The persistent team also runs some iterations on
// the loop thread alone: both ways are exercised here.
TEST_F(AllocatorTest, TwoEngineThreadsGiveTheRatesOfOneOnEverySchedule) {
  auto run = [&](unsigned threads, alloc::Schedule schedule) {
    AllocatorConfig c = config();
    c.threads = threads;
    c.schedule = schedule;
    make(c);
    for (int h = 0; h < 8; ++h) {
      const std::string n = std::to_string(h);
      hello("p" + n, "ep" + n, "h" + n);
    }
    std::vector<Outgoing> out;
    auto take = [&] {
      for (auto& o : settle()) out.push_back(std::move(o));
    };
    std::uint64_t key = 1;
    for (int round = 0; round < 6; ++round) {
      for (std::uint32_t src = 0; src < 8; ++src) {
        std::uint32_t dst = (src * 3 + round + 1) % 8;
        if (dst == src) dst = (src + 1) % 8;
        send("p" + std::to_string(src), {start_of(key++, src, dst)});
      }
      take();
      if (round % 2 == 1) {
        // This round's flowlet from h<round> ends.
        const std::uint64_t ended = key - 8 + static_cast<std::uint64_t>(round);
        send("p" + std::to_string(round), {wire::FlowletEnd{ended}});
        take();
      }
    }
    return last_rates(out);
  };
  const auto want = run(1, alloc::Schedule::kPersistent);
  ASSERT_GE(want.size(), 40u);
  for (alloc::Schedule schedule :
       {alloc::Schedule::kPersistent, alloc::Schedule::kTeam, alloc::Schedule::kTbb}) {
    SCOPED_TRACE(alloc::to_string(schedule));
    const auto got = run(2, schedule);
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [key, rate] : want) {
      ASSERT_TRUE(got.count(key)) << key.first << " " << key.second;
      EXPECT_NEAR(static_cast<double>(got.at(key)), static_cast<double>(rate),
                  1e-6 * static_cast<double>(rate) + 1)
          << key.first << " " << key.second;
    }
  }
}

TEST_F(AllocatorTest, EndFreesCapacityForTheOthers) {
  hello("a", "ep-a", "h0");
  hello("b", "ep-b", "h1");
  send("a", {start_of(1, 0, 2)});
  send("b", {start_of(1, 1, 2)});
  auto rates = last_rates(settle());
  EXPECT_NEAR(static_cast<double>(rates.at({"b", 1})), share(2), share(2) * 0.01);
  // When: a's flowlet ends.
  send("a", {wire::FlowletEnd{1}});
  rates = last_rates(settle());
  // Expect: b is told the whole link, a is told nothing more.
  EXPECT_NEAR(static_cast<double>(rates.at({"b", 1})), share(1), share(1) * 0.01);
  EXPECT_FALSE(rates.contains({"a", 1}));
  EXPECT_EQ(alloc_->num_flows(), 1u);
}

// After a burst has gone (a flood's endpoints timed out), compaction
// shrinks the tables to what is left: the engine's id range falls to the
// flows still live, which keep their rates and keep being served; a
// start and an end afterwards work as before; and a second call, with the
// tables no longer sparse, does nothing.
TEST_F(AllocatorTest, AfterABurstCompactionShrinksTheTablesAndServiceGoesOn) {
  hello("b", "ep-b", "h1");
  auto first = start_of(1, 1, 2);
  first.tenant = "web";
  send("b", {first});
  settle();
  EXPECT_FALSE(alloc_->compact_if_sparse()) << "nothing to shrink yet";
  for (int e = 0; e < 20; ++e) {
    const std::string peer = "f" + std::to_string(e);
    hello(peer, "ep-" + peer, "h" + std::to_string(3 + e % 5));
    std::vector<wire::EndpointEvent> starts;
    for (std::uint64_t k = 1; k <= 400; ++k) {
      starts.push_back(start_of(k, static_cast<std::uint32_t>(3 + e % 5), 0));
      std::get<wire::FlowletStart>(starts.back()).tenant = "batch";  // the policy book records it too
    }
    send(peer, std::move(starts));
  }
  const auto flood = settle();
  ASSERT_EQ(alloc_->num_flows(), 8001u) << (errors_to(flood, "f0").empty() ? "" : errors_to(flood, "f0")[0].text);
  only_b_heartbeats_past_the_timeout();
  settle();
  ASSERT_EQ(alloc_->num_flows(), 1u);
  EXPECT_GE(alloc_->engine().id_bound(), 8001u);
  // When: compacted.
  ASSERT_TRUE(alloc_->compact_if_sparse());
  EXPECT_EQ(alloc_->counters().compactions, 1u);
  // Expect: b's flow (the first id) is all that is left of the range.
  EXPECT_EQ(alloc_->engine().id_bound(), 1u);
  EXPECT_FALSE(alloc_->compact_if_sparse());
  // And service goes on: a second flowlet into h2 halves b's rate, and b's
  // end gives the newcomer the whole link.
  hello("c", "ep-c", "h0");
  auto late = start_of(7, 0, 2);
  late.tenant = "web";
  send("c", {late});
  auto rates = last_rates(settle());
  EXPECT_NEAR(static_cast<double>(rates.at({"b", 1})), share(2), share(2) * 0.01);
  EXPECT_NEAR(static_cast<double>(rates.at({"c", 7})), share(2), share(2) * 0.01);
  send("b", {wire::FlowletEnd{1}});
  rates = last_rates(settle());
  EXPECT_NEAR(static_cast<double>(rates.at({"c", 7})), share(1), share(1) * 0.01);
  EXPECT_EQ(alloc_->num_flows(), 1u);
}

// Rate items a run of starts and ends costs, settling after each event
// (settle() steps 10 us per iteration), and the rates last told.
struct Churn {
  std::size_t items = 0;
  std::map<std::pair<std::string, std::uint64_t>, std::uint64_t> rates;
};

// With an update interval, the iterations between two passes coalesce: a
// flow is told where its rate went rather than each step there, so the
// same churn costs fewer rate items, and the settled rates (the pass that
// ends a settle always goes out) are the same as without it. Cuts never
// wait, so after every message the rates endpoints hold fit every link.
TEST_F(AllocatorTest, AnUpdateIntervalCoalescesIterationsAndSettlesTheSame) {
  const auto churn = [&](std::uint64_t interval_us) {
    AllocatorConfig c = config();
    c.update_interval_us = interval_us;
    make(c);
    hello("a", "ep-a", "h0");
    hello("b", "ep-b", "h2");
    Churn out;
    std::map<std::uint64_t, std::uint64_t> held;  // by key: what its endpoint holds
    const auto count = [&](const std::vector<Outgoing>& o) {
      for (const auto& m : o) {
        out.items += m.message.rates.size();
        for (const auto& u : m.message.rates) held[u.flow_key] = u.bytes_per_sec;
        // After every message, the rates held fit each host's links.
        std::map<int, double> up, down;
        for (const auto& [key, rate] : held) {
          up[key < 100 ? 0 : 2] += static_cast<double>(rate);
          down[1 + static_cast<int>(key % 100) % 3] += static_cast<double>(rate);
        }
        for (const auto* links : {&up, &down}) {
          for (const auto& [h, sum] : *links) EXPECT_LE(sum, kGbps / 8 * 1.0001) << "host " << h;
        }
      }
      for (const auto& [k, v] : last_rates(o)) out.rates[k] = v;
    };
    for (std::uint32_t k = 0; k < 6; ++k) {
      send("a", {start_of(k, 0, 1 + k % 3, 1.0f + static_cast<float>(k))});
      send("b", {start_of(100 + k, 2, 1 + k % 3)});
      count(settle());
    }
    for (std::uint32_t k = 0; k < 3; ++k) {
      send("a", {wire::FlowletEnd{k}});
      held.erase(k);
      count(settle());
    }
    EXPECT_EQ(alloc_->counters().rate_passes_deferred > 0, interval_us > 0);
    return out;
  };
  const Churn every = churn(0);
  const Churn coalesced = churn(100'000);
  EXPECT_LT(coalesced.items, every.items);
  ASSERT_EQ(coalesced.rates.size(), every.rates.size());
  for (const auto& [k, v] : every.rates) {
    if (v == 0) continue;  // an ended flow
    EXPECT_NEAR(static_cast<double>(coalesced.rates.at(k)), static_cast<double>(v), static_cast<double>(v) * 0.011)
        << k.first << " " << k.second;
  }
}

TEST_F(AllocatorTest, SmallMovesAreSuppressedAndTheSlackCannotOverAllocate) {
  AllocatorConfig c = config();
  c.threshold = 0.05;
  make(c);
  hello("a", "ep-a", "h0");
  // Given: 30 flows from h0 to h1 (h0's uplink is the bottleneck).
  std::vector<wire::EndpointEvent> starts;
  for (std::uint32_t k = 0; k < 30; ++k) starts.push_back(start_of(100 + k, 0, 1 + k % 7));
  send("a", starts);
  auto told = last_rates(settle());
  ASSERT_EQ(told.size(), 30u);
  // When: a 31st flow joins; every share moves by 1/31 = 3.2% < 5%.
  send("a", {start_of(30, 0, 1)});
  const auto out = settle();
  // Expect: only the newcomer is told a rate.
  const auto update = last_rates(out);
  ASSERT_EQ(update.size(), 1u);
  EXPECT_TRUE(update.contains({"a", 30}));
  EXPECT_GT(alloc_->counters().rate_updates_suppressed, 0u);
  // And the rates the endpoint now holds (stale ones included) fit the real link.
  told.merge(std::map(update));
  double sum = 0;
  for (const auto& [k, r] : told) sum += static_cast<double>(r);
  EXPECT_LE(sum * 8, kGbps * 1.0001);
}

// Early rates (AllocatorConfig::early_rates): a start is answered with its
// rate at the prices of the moment before the turn's iteration, and the
// iteration corrects it only where it moved past the threshold.
TEST_F(AllocatorTest, AStartIsToldItsRateBeforeTheIteration) {
  hello("a", "ep-a", "h0");
  // Given: 20 settled flows from h0 (its uplink the bottleneck),
  std::vector<wire::EndpointEvent> starts;
  for (std::uint32_t k = 0; k < 20; ++k) starts.push_back(start_of(100 + k, 0, 1 + k % 7));
  send("a", starts);
  settle();
  // When: a 21st starts and the server asks for early rates, before iterating,
  send("a", {start_of(7, 0, 3)});
  EXPECT_EQ(alloc_->tell_early_rates(now_), 1u);
  // Expect: the newcomer is told a rate at once, close to its share of 21
  // (the prices settled for 20 barely move for one more),
  const auto early = last_rates(alloc_->take_outbox());
  ASSERT_EQ(early.size(), 1u);
  const double told = static_cast<double>(early.at({"a", 7}));
  EXPECT_NEAR(told, share(21), share(21) * 0.05);
  // and once settled, the rates the endpoint holds fit the link, and its
  // rate is its share.
  const auto rest = last_rates(settle());
  const std::uint64_t final_rate = rest.contains({"a", 7}) ? rest.at({"a", 7}) : early.at({"a", 7});
  EXPECT_NEAR(static_cast<double>(final_rate), share(21), share(21) * 0.01);
  EXPECT_EQ(alloc_->counters().early_rates, 1u);
  EXPECT_EQ(alloc_->counters().early_rates_corrected, rest.contains({"a", 7}) ? 1u : 0u);
  // Asking again tells nothing: the list empties when read.
  EXPECT_EQ(alloc_->tell_early_rates(now_), 0u);
}

TEST_F(AllocatorTest, NoEarlyRateForAFlowletThatEndedOrWhenTurnedOff) {
  hello("a", "ep-a", "h0");
  // A start and its end in one turn leave nothing to tell.
  send("a", {start_of(1, 0, 1), wire::FlowletEnd{1}});
  EXPECT_EQ(alloc_->tell_early_rates(now_), 0u);
  EXPECT_TRUE(last_rates(alloc_->take_outbox()).empty());
  // Turned off, the iteration is the first to rate a start.
  AllocatorConfig c = config();
  c.early_rates = false;
  make(c);
  hello("a", "ep-a", "h0");
  send("a", {start_of(2, 0, 1)});
  EXPECT_EQ(alloc_->tell_early_rates(now_), 0u);
  EXPECT_TRUE(last_rates(alloc_->take_outbox()).empty());
  EXPECT_EQ(last_rates(settle()).size(), 1u);
  EXPECT_EQ(alloc_->counters().early_rates, 0u);
}

// Told early, then ended and compacted away before the iteration checks
// them: the check skips ids the tables no longer hold (found by
// allocator_fuzz; the sanitizer builds catch a read past them).
TEST_F(AllocatorTest, EarlyRatesOfFlowletsCompactedAwayAreNotChecked) {
  hello("a", "ep-a", "h0");
  std::vector<wire::EndpointEvent> starts, ends;
  for (std::uint64_t k = 1; k <= 64; ++k) {
    starts.push_back(start_of(k, 0, 1 + k % 7));
    ends.push_back(wire::FlowletEnd{k});
  }
  send("a", starts);
  ASSERT_EQ(alloc_->tell_early_rates(now_), 64u);
  send("a", ends);
  ASSERT_TRUE(alloc_->compact_if_sparse(/*min_room=*/0));
  send("a", {start_of(100, 0, 1)});
  settle();
  EXPECT_EQ(alloc_->num_flows(), 1u);
  EXPECT_EQ(alloc_->counters().early_rates_corrected, 0u);
}

TEST_F(AllocatorTest, AnEarlyRateFollowsTheCoflowPlan) {
  // Given an 8 MB coflow settled alone on h0 -> h1 under SEBF,
  AllocatorConfig c = config();
  c.coflow_policy = alloc::CoflowPolicy::kSebf;
  make(c);
  hello("a", "ep-a", "h0");
  auto big = start_of(1, 0, 1);
  big.coflow_id = 2;
  big.bytes = 8 << 20;
  send("a", {big});
  settle();
  // When a 1 MB coflow starts on the same path,
  auto small = start_of(2, 0, 1);
  small.coflow_id = 1;
  send("a", {small});
  ASSERT_EQ(alloc_->tell_early_rates(now_), 1u);
  const double early = static_cast<double>(last_rates(alloc_->take_outbox()).at({"a", 2}));
  // Expect: its early rate is already the ordered one (well above an even
  // split of the link), within 10% of where it settles.
  const auto rest = last_rates(settle());
  const double settled = rest.contains({"a", 2}) ? static_cast<double>(rest.at({"a", 2})) : early;
  EXPECT_GT(early, share(2) * 1.2);
  EXPECT_NEAR(early, settled, settled * 0.1);
}

TEST_F(AllocatorTest, HeadroomIsKeptOnEveryLink) {
  AllocatorConfig c = config();
  c.headroom = 0.2;
  make(c);
  hello("p", "ep", "h0");
  send("p", {start_of(1, 0, 1), start_of(2, 0, 2)});
  const auto rates = last_rates(settle());
  // h0's uplink is shared: each gets half of 1 Gbit/s x (1 - 0.01) x (1 - 0.2).
  const double want = kGbps * 0.99 * 0.8 / 8 / 2;
  EXPECT_NEAR(static_cast<double>(rates.at({"p", 1})), want, want * 0.01);
  EXPECT_NEAR(static_cast<double>(rates.at({"p", 2})), want, want * 0.01);
  EXPECT_NEAR(alloc_->scheduled_capacity_bps(0), kGbps * 0.99 * 0.8, 1);
}

// --mpi-gather-threshold's slack: rank 0 holds others' rates within it, so
// every link is scheduled that much lower as well.
TEST_F(AllocatorTest, AViewSlackLowersEveryScheduledCapacity) {
  AllocatorConfig c = config();
  c.headroom = 0;
  c.view_slack = 0.02;
  make(c);
  hello("p", "ep", "h0");
  send("p", {start_of(1, 0, 1)});
  const auto rates = last_rates(settle());
  const double want = kGbps * 0.99 * 0.98 / 8;
  EXPECT_NEAR(static_cast<double>(rates.at({"p", 1})), want, want * 0.01);
  EXPECT_NEAR(alloc_->scheduled_capacity_bps(0), kGbps * 0.99 * 0.98, 1);
  c.view_slack = 0.6;
  EXPECT_THROW(make(c), ConfigError);
}

TEST_F(AllocatorTest, EventsBeforeHelloAreRefusedAsNotRegistered) {
  send("stranger", {start_of(1, 0, 1)});
  const auto out = settle();
  const auto errs = errors_to(out, "stranger");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].code, ErrorCode::kNotRegistered);
  EXPECT_EQ(errors(Cause::kNotRegistered), 1u);
  EXPECT_EQ(alloc_->num_flows(), 0u);
}

TEST_F(AllocatorTest, OtherProtocolVersionGetsAClearError) {
  capnp::MallocMessageBuilder b;
  auto root = b.initRoot<wire::schema::EndpointMessage>();
  root.setVersion(9);
  root.initEvents(1)[0].setHeartbeat();
  kj::VectorOutputStream stream;
  capnp::writePackedMessage(stream, b);
  auto bytes = stream.getArray();
  alloc_->on_message("future", {bytes.begin(), bytes.size()}, now_);
  const auto errs = errors_to(alloc_->take_outbox(), "future");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].code, ErrorCode::kUnsupportedVersion);
  EXPECT_NE(errs[0].text.find("version 9"), std::string::npos) << errs[0].text;
  EXPECT_EQ(errors(Cause::kUnsupportedVersion), 1u);
}

TEST_F(AllocatorTest, MalformedAndEmptyFramesAreCountedAndAnswered) {
  hello("p", "ep", "h0");
  const std::uint8_t junk[] = {0xff, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08};
  alloc_->on_message("p", junk, now_);
  alloc_->on_message("p", {}, now_);
  alloc_->on_bad_frames("p", 3, now_);
  const auto errs = errors_to(alloc_->take_outbox(), "p");
  ASSERT_EQ(errs.size(), 3u);
  EXPECT_EQ(errors(Cause::kMalformed), 1u);
  EXPECT_EQ(errors(Cause::kTruncated), 1u);
  EXPECT_EQ(errors(Cause::kBadFrames), 1u);
  // The endpoint is still served.
  send("p", {start_of(1, 0, 1)});
  EXPECT_EQ(last_rates(settle()).size(), 1u);
}

TEST_F(AllocatorTest, RefusalsAreLoggedOncePerCausePerInterval) {
  for (int i = 0; i < 100; ++i) alloc_->on_message("p", {}, now_);
  now_ += 2'000'000;
  alloc_->on_message("p", {}, now_);
  int refusal_lines = 0;
  for (const auto& l : lines_) refusal_lines += l.find("refused (truncated)") != std::string::npos;
  EXPECT_EQ(refusal_lines, 2);
  EXPECT_NE(lines_.back().find("99 more"), std::string::npos) << lines_.back();
  EXPECT_EQ(errors(Cause::kTruncated), 101u);
}

TEST_F(AllocatorTest, UnknownFlowEndNamesTheKey) {
  hello("p", "ep", "h0");
  send("p", {wire::FlowletEnd{99}});
  const auto errs = errors_to(alloc_->take_outbox(), "p");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].code, ErrorCode::kUnknownFlow);
  EXPECT_EQ(errs[0].flow_key, 99u);
}

TEST_F(AllocatorTest, UnknownHostIsRejectedOrAddedAsConfigured) {
  hello("p", "ep", "nowhere");
  auto errs = errors_to(alloc_->take_outbox(), "p");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].code, ErrorCode::kUnknownHost);
  EXPECT_EQ(alloc_->num_endpoints(), 0u);

  AllocatorConfig c = config();
  c.unknown_hosts = UnknownHosts::kAdd;
  make(c, 2, 1);
  hello("p", "ep", "10.0.0.9");
  hello("q", "eq", "another");  // no slot left
  EXPECT_EQ(alloc_->num_endpoints(), 1u);
  errs = errors_to(alloc_->take_outbox(), "q");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].code, ErrorCode::kUnknownHost);
  // A flow by 5-tuple to a configured host's... the added host sends to h0.
  wire::FlowletStart s;
  s.flow_key = 5;
  s.endpoints = wire::FiveTuple{0x0a000009, 0, 1000, 80, 6};
  send("p", {s});  // dst 0.0.0.0 is unknown and there is no slot: refused
  errs = errors_to(alloc_->take_outbox(), "p");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].code, ErrorCode::kUnknownHost);
  send("p", {start_of(6, 2, 0)});
  EXPECT_EQ(last_rates(settle()).size(), 1u);
}

// Added hosts give their slots back once no endpoint and no flow uses them:
// peers naming ever new hosts cannot use up the slots (before: 1,100 hellos
// took all 1,024 and every new host was refused until a restart).
TEST_F(AllocatorTest, AddedHostSlotsComeBackWhenNothingUsesThem) {
  AllocatorConfig c = config();
  c.unknown_hosts = UnknownHosts::kAdd;
  make(c, 2, 2);
  const auto network = [&]() -> const Network& { return alloc_->network(); };
  // Given: two endpoints on two added hosts fill both spare slots.
  hello("a", "ea", "x1");
  hello("b", "eb", "x2");
  EXPECT_EQ(network().spare_slots(), 0u);
  hello("c", "ec", "x3");
  EXPECT_EQ(errors_to(alloc_->take_outbox(), "c").size(), 1u);
  // When: a's endpoint times out (b heartbeats), its host's slot comes back.
  only_b_heartbeats_past_the_timeout();
  EXPECT_EQ(network().spare_slots(), 1u);
  EXPECT_FALSE(network().find_host("x1").has_value());
  EXPECT_EQ(alloc_->counters().hosts_released, 1u);
  // Then a new host takes it; a configured host never goes.
  hello("c", "ec", "x3");
  EXPECT_EQ(alloc_->num_endpoints(), 2u);
  EXPECT_TRUE(network().find_host("x3").has_value());
  EXPECT_TRUE(network().find_host("h0").has_value());
  // A refused hello leaves no slot behind: the endpoint limit refuses d
  // after its host was added.
  c.max_endpoints = 1;
  make(c, 2, 2);
  hello("a", "ea", "x1");
  hello("d", "ed", "x4");
  EXPECT_EQ(alloc_->num_endpoints(), 1u);
  EXPECT_EQ(network().spare_slots(), 1u);
  EXPECT_FALSE(network().find_host("x4").has_value());
}

TEST_F(AllocatorTest, AHostAddedAsADestinationGoesWithItsLastFlow) {
  AllocatorConfig c = config();
  c.unknown_hosts = UnknownHosts::kAdd;
  make(c, 2, 1);
  hello("p", "ep", "h0");
  wire::FlowletStart s;
  s.flow_key = 1;
  s.endpoints = wire::FiveTuple{0x0a000001u, 0x0a000909u, 40000, 80, 6};  // to 10.0.9.9
  s.bytes = 1 << 20;
  send("p", {s});
  EXPECT_EQ(alloc_->num_flows(), 1u);
  EXPECT_EQ(alloc_->network().spare_slots(), 0u);
  // A second flow to it holds the host after the first ends.
  s.flow_key = 2;
  s.endpoints = wire::FiveTuple{0x0a000001u, 0x0a000909u, 40001, 80, 6};
  send("p", {s});
  send("p", {wire::FlowletEnd{1}});
  EXPECT_TRUE(alloc_->network().find_host("10.0.9.9").has_value());
  settle();
  const alloc::LinkId down = alloc_->network().topology().host_downlink(2);
  EXPECT_NE(alloc_->engine().price(down), 1.0);  // priced while the flows ran
  send("p", {wire::FlowletEnd{2}});
  EXPECT_EQ(alloc_->num_flows(), 0u);
  EXPECT_EQ(alloc_->network().spare_slots(), 1u);
  // The slot's links start over at the engine's initial price.
  EXPECT_EQ(alloc_->engine().price(down), 1.0);
  EXPECT_FALSE(alloc_->network().find_host_by_ip(0x0a000909u).has_value());
  // A host pair may not name the released slot.
  send("p", {start_of(3, 0, 2)});
  const auto errs = errors_to(alloc_->take_outbox(), "p");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].code, ErrorCode::kUnknownHost);
  // The slot takes the next new destination, and rates flow to it.
  s.flow_key = 4;
  s.endpoints = wire::FiveTuple{0x0a000001u, 0x0a000a0au, 40002, 80, 6};  // 10.0.10.10
  send("p", {s});
  EXPECT_EQ(last_rates(settle()).size(), 1u);
  EXPECT_EQ(alloc_->network().host_name(2), "10.0.10.10");
}

// One source cannot take every spare slot: a peer address's hellos may add
// at most max_hosts_per_source hosts, and so may one host's flows as
// destinations; others still add theirs, and a source's slots count
// against it until they are released.
TEST_F(AllocatorTest, OneSourceAddsAtMostItsQuotaOfHosts) {
  AllocatorConfig c = config();
  c.unknown_hosts = UnknownHosts::kAdd;
  c.max_hosts_per_source = 3;
  make(c, 2, 20);
  const auto network = [&]() -> const Network& { return alloc_->network(); };
  const auto hello_from = [&](const std::string& peer, const std::string& host,
                              std::string_view address) {
    send(peer, {wire::Hello{"e-" + peer, host}}, address);
  };
  // Given: address A names three new hosts, then a fourth.
  for (int i = 0; i < 4; ++i) hello_from("a" + std::to_string(i), "x" + std::to_string(i), "10.9.0.1");
  EXPECT_EQ(alloc_->num_endpoints(), 3u);
  EXPECT_FALSE(network().find_host("x3").has_value());
  auto errs = errors_to(alloc_->take_outbox(), "a3");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].code, ErrorCode::kUnknownHost);
  EXPECT_NE(errs[0].text.find("address 10.9.0.1 holds 3 added hosts"), std::string::npos) << errs[0].text;
  // Its endpoints on hosts it already added are not hosts added.
  hello_from("a9", "x0", "10.9.0.1");
  EXPECT_EQ(alloc_->num_endpoints(), 4u);
  // Another address still adds hosts.
  hello_from("b0", "y0", "10.9.0.2");
  EXPECT_TRUE(network().find_host("y0").has_value());
  // A host's flows add destinations within the same quota: b0 on y0
  // starts flows to four unknown addresses; the fourth is refused and
  // runs unpaced.
  (void)alloc_->take_outbox();
  std::vector<wire::EndpointEvent> starts;
  for (std::uint32_t i = 0; i < 4; ++i) {
    wire::FlowletStart f;
    f.flow_key = i + 1;
    f.endpoints = wire::FiveTuple{0, 0x0a000a00u + i, 40000, 80, 6};  // to 10.0.10.i
    f.bytes = 1 << 20;
    starts.emplace_back(f);
  }
  send("b0", starts, "10.9.0.2");
  EXPECT_EQ(alloc_->num_flows(), 2u);  // y0 itself counts against 10.9.0.2
  errs = errors_to(alloc_->take_outbox(), "b0");
  ASSERT_EQ(errs.size(), 2u);
  EXPECT_NE(errs[0].text.find("holds 3 added hosts"), std::string::npos) << errs[0].text;
  // When a flow ends its destination's slot comes back to the source.
  send("b0", {wire::FlowletEnd{1}}, "10.9.0.2");
  EXPECT_FALSE(network().find_host_by_ip(0x0a000a00u).has_value());
  send("b0", {starts[3]}, "10.9.0.2");
  EXPECT_EQ(alloc_->num_flows(), 2u);
  EXPECT_TRUE(network().find_host_by_ip(0x0a000a03u).has_value());
  // And when A's endpoints time out (b0 heartbeats), its hosts go and A
  // may add hosts again.
  for (int step = 1; step <= 14; ++step) {
    now_ += 300'000;
    send("b0", {wire::Heartbeat{}}, "10.9.0.2");
    alloc_->on_timer(now_);
  }
  EXPECT_EQ(alloc_->num_endpoints(), 1u);
  EXPECT_FALSE(network().find_host("x0").has_value());
  hello_from("a5", "x5", "10.9.0.1");
  EXPECT_TRUE(network().find_host("x5").has_value());
  // 0: no quota.
  c.max_hosts_per_source = 0;
  make(c, 2, 20);
  for (int i = 0; i < 10; ++i) hello_from("a" + std::to_string(i), "x" + std::to_string(i), "10.9.0.1");
  EXPECT_EQ(alloc_->num_endpoints(), 10u);
}

// Endpoints that go silent together time out together: one log line per
// interval (1 s in this fixture), the next saying how many were not logged.
TEST_F(AllocatorTest, TimeoutsOfManyEndpointsAreLoggedOncePerInterval) {
  AllocatorConfig c = config();
  c.unknown_hosts = UnknownHosts::kAdd;
  make(c, 2, 200);
  for (int i = 0; i < 100; ++i) {
    hello("p" + std::to_string(i), "e" + std::to_string(i), "x" + std::to_string(i));
  }
  hello("b", "eb", "h0");
  lines_.clear();
  only_b_heartbeats_past_the_timeout();
  const auto timeouts = [&] {
    return std::count_if(lines_.begin(), lines_.end(),
                         [](const std::string& l) { return l.find("timed out") != std::string::npos; });
  };
  EXPECT_EQ(alloc_->counters().endpoints_timed_out, 100u);
  EXPECT_EQ(timeouts(), 1);
  // The next one, past the interval, carries the count of those not logged.
  hello("q", "eq", "h1");
  lines_.clear();
  only_b_heartbeats_past_the_timeout();
  ASSERT_EQ(timeouts(), 1);
  const auto line = std::find_if(lines_.begin(), lines_.end(), [](const std::string& l) {
    return l.find("timed out") != std::string::npos;
  });
  EXPECT_NE(line->find("[99 more of this kind not logged]"), std::string::npos) << *line;
  // All 100 added hosts went back.
  EXPECT_EQ(alloc_->network().spare_slots(), 200u);
}

// flowtune-ctl's flows page is written as text by hand: peers' strings come
// out escaped (invalid UTF-8 replaced), numbers as numbers, and the page
// parses to what the allocator holds.
TEST_F(AllocatorTest, TheFlowsPageIsValidJsonWhateverPeersNamed) {
  hello("p", "ep-\xc3\xa9", "h0");  // "ep-é"
  wire::FlowletStart s = start_of(7, 0, 1);
  s.tenant = "a\"b\\c\x01d\xff\xf8\x80\x80\xf5\x80\x80\x80\xc3\xa9";
  s.weight = 2.5f;
  send("p", {s, start_of(8, 0, 2)});
  settle();
  const std::string text = ctl("flows 1");
  const auto j = nlohmann::json::parse(text);  // throws on invalid JSON
  ASSERT_EQ(j["flows"].size(), 1u);
  const auto& f = j["flows"][0];
  EXPECT_EQ(f["endpoint"], "ep-\xc3\xa9");
  // Each invalid byte (a lone 0xff; 0xf8 and 0xf5, which lead no UTF-8
  // sequence, and their continuation bytes) becomes U+FFFD; a valid "é" stays.
  std::string want = "a\"b\\c\x01d";
  for (int i = 0; i < 1 + 3 + 4; ++i) want += "\xef\xbf\xbd";
  EXPECT_EQ(f["tenant"], want + "\xc3\xa9");
  EXPECT_EQ(f["key"], 7);
  EXPECT_EQ(f["weight"], 2.5);
  EXPECT_EQ(f["path"], (nlohmann::json{"h0.up", "h1.down"}));
  EXPECT_EQ(j["total"], 2);
  EXPECT_TRUE(j["next"].is_number());
  const auto last = nlohmann::json::parse(
      ctl("flows 5 " + std::to_string(j["next"].get<int>())));
  ASSERT_EQ(last["flows"].size(), 1u);
  EXPECT_EQ(last["flows"][0]["key"], 8);
  EXPECT_TRUE(last["next"].is_null());
}

// Endpoints and links page as flows do: every item exactly once across the
// pages, "total" and "epoch" on each, "next" null on the last.
TEST_F(AllocatorTest, EndpointsAndLinksComeInPages) {
  for (int i = 0; i < 5; ++i) {
    const std::string peer = "p" + std::to_string(i);
    hello(peer, "ep" + std::to_string(i), "h" + std::to_string(i % 2));
    send(peer, {start_of(1, i % 2, 2 + i % 2)});  // h0 -> h2, h1 -> h3
  }
  settle();
  for (const std::string what : {"endpoints", "links"}) {
    std::vector<std::string> seen;
    std::string from;
    for (int pages = 0; pages < 10; ++pages) {
      const auto j = nlohmann::json::parse(
          ctl(what + " 2" + from));
      ASSERT_LE(j[what].size(), 2u) << what;
      EXPECT_EQ(j["epoch"], alloc_->epoch());
      for (const auto& item : j[what]) {
        seen.push_back(item[what == "links" ? "name" : "id"].get<std::string>());
      }
      if (j["next"].is_null()) {
        EXPECT_EQ(j["total"].get<std::size_t>(), seen.size()) << what;
        break;
      }
      from = " " + std::to_string(j["next"].get<std::uint64_t>());
    }
    std::sort(seen.begin(), seen.end());
    if (what == "endpoints") {
      EXPECT_EQ(seen, (std::vector<std::string>{"ep0", "ep1", "ep2", "ep3", "ep4"}));
    } else {
      EXPECT_EQ(seen, (std::vector<std::string>{"h0.up", "h1.up", "h2.down", "h3.down"}));
    }
  }
  // Without a limit: one page of up to 500 (an older flowtune-ctl, which
  // asks without one, shows the first 500).
  const auto all = nlohmann::json::parse(ctl("endpoints"));
  EXPECT_EQ(all["endpoints"].size(), 5u);
  EXPECT_TRUE(all["next"].is_null());
}

// status, links and tenants sum over every flow: they share one pass,
// made again only after a change and at most ControlCache::kPassesPerSec a
// second, so a flood of them costs the loop a few passes a second; a lone
// request after a change sees it. Status shows the first 32 tenants; the
// tenants pages hold every one exactly once.
TEST_F(AllocatorTest, CtlRepliesShareOnePassOverTheFlows) {
  hello("p", "ep", "h0");
  std::vector<wire::EndpointEvent> starts;
  for (std::uint64_t k = 1; k <= 40; ++k) {
    wire::FlowletStart f = start_of(k, 0, 1 + k % 7);
    f.tenant = "t" + std::to_string(k);
    starts.emplace_back(f);
  }
  send("p", starts);
  settle();
  ControlCache cache;
  const auto ask = [&](const std::string& r) {
    return nlohmann::json::parse(control_reply(*alloc_, {"x", 0, {}, {}, {}}, r, now_, cache));
  };
  // A lone request sees every flow.
  auto status = ask("status");
  EXPECT_EQ(cache.passes(), 1u);
  EXPECT_EQ(status["policy"]["tenants_total"], 40);
  EXPECT_EQ(status["policy"]["tenants_shown"], 32);
  EXPECT_EQ(status["policy"]["tenants"].size(), 32u);
  EXPECT_EQ(status["policy"]["tenants"]["t1"]["flows"], 1);
  // Unchanged, a pass serves any number of requests however old it is.
  now_ += 10'000'000;
  for (int i = 0; i < 100; ++i) ask(i % 2 == 0 ? "links" : "tenants");
  EXPECT_EQ(cache.passes(), 1u);
  // A flood while flows change: at most the burst at once, then
  // kPassesPerSec a second.
  for (int i = 0; i < 200; ++i) {
    send("p", {wire::FlowletEnd{41 + static_cast<std::uint64_t>(i)}, start_of(41 + i + 1, 0, 2)});
    alloc_->iterate(now_);
    (void)ask("status");
  }
  EXPECT_EQ(cache.passes(), 1u + 4u);
  for (int i = 0; i < 200; ++i) {
    now_ += 5'000;  // a second of 200 requests
    alloc_->iterate(now_);
    ask(i % 2 == 0 ? "status" : "links");
  }
  EXPECT_LE(cache.passes(), 1u + 4u + 4u + 1u);
  EXPECT_GE(cache.passes(), 1u + 4u + 3u);
  // A lone request after a quiet second sees the change: a new flow.
  now_ += 1'000'000;
  send("p", {start_of(1000, 0, 5)});
  settle();
  EXPECT_EQ(ask("status")["flows"], alloc_->num_flows());
  const auto links = ask("links");
  std::uint64_t on_links = 0;
  for (const auto& l : links["links"]) {
    if (l["name"] == "h0.up") on_links = l["flows"].get<std::uint64_t>();
  }
  EXPECT_EQ(on_links, alloc_->num_flows());
  // Tenant pages: every tenant once, with its flows; flows in none apart.
  std::set<std::string> names;
  std::uint64_t tenant_flows = 0;
  std::string from;
  for (int pages = 0; pages < 20; ++pages) {
    const auto j = ask("tenants 7" + from);
    ASSERT_LE(j["tenants"].size(), 7u);
    for (const auto& t : j["tenants"]) {
      names.insert(t["name"].get<std::string>());
      tenant_flows += t["flows"].get<std::uint64_t>();
    }
    if (j["next"].is_null()) {
      EXPECT_EQ(j["total"], 40);
      EXPECT_EQ(tenant_flows + j["no_tenant"]["flows"].get<std::uint64_t>(), alloc_->num_flows());
      break;
    }
    from = " " + std::to_string(j["next"].get<std::uint64_t>());
  }
  EXPECT_EQ(names.size(), 40u);
}

// Progress events: the helloAck says they are read; a report grows the
// flow's bytes (never shrinks them) and re-plans the coflow order; a key
// the allocator does not hold is unknownFlow, as for a rate request.
TEST_F(AllocatorTest, ProgressGrowsAFlowAndReplansTheOrder) {
  AllocatorConfig c = config();
  c.coflow_policy = alloc::CoflowPolicy::kSebf;
  make(c);
  hello("p", "ep", "h0");
  const auto acks = alloc_->take_outbox();
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_TRUE(acks[0].message.hello_ack);
  EXPECT_TRUE(acks[0].message.progress_ok);
  // Two coflows on one path: 1 MB goes before 8 MB.
  wire::FlowletStart small = start_of(1, 0, 1), big = start_of(2, 0, 1);
  small.coflow_id = 1;
  big.coflow_id = 2;
  big.bytes = 8 << 20;
  send("p", {small, big});
  settle();
  const auto floors = [&] {
    std::map<std::uint64_t, double> f;
    for (const auto& v : alloc_->flows(now_, 10)) f[v.flow_key] = v.floor_bps;
    return f;
  };
  EXPECT_GT(floors()[1], floors()[2]);
  // The small one turns out to be 64 MB: the 8 MB coflow goes first.
  send("p", {wire::Progress{{{1, 64 << 20, 2 << 20}, {2, 1000, 0}}}});
  settle();
  EXPECT_GT(floors()[2], floors()[1]);
  EXPECT_EQ(alloc_->counters().progress, 1u);
  EXPECT_EQ(alloc_->counters().progress_flows, 2u);
  std::map<std::uint64_t, std::uint64_t> bytes;
  for (const auto& f : alloc_->flows(now_, 10)) bytes[f.flow_key] = f.bytes;
  EXPECT_EQ(bytes[1], 64u << 20);
  EXPECT_EQ(bytes[2], 8u << 20);  // a smaller report does not shrink it
  // A resync of the same flows (same epoch) carries sizes the policy takes
  // too: flow 2 grew to 1 GB while a progress report was lost.
  big.bytes = 1 << 30;
  small.bytes = 64 << 20;
  send("p", {wire::Resync{{small, big}}});
  settle();
  EXPECT_GT(floors()[1], floors()[2]);
  send("p", {wire::Progress{{{9, 10, 0}}}});
  const auto errs = errors_to(alloc_->take_outbox(), "p");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].code, ErrorCode::kUnknownFlow);
  EXPECT_EQ(errs[0].flow_key, 9u);
}

TEST_F(AllocatorTest, FlowWithinOneHostIsRefused) {
  hello("p", "ep", "h0");
  send("p", {start_of(1, 0, 0)});
  const auto errs = errors_to(alloc_->take_outbox(), "p");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].code, ErrorCode::kBadValue);
  EXPECT_EQ(alloc_->num_flows(), 0u);
}

TEST_F(AllocatorTest, PerEndpointFlowLimitHolds) {
  AllocatorConfig c = config();
  c.max_flows_per_endpoint = 3;
  make(c);
  hello("p", "ep", "h0");
  send("p", {start_of(1, 0, 1), start_of(2, 0, 1), start_of(3, 0, 1), start_of(4, 0, 1),
             start_of(1, 0, 2)});  // a repeated key replaces, so it is not over the limit
  const auto errs = errors_to(alloc_->take_outbox(), "p");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].code, ErrorCode::kTooManyFlows);
  EXPECT_EQ(errs[0].flow_key, 4u);
  EXPECT_EQ(alloc_->num_flows(), 3u);
}

TEST_F(AllocatorTest, MessageFloodIsRateLimitedPerEndpoint) {
  AllocatorConfig c = config();
  c.max_messages_per_sec = 100;  // burst of 10
  make(c);
  hello("p", "ep", "h0");
  hello("q", "eq", "h1");
  for (int i = 0; i < 50; ++i) send("p", {wire::Heartbeat{}});
  send("q", {start_of(1, 1, 2)});
  EXPECT_EQ(errors(Cause::kRateLimited), 40u);  // a burst of 10 passes
  EXPECT_EQ(alloc_->counters().heartbeats, 10u);
  // A clock that steps back refills nothing.
  send("p", {wire::Heartbeat{}});
  now_ -= 500;
  send("p", {wire::Heartbeat{}});
  EXPECT_EQ(errors(Cause::kRateLimited), 42u);
  now_ += 500;
  // The other endpoint is unaffected, and p recovers as tokens refill.
  now_ += 100'000;
  send("p", {start_of(1, 0, 3)});
  EXPECT_EQ(alloc_->num_flows(), 2u);
}

// One peer cannot fill the global tables through many endpoints: the
// endpoints of one host, and those from one peer address whatever hosts
// they name, share a quota of flows and of endpoints.
TEST_F(AllocatorTest, OneSourceIsHeldToItsQuotaOfFlowsAndEndpoints) {
  AllocatorConfig c = config();
  c.max_flows_per_source = 10;
  c.max_endpoints_per_source = 3;
  make(c, 64);
  // Given: 3 endpoints from address A on hosts h0..h2, 4 flows each.
  for (int i = 0; i < 3; ++i) {
    const std::string peer = "a" + std::to_string(i);
    send(peer, {wire::Hello{"ep-" + peer, "h" + std::to_string(i)}}, "10.9.9.9");
    for (std::uint64_t k = 1; k <= 4; ++k) {
      send(peer, {start_of(k, static_cast<std::uint32_t>(i), 40)}, "10.9.9.9");
    }
  }
  // Expect: the address holds 10 flows; 2 starts were refused.
  EXPECT_EQ(alloc_->num_flows(), 10u);
  EXPECT_EQ(errors(Cause::kTooManyFlows), 2u);
  // A fourth endpoint from A is refused, whatever host it names.
  send("a3", {wire::Hello{"ep-a3", "h9"}}, "10.9.9.9");
  EXPECT_EQ(alloc_->num_endpoints(), 3u);
  EXPECT_EQ(errors(Cause::kTooManyEndpoints), 1u);
  // Another address is unaffected; so is another host from it.
  send("b", {wire::Hello{"ep-b", "h20"}}, "10.8.8.8");
  send("b", {start_of(1, 20, 41)}, "10.8.8.8");
  EXPECT_EQ(alloc_->num_flows(), 11u);
  // Host quotas hold across addresses: h20's endpoints from elsewhere share it.
  for (std::uint64_t k = 2; k <= 12; ++k) send("b", {start_of(k, 20, 41)}, "10.8.8.8");
  send("b2", {wire::Hello{"ep-b2", "h20"}}, "10.7.7.7");
  send("b2", {start_of(1, 20, 42)}, "10.7.7.7");
  EXPECT_EQ(alloc_->num_flows(), 20u);  // h20: 10
  // When A's flows end and an endpoint leaves, its quota comes back.
  for (std::uint64_t k = 1; k <= 4; ++k) send("a0", {wire::FlowletEnd{k}}, "10.9.9.9");
  send("a2", {start_of(5, 2, 40)}, "10.9.9.9");
  EXPECT_EQ(alloc_->num_flows(), 17u);
  now_ += c.endpoint_timeout_us + c.lease_refresh_us * 2;
  for (const char* p : {"a1", "a2", "b", "b2"}) send(p, {wire::Heartbeat{}});
  alloc_->on_timer(now_);
  send("a4", {wire::Hello{"ep-a4", "h4"}}, "10.9.9.9");
  EXPECT_EQ(alloc_->num_endpoints(), 5u);  // a0 timed out: A has room again
  // Without an address (ipc: the server passes none), only the host's quota applies.
  send("c", {wire::Hello{"ep-c", "h30"}});
  for (std::uint64_t k = 1; k <= 12; ++k) send("c", {start_of(k, 30, 43)});
  EXPECT_EQ(alloc_->endpoints(now_).size(), 6u);
}

// With CURVE a key is a source too: the endpoints its holder opens share
// one quota of flows, endpoints and input bytes whatever hosts and addresses
// they use, while other keys go on; a relay's key speaks for every endpoint
// behind it, so what comes through a relay is held to host quotas only.
TEST_F(AllocatorTest, OneKeyIsHeldToItsQuotaWhateverHostsAndAddressesItUses) {
  AllocatorConfig c = config();
  c.max_flows_per_source = 10;
  c.max_endpoints_per_source = 3;
  make(c, 64);
  Principal a{"KEY-A", "tenant-a", {"*"}, true, false, {}};
  Principal b{"KEY-B", "tenant-b", {"*"}, true, false, {}};
  auto send_as = [&](const Principal& who, std::string_view peer, std::vector<wire::EndpointEvent> ev,
                     std::string_view address) {
    EndpointMessage m;
    m.events = std::move(ev);
    alloc_->on_message(peer, wire::encode(m), now_, &who, address);
  };
  // Given: key A on three hosts from three addresses, 4 flows each.
  for (int i = 0; i < 3; ++i) {
    const std::string peer = "a" + std::to_string(i);
    const std::string address = "10.9.9." + std::to_string(i);
    send_as(a, peer, {wire::Hello{"ep-" + peer, "h" + std::to_string(i)}}, address);
    for (std::uint64_t k = 1; k <= 4; ++k) {
      send_as(a, peer, {start_of(k, static_cast<std::uint32_t>(i), 40)}, address);
    }
  }
  // Expect: the key holds 10 flows; 2 starts were refused, naming it.
  EXPECT_EQ(alloc_->num_flows(), 10u);
  EXPECT_EQ(errors(Cause::kTooManyFlows), 2u);
  // A fourth endpoint under A is refused, from a new address and host.
  send_as(a, "a3", {wire::Hello{"ep-a3", "h9"}}, "10.9.9.3");
  EXPECT_EQ(alloc_->num_endpoints(), 3u);
  EXPECT_EQ(errors(Cause::kTooManyEndpoints), 1u);
  // Key B from the same addresses is unaffected.
  send_as(b, "b", {wire::Hello{"ep-b", "h20"}}, "10.9.9.0");
  send_as(b, "b", {start_of(1, 20, 41)}, "10.9.9.0");
  EXPECT_EQ(alloc_->num_flows(), 11u);
  EXPECT_EQ(alloc_->num_endpoints(), 4u);
  // Through a relay, A's key speaks for the endpoints behind it: no key quota.
  for (int i = 0; i < 4; ++i) {
    const std::string peer = wire::relayed_peer("relay1", wire::route_push("ep" + std::to_string(i), {}));
    const std::uint32_t host = 40 + static_cast<std::uint32_t>(i);
    send_as(a, peer, {wire::Hello{"ep-r" + std::to_string(i), "h" + std::to_string(host)}}, {});
    send_as(a, peer, {start_of(1, host, 50), start_of(2, host, 51)}, {});
  }
  EXPECT_EQ(alloc_->num_endpoints(), 8u);
  EXPECT_EQ(alloc_->num_flows(), 19u);
  // When A's flows end, its quota comes back.
  for (std::uint64_t k = 1; k <= 4; ++k) send_as(a, "a0", {wire::FlowletEnd{k}}, "10.9.9.0");
  send_as(a, "a2", {start_of(5, 2, 40)}, "10.9.9.2");
  EXPECT_EQ(alloc_->num_flows(), 16u);
}

// Behind a relay that vouches for each endpoint's own key (keyed batches),
// the key is the endpoint's: its quota holds across relays, and the host
// must be allowed by the relay's key as well as its own.
TEST_F(AllocatorTest, AKeyVouchedForByRelaysIsHeldToItsQuotaAndTheirHosts) {
  AllocatorConfig c = config();
  c.max_flows_per_source = 5;
  make(c, 64);
  Principal rack1{"RELAY-1", "rack1", {"h1", "h2", "h3"}, false, true, {}};
  Principal rack2{"RELAY-2", "rack2", {"h4"}, false, true, {}};
  Principal a_via1{"KEY-A", "tenant-a", {}, true, false, {&rack1}};
  Principal a_via2{"KEY-A", "tenant-a", {}, true, false, {&rack2}};
  auto send_as = [&](const Principal& who, std::string_view peer, std::vector<wire::EndpointEvent> ev) {
    EndpointMessage m;
    m.events = std::move(ev);
    alloc_->on_message(peer, wire::encode(m), now_, &who, {});
  };
  const auto peer = [](const char* relay, int i) {
    return wire::relayed_peer(relay, wire::route_push("ep" + std::to_string(i), {}));
  };
  // Given: key A on h1 through rack1 and h4 through rack2, 3 starts each.
  send_as(a_via1, peer("relay1", 1), {wire::Hello{"ep-1", "h1"}});
  send_as(a_via2, peer("relay2", 4), {wire::Hello{"ep-4", "h4"}});
  for (std::uint64_t k = 1; k <= 3; ++k) {
    send_as(a_via1, peer("relay1", 1), {start_of(k, 1, 40)});
    send_as(a_via2, peer("relay2", 4), {start_of(k, 4, 40)});
  }
  // Expect: one quota for the key, whichever relay carried it.
  EXPECT_EQ(alloc_->num_endpoints(), 2u);
  EXPECT_EQ(alloc_->num_flows(), 5u);
  EXPECT_EQ(errors(Cause::kTooManyFlows), 1u);
  // h5 is A's (any host) but not rack2's: refused.
  send_as(a_via2, peer("relay2", 5), {wire::Hello{"ep-5", "h5"}});
  EXPECT_EQ(alloc_->num_endpoints(), 2u);
  EXPECT_EQ(errors(Cause::kNotAuthorized), 1u);
}

// The input budget is per source, charged before decoding, hellos
// included; saying hello again under a new id from the same address does
// not buy a fresh budget.
TEST_F(AllocatorTest, TheInputBudgetIsPerSourceAndOutlivesItsEndpoints) {
  AllocatorConfig c = config();
  c.max_source_bytes_per_sec = 1000;
  c.source_burst_bytes = 2000;
  make(c, 64);
  auto flows_message = [&](std::uint32_t host, std::uint64_t first) {
    std::vector<wire::EndpointEvent> ev;
    for (std::uint64_t k = first; k < first + 20; ++k) ev.push_back(start_of(k, host, 40));
    return ev;
  };
  // Given: address A spends its burst.
  send("a", {wire::Hello{"ep-a", "h1"}}, "10.9.9.9");
  std::uint64_t key = 1;
  while (errors(Cause::kRateLimited) == 0 && key < 10'000) {
    send("a", flows_message(1, key), "10.9.9.9");
    key += 20;
  }
  ASSERT_EQ(errors(Cause::kRateLimited), 1u);
  const std::size_t held = alloc_->num_flows();
  // When: a new connection from A says hello under a new id, with flows.
  std::vector<wire::EndpointEvent> again = flows_message(2, 1);
  again.insert(again.begin(), wire::Hello{"ep-a2", "h2"});
  send("a2", again, "10.9.9.9");
  // Expect: refused, as A is still in debt; address B is not.
  EXPECT_EQ(errors(Cause::kRateLimited), 2u);
  EXPECT_EQ(alloc_->num_flows(), held);
  std::vector<wire::EndpointEvent> b = flows_message(3, 1);
  b.insert(b.begin(), wire::Hello{"ep-b", "h3"});
  send("b", b, "10.8.8.8");
  EXPECT_EQ(alloc_->num_flows(), held + 20);
  // A's endpoints leave (time out): its source and its debt stay until the
  // budget has refilled, then go.
  now_ += c.endpoint_timeout_us + c.lease_refresh_us * 2;
  send("b", {wire::Heartbeat{}}, "10.8.8.8");
  alloc_->on_timer(now_);
  send("a3", again, "10.9.9.9");
  EXPECT_EQ(alloc_->num_flows(), 40u);  // b's, and a3's after the refill
}

// The budget is charged what decoding costs: a frame of zero runs, which
// unpacks to far more than its size (under the codec's 64x bound or not),
// is charged a quarter of what it unpacks to; a frame that unpacks to
// little, and every legitimate message, its size.
TEST_F(AllocatorTest, TheInputBudgetIsChargedWhatDecodingCosts) {
  AllocatorConfig c = config();
  c.max_source_bytes_per_sec = 1000;
  c.source_burst_bytes = 8000;
  make(c, 8);
  // 1,000 bytes each: 500 runs of 256 zero words (unpack to 1 MB; the scan
  // stops at the 64 KiB bound), and 0xff runs of incompressible words.
  std::vector<std::uint8_t> zeros;
  for (int i = 0; i < 500; ++i) zeros.insert(zeros.end(), {0x00, 0xff});
  std::vector<std::uint8_t> dense;
  while (dense.size() + 10 <= 1000) {
    dense.push_back(0xff);
    for (int b = 0; b < 8; ++b) dense.push_back(static_cast<std::uint8_t>(0x11 + b));
    dense.push_back(0);
  }
  dense.resize(1000, 0x11);
  EXPECT_GE(wire::unpacked_bytes(zeros), 64u << 10);
  EXPECT_LT(wire::unpacked_bytes(dense), 2000u);
  EXPECT_EQ(Allocator::decode_cost(dense), dense.size());
  EXPECT_GE(Allocator::decode_cost(zeros), 16u << 10);
  const EndpointMessage start = [] {
    EndpointMessage m;
    m.events.push_back(wire::Hello{"ep", "h1"});
    for (std::uint64_t k = 1; k <= 64; ++k) m.events.push_back(start_of(k, 1, 2 + k % 6));
    return m;
  }();
  EXPECT_EQ(Allocator::decode_cost(wire::encode(start)), wire::encode(start).size());
  // Given: address A sends dense junk up to its burst (refused as
  // malformed, charged 1,000 bytes each): a hello then still passes.
  for (int i = 0; i < 6; ++i) alloc_->on_message("a", dense, now_, nullptr, "10.9.9.1");
  EXPECT_EQ(errors(Cause::kRateLimited), 0u);
  send("a", {wire::Hello{"ep-a", "h1"}}, "10.9.9.1");
  EXPECT_EQ(alloc_->num_endpoints(), 1u);
  // When: address B sends one frame of zero runs, the same size.
  alloc_->on_message("b", zeros, now_, nullptr, "10.9.9.2");
  EXPECT_EQ(errors(Cause::kRateLimited), 0u);  // passes, into debt
  // Then: B's hello is refused for that debt, though B sent 1,000 bytes.
  send("b", {wire::Hello{"ep-b", "h2"}}, "10.9.9.2");
  EXPECT_EQ(errors(Cause::kRateLimited), 1u);
  EXPECT_EQ(alloc_->num_endpoints(), 1u);
}

// A resync that replaces every flow of an endpoint at its source's quota
// finds the room the replaced flows leave.
TEST_F(AllocatorTest, AResyncThatReplacesFlowsAtTheQuotaKeepsThemAll) {
  AllocatorConfig c = config();
  c.max_flows_per_source = 100;
  make(c, 64);
  auto resync_of = [&](std::uint64_t first) {
    std::vector<wire::FlowletStart> list;
    for (std::uint64_t k = first; k < first + 100; ++k) list.push_back(start_of(k, 1, 2 + static_cast<std::uint32_t>(k % 60)));
    return std::vector<wire::EndpointEvent>{wire::Resync{list}};
  };
  hello("p", "ep", "h1");
  send("p", resync_of(1));
  ASSERT_EQ(alloc_->num_flows(), 100u);
  send("p", resync_of(101));
  EXPECT_EQ(alloc_->num_flows(), 100u);
  EXPECT_EQ(errors(Cause::kTooManyFlows), 0u);
}

// A message weighs one more for every whole 4 KB it carries: a large one
// passes on one token and leaves its sender in debt.
TEST_F(AllocatorTest, LargeMessagesCostMoreOfTheRateLimit) {
  AllocatorConfig c = config();
  c.max_messages_per_sec = 100;  // burst of 10
  make(c);
  hello("p", "ep", "h0");  // charged to strangers: the endpoint starts with 10

  EndpointMessage m;
  std::uint64_t k = 0;
  while (wire::encode(m).size() < 10 * 4096) {
    for (int i = 0; i < 100; ++i, ++k) {
      m.events.push_back(start_of(k + 1, 0, 1 + static_cast<std::uint32_t>(k % 7)));
    }
  }
  const std::size_t bytes = wire::encode(m).size();
  send("p", m.events);  // weighs 11 or more
  EXPECT_EQ(alloc_->num_flows(), k);
  EXPECT_EQ(errors(Cause::kRateLimited), 0u);
  send("p", {wire::Heartbeat{}});  // the bucket is in debt
  EXPECT_EQ(errors(Cause::kRateLimited), 1u);
  // The debt (the message's weight less the 10 tokens it found) is paid at
  // 100 tokens/s before one more message passes.
  const double debt = static_cast<double>(1 + bytes / 4096) - 10;
  now_ += static_cast<std::uint64_t>((debt + 1) * 1e6 / 100) - 1000;
  send("p", {wire::Heartbeat{}});
  EXPECT_EQ(errors(Cause::kRateLimited), 2u);
  now_ += 2000;
  send("p", {wire::Heartbeat{}});
  EXPECT_EQ(errors(Cause::kRateLimited), 2u);
}

// A flooding endpoint is told it is over its rate limit once per quiet
// time (100 ms), not once per message: every refusal is counted, but only
// the first of a run costs the loop a reply.
TEST_F(AllocatorTest, RateLimitedEndpointsAreToldOncePerQuietTime) {
  AllocatorConfig c = config();
  c.max_messages_per_sec = 100;  // burst of 10
  make(c);
  hello("p", "ep", "h0");
  (void)alloc_->take_outbox();
  const auto told = [&] {
    std::size_t n = 0;
    for (const auto& o : alloc_->take_outbox()) {
      for (const auto& e : o.message.errors) n += e.code == wire::ErrorCode::kRateLimited;
    }
    return n;
  };
  for (int i = 0; i < 50; ++i) send("p", {wire::Heartbeat{}});  // 40 over the burst
  EXPECT_EQ(errors(Cause::kRateLimited), 40u);
  EXPECT_EQ(told(), 1u);
  now_ += 100'000;  // past the quiet time; the 10 tokens it earned go first
  for (int i = 0; i < 20; ++i) send("p", {wire::Heartbeat{}});
  EXPECT_EQ(errors(Cause::kRateLimited), 50u);
  EXPECT_EQ(told(), 1u);
}

TEST_F(AllocatorTest, LiveLeasesAreRefreshedPeriodically) {
  hello("p", "ep", "h0");
  send("p", {start_of(1, 0, 1)});
  settle();
  hello("idle", "ep-idle", "h2");  // no flows: no refresh owed
  // A hello is acknowledged with an empty message carrying the epoch.
  auto ack = alloc_->take_outbox();
  ASSERT_EQ(ack.size(), 1u);
  EXPECT_EQ(ack[0].peer, "idle");
  EXPECT_EQ(ack[0].message.epoch, 42u);
  EXPECT_TRUE(ack[0].message.rates.empty() && ack[0].message.errors.empty());
  now_ += 300'000;
  ASSERT_LE(alloc_->next_timer_us(), now_);
  alloc_->on_timer(now_);
  const auto out = alloc_->take_outbox();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].peer, "p");
  EXPECT_EQ(out[0].message.lease_refresh_us, 1'000'000u);
  EXPECT_GT(alloc_->next_timer_us(), now_);
}

TEST_F(AllocatorTest, ATickIsSpreadOverTurnsAndStillReachesEveryEndpoint) {
  // Given: a tick's scan may visit 10 flows (and endpoints) a call; six
  // endpoints hold 8 flows each, and two more have gone silent.
  AllocatorConfig c = config();
  c.timer_slice = 10;
  make(c, 16);
  for (std::uint32_t h = 0; h < 8; ++h) {
    const std::string peer = "p" + std::to_string(h);
    hello(peer, "ep" + std::to_string(h), "h" + std::to_string(h));
    std::vector<wire::EndpointEvent> starts;
    for (std::uint64_t k = 1; k <= 8; ++k) starts.emplace_back(start_of(k, h, 8 + k % 8));
    send(peer, std::move(starts));
  }
  settle();
  // When: ticks fall due while only p0..p5 keep talking, past the silent
  // ones' timeout.
  std::uint64_t turns = 0;
  std::set<std::string> refreshed;
  for (int tick = 0; tick < 11; ++tick) {
    now_ += 300'000;
    for (std::uint32_t h = 0; h < 6; ++h) send("p" + std::to_string(h), {wire::Heartbeat{}});
    alloc_->take_outbox();
    const std::uint64_t due = now_;
    ASSERT_LE(alloc_->next_timer_us(), now_);
    refreshed.clear();
    // Each call is a server turn: it comes back (next_timer_us() is now)
    // until the scan is done.
    for (int turn = 0; alloc_->next_timer_us() <= now_; ++turn) {
      ASSERT_LT(turn, 100) << "the scan does not finish";
      const std::uint64_t before = alloc_->counters().lease_refreshes;
      alloc_->on_timer(now_);
      // 9 flows and endpoints each: one fits the slice of 10, two do not.
      EXPECT_LE(alloc_->counters().lease_refreshes - before, 1u) << "one call refreshed past its slice";
      for (const auto& o : alloc_->take_outbox()) {
        if (o.message.lease_refresh_us > 0) refreshed.insert(o.peer);
      }
      ++turns;
    }
    // Expect: the tick keeps its period, and every endpoint still talking
    // had its refresh.
    EXPECT_EQ(alloc_->next_timer_us(), due + 300'000);
    for (std::uint32_t h = 0; h < 6; ++h) {
      EXPECT_TRUE(refreshed.contains("p" + std::to_string(h))) << "tick " << tick << ", p" << h;
    }
  }
  EXPECT_GE(turns, 11u * 6) << "each tick should take a call per endpoint at 10 flows a call";
  // And the silent endpoints timed out with their flows.
  EXPECT_EQ(alloc_->counters().endpoints_timed_out, 2u);
  EXPECT_EQ(alloc_->counters().flows_expired, 16u);
  EXPECT_EQ(alloc_->num_flows(), 6u * 8);
}

TEST_F(AllocatorTest, AfterAFailedSendTheNextRefreshCarriesEveryRate) {
  hello("p", "ep", "h0");
  send("p", {start_of(1, 0, 1), start_of(2, 0, 2)});
  settle();
  // Given: the server could not deliver a message to p (queue full, or gone).
  alloc_->on_send_failed("p");
  // When: the next lease refresh is due.
  now_ += 300'000;
  alloc_->on_timer(now_);
  // Expect: it renews the lease and repeats both current rates.
  const auto out = alloc_->take_outbox();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].message.lease_refresh_us, 1'000'000u);
  EXPECT_EQ(out[0].message.rates.size(), 2u);
  // Only once: the following refresh is a bare lease extension again.
  now_ += 300'000;
  send("p", {wire::Heartbeat{}});
  alloc_->on_timer(now_);
  const auto again = alloc_->take_outbox();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_TRUE(again[0].message.rates.empty());
}

TEST_F(AllocatorTest, NoRefreshLetsRatesOutliveTheEndpointsDeadline) {
  hello("p", "ep", "h0");
  send("p", {start_of(1, 0, 1)});
  settle();
  const std::uint64_t heard = now_;
  // Ticks until the deadline (3 s after last heard): refreshes stop once a
  // 1 s lease would run past it.
  std::uint64_t last_refresh = 0;
  for (std::uint64_t t = heard + 300'000; t < heard + 3'000'000; t += 300'000) {
    alloc_->on_timer(t);
    for (const auto& o : alloc_->take_outbox()) {
      if (o.message.lease_refresh_us > 0) last_refresh = t;
    }
  }
  ASSERT_GT(last_refresh, 0u);
  EXPECT_LE(last_refresh + 1'000'000, heard + 3'000'000);
}

TEST_F(AllocatorTest, TotalFlowLimitHolds) {
  AllocatorConfig c = config();
  c.max_flows = 2;
  make(c);
  hello("p", "ep", "h0");
  hello("q", "eq", "h1");
  send("p", {start_of(1, 0, 2), start_of(2, 0, 3)});
  send("q", {start_of(1, 1, 2)});
  const auto errs = errors_to(alloc_->take_outbox(), "q");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].code, ErrorCode::kTooManyFlows);
  EXPECT_EQ(alloc_->num_flows(), 2u);
}

TEST_F(AllocatorTest, SilentEndpointLosesItsFlowsAndOthersGetTheCapacity) {
  hello("a", "ep-a", "h0");
  hello("b", "ep-b", "h1");
  send("a", {start_of(1, 0, 2)});
  send("b", {start_of(1, 1, 2)});
  settle();
  only_b_heartbeats_past_the_timeout();
  EXPECT_EQ(alloc_->num_endpoints(), 1u);
  EXPECT_EQ(alloc_->counters().endpoints_timed_out, 1u);
  EXPECT_EQ(alloc_->counters().flows_expired, 1u);
  const auto rates = last_rates(settle());
  EXPECT_NEAR(static_cast<double>(rates.at({"b", 1})), share(1), share(1) * 0.01);
  // a's next message is refused until it registers again.
  send("a", {wire::Heartbeat{}});
  EXPECT_EQ(errors_to(alloc_->take_outbox(), "a").at(0).code, ErrorCode::kNotRegistered);
}

TEST_F(AllocatorTest, ResyncReplacesTheEndpointsStateAndResendsRates) {
  hello("p", "ep", "h0");
  send("p", {start_of(1, 0, 1), start_of(2, 0, 2), start_of(3, 0, 3)});
  settle();
  // When: the endpoint resyncs with flows 2 (unchanged), 3 (new weight) and 4 (new).
  send("p", {wire::Resync{{start_of(2, 0, 2), start_of(3, 0, 3, 2.0f), start_of(4, 0, 4)}}});
  const auto out = settle();
  // Expect: 1 is gone; every live flow is told its rate again.
  EXPECT_EQ(alloc_->num_flows(), 3u);
  const auto rates = last_rates(out);
  EXPECT_EQ(rates.size(), 3u);
  EXPECT_FALSE(rates.contains({"p", 1}));
  // Weighted proportional fairness on h0's uplink: weights 1, 2, 1.
  EXPECT_NEAR(static_cast<double>(rates.at({"p", 3})), 2 * share(4), share(4) * 0.02);
  EXPECT_NEAR(static_cast<double>(rates.at({"p", 2})), share(4), share(4) * 0.02);
}

TEST_F(AllocatorTest, ReconnectedEndpointKeepsItsFlowsAndIsAnsweredOnItsNewConnection) {
  hello("old", "ep", "h0");
  send("old", {start_of(1, 0, 1)});
  settle();
  hello("new", "ep", "h0");
  send("new", {wire::Resync{{start_of(1, 0, 1)}}});
  const auto out = settle();
  EXPECT_EQ(alloc_->num_endpoints(), 1u);
  EXPECT_EQ(alloc_->num_flows(), 1u);
  const auto rates = last_rates(out);
  EXPECT_TRUE(rates.contains({"new", 1}));
  EXPECT_FALSE(rates.contains({"old", 1}));
}

TEST_F(AllocatorTest, AfterAnAllocatorRestartTheEndpointResyncsItsState) {
  hello("p", "ep", "h0");
  send("p", {start_of(1, 0, 1), start_of(2, 0, 2)});
  settle();
  // Given: the allocator restarts (a new epoch, no state).
  make(config(), 8, 0, 43);
  // When: the endpoint's next message arrives.
  send("p", {wire::Heartbeat{}});
  auto out = alloc_->take_outbox();
  // Expect: an error carrying the new epoch, which tells the endpoint to resync.
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].message.epoch, 43u);
  EXPECT_EQ(out[0].message.errors.at(0).code, ErrorCode::kNotRegistered);
  send("p", {wire::Hello{"ep", "h0"}, wire::Resync{{start_of(1, 0, 1), start_of(2, 0, 2)}}});
  const auto rates = last_rates(settle());
  EXPECT_EQ(rates.size(), 2u);
  EXPECT_NEAR(static_cast<double>(rates.at({"p", 1})), share(2), share(2) * 0.01);
}

TEST_F(AllocatorTest, HugeBatchesAreSplitWithinWireLimits) {
  AllocatorConfig c = config();
  c.max_flows_per_endpoint = wire::kMaxResyncFlows;
  c.max_flows_per_source = 0;  // the host's quota would bind first
  make(c, 64);
  hello("p", "ep", "h0");
  // Given: the largest resync a message holds, then refusals owed to the same endpoint.
  std::vector<wire::FlowletStart> flows;
  for (std::uint64_t k = 0; k < wire::kMaxResyncFlows; ++k) {
    flows.push_back(start_of(k + 1, 0, static_cast<std::uint32_t>(1 + k % 63)));
  }
  std::vector<wire::EndpointEvent> resync;
  resync.emplace_back(wire::Resync{std::move(flows)});
  send("p", std::move(resync));
  std::vector<wire::EndpointEvent> bad_ends;
  for (std::uint64_t k = 0; k < 10; ++k) {
    bad_ends.emplace_back(std::in_place_type<wire::FlowletEnd>, wire::FlowletEnd{(1u << 30) + k});
  }
  send("p", bad_ends);
  alloc_->iterate(now_);
  const auto out = alloc_->take_outbox();
  ASSERT_EQ(out.size(), 2u);
  std::size_t total = 0;
  for (const auto& o : out) {
    EXPECT_LE(o.message.rates.size(), wire::kMaxItemsPerMessage);
    total += o.message.rates.size();
    // Each part must survive the real codec.
    AllocatorMessage back;
    EXPECT_TRUE(wire::decode(wire::encode(o.message), &back).ok());
  }
  EXPECT_EQ(total, wire::kMaxResyncFlows);
  EXPECT_EQ(out[0].message.errors.size(), 10u);
}

TEST_F(AllocatorTest, IdleAllocatorHasNothingToDo) {
  EXPECT_FALSE(alloc_->busy());
  EXPECT_EQ(alloc_->next_timer_us(), UINT64_MAX);
  hello("p", "ep", "h0");
  send("p", {start_of(1, 0, 1)});
  EXPECT_TRUE(alloc_->busy());
  settle();
  EXPECT_FALSE(alloc_->busy());
  EXPECT_LT(alloc_->counters().iterations, 100u);
}

// ---- one socket, one flow (issue #12) ----

// A start for a socket: from 10.0.0.1 (not in the topology: the endpoint's own
// host is the source) to 10.0.9.9 (added in a spare slot).
wire::FlowletStart socket_start(std::uint64_t key, std::uint16_t src_port = 40000,
                                std::uint64_t bytes = 1000) {
  wire::FlowletStart s;
  s.flow_key = key;
  s.endpoints = wire::FiveTuple{0x0a000001u, 0x0a000909u, src_port, 5201, 6};
  s.bytes = bytes;
  return s;
}

class SharedSocketTest : public AllocatorTest {
 protected:
  void SetUp() override {
    AllocatorConfig c = config();
    c.unknown_hosts = UnknownHosts::kAdd;
    make(c, 8, 4);
  }
  // Given: endpoints a (key 1) and b (key 2) on h0 write one socket.
  void two_writers() {
    hello("a", "ep-a", "h0");
    hello("b", "ep-b", "h0");
    send("a", {socket_start(1)});
    send("b", {socket_start(2)});
  }
  // Every rate told to (peer, key) in `out`, in order.
  static std::vector<std::uint64_t> told(const std::vector<Outgoing>& out, std::string_view peer,
                                         std::uint64_t key) {
    std::vector<std::uint64_t> r;
    for (const auto& o : out) {
      if (o.peer != peer) continue;
      for (const auto& u : o.message.rates) {
        if (u.flow_key == key) r.push_back(u.bytes_per_sec);
      }
    }
    return r;
  }
};

TEST_F(SharedSocketTest, ForkedWritersOfOneSocketHoldOneFlowAtTheFullShare) {
  // Given: three endpoints on h0 (forked children sharing one socket), one of
  // them reporting it under two keys.
  hello("a", "ep-a", "h0");
  hello("b", "ep-b", "h0");
  hello("c", "ep-c", "h0");
  // When: each starts a flowlet on the same 5-tuple.
  send("a", {socket_start(1)});
  send("b", {socket_start(7)});
  send("c", {socket_start(3), socket_start(4)});
  const auto out = settle();
  // Expect: one engine flow, alone on h0's uplink, and every holder told its
  // whole share (not a quarter of it each).
  EXPECT_EQ(alloc_->num_flows(), 1u);
  EXPECT_EQ(alloc_->counters().flows_joined, 3u);
  const auto rates = last_rates(out);
  for (const auto& k : std::vector<std::pair<std::string, std::uint64_t>>{
           {"a", 1}, {"b", 7}, {"c", 3}, {"c", 4}}) {
    ASSERT_TRUE(rates.contains(k)) << k.first << " " << k.second;
    EXPECT_NEAR(static_cast<double>(rates.at(k)), share(1), share(1) * 1e-3);
  }
  const auto view = alloc_->flows(now_, 10);
  ASSERT_EQ(view.size(), 1u);
  EXPECT_EQ(view[0].holders, 4u);
  EXPECT_EQ(view[0].bytes, 4000u);  // the holders' reports, summed
  EXPECT_EQ(view[0].weight, 1.0);
}

TEST_F(SharedSocketTest, AJoinerOfARatedFlowIsToldItsRateAtOnce) {
  hello("a", "ep-a", "h0");
  send("a", {socket_start(1)});
  const auto first = last_rates(settle());
  hello("b", "ep-b", "h0");
  alloc_->take_outbox();
  // When: b joins a flow that is rated and settled (no iteration is due).
  send("b", {socket_start(2)});
  EXPECT_FALSE(alloc_->busy());
  // Expect: b is told what a holds, now.
  EXPECT_EQ(told(alloc_->take_outbox(), "b", 2), std::vector<std::uint64_t>{first.at({"a", 1})});
}

TEST_F(SharedSocketTest, TheFlowLastsUntilItsLastHolderEndsInAnyOrder) {
  hello("a", "ep-a", "h0");
  hello("b", "ep-b", "h0");
  hello("c", "ep-c", "h0");
  hello("d", "ep-d", "h0");
  send("a", {socket_start(1)});
  send("b", {socket_start(2)});
  send("c", {socket_start(3)});
  settle();
  // The first holder (the one the flow record names) ends first, then a joiner.
  send("a", {wire::FlowletEnd{1}});
  EXPECT_EQ(alloc_->num_flows(), 1u);
  send("c", {wire::FlowletEnd{3}});
  EXPECT_EQ(alloc_->num_flows(), 1u);
  EXPECT_EQ(alloc_->flows(now_, 10).at(0).holders, 1u);
  // The remaining holder still gets the flow's rates: a competitor on h0's
  // uplink halves them.
  send("d", {start_of(9, 0, 2)});
  const auto rates = last_rates(settle());
  EXPECT_NEAR(static_cast<double>(rates.at({"b", 2})), share(2), share(2) * 0.01);
  EXPECT_FALSE(rates.contains({"a", 1}));
  EXPECT_FALSE(rates.contains({"c", 3}));
  send("b", {wire::FlowletEnd{2}});
  EXPECT_EQ(alloc_->num_flows(), 1u);  // d's flow only
  EXPECT_TRUE(errors_to(alloc_->take_outbox(), "b").empty());
  // A later start on the same socket is a fresh flow.
  send("a", {socket_start(5)});
  EXPECT_EQ(alloc_->num_flows(), 2u);
  EXPECT_EQ(alloc_->flows(now_, 10).size(), 2u);
}

TEST_F(SharedSocketTest, EveryHolderIsToldWhenTheRateMoves) {
  two_writers();
  hello("d", "ep-d", "h0");
  settle();
  send("d", {start_of(9, 0, 2)});
  const auto out = settle();
  const auto a = told(out, "a", 1);
  const auto b = told(out, "b", 2);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b);  // the same updates, in the same order
  EXPECT_NEAR(static_cast<double>(a.back()), share(2), share(2) * 0.01);
}

TEST_F(SharedSocketTest, AHolderThatTimesOutLeavesTheFlowToTheOthers) {
  two_writers();
  settle();
  only_b_heartbeats_past_the_timeout();
  EXPECT_EQ(alloc_->num_endpoints(), 1u);
  EXPECT_EQ(alloc_->num_flows(), 1u);
  EXPECT_EQ(alloc_->flows(now_, 10).at(0).holders, 1u);
  EXPECT_EQ(alloc_->flows(now_, 10).at(0).endpoint_id, "ep-b");
  send("b", {wire::FlowletEnd{2}});
  EXPECT_EQ(alloc_->num_flows(), 0u);
}

TEST_F(SharedSocketTest, AResyncWithoutTheSocketDropsOnlyThatHolder) {
  two_writers();
  settle();
  // When: b resyncs with nothing; then a resyncs with the socket unchanged.
  send("b", {wire::Resync{}});
  EXPECT_EQ(alloc_->num_flows(), 1u);
  send("a", {wire::Resync{{socket_start(1)}}});
  const auto out = settle();
  // Expect: a still holds it alone, and is told its rate again.
  EXPECT_EQ(alloc_->num_flows(), 1u);
  EXPECT_EQ(alloc_->flows(now_, 10).at(0).holders, 1u);
  EXPECT_FALSE(told(out, "a", 1).empty());
  send("a", {wire::FlowletEnd{1}});
  EXPECT_EQ(alloc_->num_flows(), 0u);
}

TEST_F(SharedSocketTest, ADroppedEndpointReleasesItsHoldsOnly) {
  two_writers();
  // a's connection now speaks for another process: the old endpoint is dropped.
  hello("a", "ep-a2", "h0");
  EXPECT_EQ(alloc_->num_flows(), 1u);
  EXPECT_EQ(alloc_->flows(now_, 10).at(0).holders, 1u);
}

TEST_F(SharedSocketTest, AFailedSendToAJoinerResendsUnderTheJoinersKey) {
  two_writers();
  const auto first = last_rates(settle());
  // Given: a message to b (a holder beyond the first) was lost.
  alloc_->on_send_failed("b");
  now_ += 300'000;
  alloc_->on_timer(now_);
  const auto out = alloc_->take_outbox();
  // Expect: b's refresh repeats the rate under b's key, and a, whose rate did
  // not move, hears only its lease refresh.
  EXPECT_EQ(told(out, "b", 2), std::vector<std::uint64_t>{first.at({"b", 2})});
  EXPECT_TRUE(told(out, "b", 1).empty());
  EXPECT_TRUE(told(out, "a", 1).empty());
}

TEST_F(SharedSocketTest, DifferentSocketsStaySeparate) {
  hello("a", "ep-a", "h0");
  hello("b", "ep-b", "h0");
  hello("c", "ep-c", "h1");
  send("a", {socket_start(1, 40000)});
  send("b", {socket_start(2, 40001)});  // another source port
  send("c", {socket_start(3, 40000)});  // the same tuple from another host
  const auto rates = last_rates(settle());
  EXPECT_EQ(alloc_->num_flows(), 3u);
  EXPECT_EQ(alloc_->counters().flows_joined, 0u);
  // h0's uplink carries a and b; the three meet on the destination's downlink,
  // so each gets a third.
  for (const auto& k : std::vector<std::pair<std::string, std::uint64_t>>{
           {"a", 1}, {"b", 2}, {"c", 3}}) {
    EXPECT_NEAR(static_cast<double>(rates.at(k)), share(3), share(3) * 0.01);
  }
}

TEST_F(SharedSocketTest, HostPairFlowsAreNeverMerged) {
  hello("a", "ep-a", "h0");
  hello("b", "ep-b", "h0");
  send("a", {start_of(1, 0, 1)});
  send("b", {start_of(1, 0, 1)});
  const auto rates = last_rates(settle());
  EXPECT_EQ(alloc_->num_flows(), 2u);
  EXPECT_NEAR(static_cast<double>(rates.at({"a", 1})), share(2), share(2) * 0.01);
}

TEST_F(SharedSocketTest, ARateRequestThatFindsTheRateMovedTellsEveryHolder) {
  AllocatorConfig c = config();
  c.unknown_hosts = UnknownHosts::kAdd;
  c.threshold = 0.2;  // wide: the competitor's arrival can stay within it
  make(c, 8, 4);
  two_writers();
  hello("d", "ep-d", "h0");
  settle();
  // A competitor with a small weight moves the shared flow's rate by less
  // than the threshold: nobody is told.
  send("d", {start_of(9, 0, 2, 0.1f)});
  const auto quiet = settle();
  EXPECT_TRUE(told(quiet, "a", 1).empty());
  const std::uint64_t now_rate =
      static_cast<std::uint64_t>(alloc_->flows(now_, 10).at(0).rate_bps / 8);
  // When: b asks for its rate again.
  send("b", {wire::RateRequest{{2}}});
  const auto out = alloc_->take_outbox();
  // Expect: both holders are told the current rate (a must not keep the old one).
  EXPECT_EQ(told(out, "b", 2), std::vector<std::uint64_t>{now_rate});
  EXPECT_EQ(told(out, "a", 1), std::vector<std::uint64_t>{now_rate});
}

// ---- rate requests and hello acknowledgements ----

TEST_F(AllocatorTest, RateRequestIsAnsweredWithTheCurrentRateWhateverTheThreshold) {
  hello("p", "ep", "h0");
  send("p", {start_of(7, 0, 1)});
  const auto first = last_rates(settle()).at({"p", 7});
  // Given: nothing moved, so no update is owed.
  ASSERT_TRUE(alloc_->take_outbox().empty());
  // When: the endpoint says it does not apply key 7's rate.
  send("p", {wire::RateRequest{{7}}});
  const auto out = alloc_->take_outbox();
  // Expect: its current rate, with a lease.
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].message.rates.size(), 1u);
  EXPECT_EQ(out[0].message.rates[0].flow_key, 7u);
  EXPECT_EQ(out[0].message.rates[0].bytes_per_sec, first);
  EXPECT_EQ(out[0].message.rates[0].bytes_per_sec,
            static_cast<std::uint64_t>(alloc_->flows(now_, 1).at(0).rate_bps / 8));
  EXPECT_EQ(out[0].message.rates[0].lease_us, 1'000'000u);
  EXPECT_EQ(alloc_->counters().rate_requests, 1u);
}

TEST_F(AllocatorTest, RateRequestForAnUnknownKeyIsAnUnknownFlowErrorNamingIt) {
  hello("p", "ep", "h0");
  send("p", {start_of(7, 0, 1)});
  settle();
  send("p", {wire::RateRequest{{7, 55}}});
  const auto out = alloc_->take_outbox();
  const auto errs = errors_to(out, "p");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].code, ErrorCode::kUnknownFlow);
  EXPECT_EQ(errs[0].flow_key, 55u);
  EXPECT_EQ(last_rates(out).size(), 1u);  // 7 is answered all the same
}

TEST_F(AllocatorTest, RateRequestForAFlowNotYetRatedWaitsForTheNextIteration) {
  hello("p", "ep", "h0");
  alloc_->take_outbox();
  send("p", {start_of(7, 0, 1), wire::RateRequest{{7}}});
  // Expect: nothing now (there is no rate to tell), no error either.
  EXPECT_TRUE(alloc_->take_outbox().empty());
  // The next iteration sends it.
  alloc_->iterate(now_);
  EXPECT_TRUE(last_rates(alloc_->take_outbox()).contains({"p", 7}));
}

TEST_F(AllocatorTest, RefusedHelloGetsErrorsOnlyAndAcceptedHelloAnAck) {
  hello("p", "ep", "nowhere");
  auto out = alloc_->take_outbox();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(out[0].message.hello_ack);
  EXPECT_EQ(out[0].message.errors.size(), 1u);
  hello("p", "ep", "h0");
  out = alloc_->take_outbox();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].message.hello_ack);
  EXPECT_TRUE(out[0].message.errors.empty());
  EXPECT_EQ(out[0].message.epoch, 42u);
  // A known endpoint's repeated hello (a reconnection) is acknowledged too.
  hello("p2", "ep", "h0");
  out = alloc_->take_outbox();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].peer, "p2");
  EXPECT_TRUE(out[0].message.hello_ack);
}

// Classes as the operator configured them: a start naming none takes
// --default-class, one asking above --top-class is lowered to it.
TEST_F(AllocatorTest, ClassesFollowTheOperatorsDefaultAndTopClass) {
  AllocatorConfig c = config();
  c.default_class = 3;
  c.top_class = 2;
  make(c);
  hello("a", "ep-a", "h0");
  wire::FlowletStart greedy = start_of(1, 0, 1);
  greedy.priority_class = 0;  // asks for the top; may have 2
  wire::FlowletStart plain = start_of(2, 0, 1);  // names none: 3
  wire::FlowletStart low = start_of(3, 0, 1);
  low.priority_class = 6;
  send("a", {greedy, plain, low});
  const auto rates = last_rates(settle());
  EXPECT_EQ(alloc_->counters().classes_lowered, 1u);
  std::map<std::uint64_t, int> cls;
  for (const FlowView& f : alloc_->flows(now_, 10)) cls[f.flow_key] = f.priority_class;
  EXPECT_EQ(cls, (std::map<std::uint64_t, int>{{1, 2}, {2, 3}, {3, 6}}));
  // Strict priority on the shared uplink: class 2 takes all but the
  // reserve each lower class keeps (--class-reserve).
  const double reserve = c.engine.class_reserve;
  EXPECT_NEAR(static_cast<double>(rates.at({"a", 1})), share(1) * (1 - 2 * reserve), share(1) * 1e-3);
  EXPECT_NEAR(static_cast<double>(rates.at({"a", 2})), share(1) * reserve, share(1) * 1e-3);
  EXPECT_NEAR(static_cast<double>(rates.at({"a", 3})), share(1) * reserve, share(1) * 1e-3);
  const FlowTotals t = alloc_->totals();
  EXPECT_EQ(t.by_class[2].flows, 1u);
  EXPECT_EQ(t.by_class[3].flows, 1u);
  EXPECT_EQ(t.by_class[6].flows, 1u);
  EXPECT_EQ(t.by_tenant.at(alloc::kNoTenant).flows, 3u);
  // A resync naming another class for a live flow replaces its hold.
  plain.priority_class = 2;
  send("a", {wire::Resync{{greedy, plain, low}}});
  settle();
  for (const FlowView& f : alloc_->flows(now_, 10)) cls[f.flow_key] = f.priority_class;
  EXPECT_EQ(cls.at(2), 2);
}

// Deadlines are judged by the end: met before, missed after; the view shows
// the time left.
TEST_F(AllocatorTest, DeadlinesAreCountedMetOrMissedAtTheEnd) {
  hello("a", "ep-a", "h0");
  wire::FlowletStart soon = start_of(1, 0, 1);
  soon.deadline_us = 5'000;
  soon.tenant = "t";
  wire::FlowletStart later = start_of(2, 0, 2);
  later.deadline_us = 50'000;
  send("a", {soon, later});
  settle();
  for (const FlowView& f : alloc_->flows(now_, 10)) {
    EXPECT_EQ(f.tenant, f.flow_key == 1 ? "t" : "");
    EXPECT_GT(f.deadline_left_us, 0);
  }
  now_ += 10'000;
  for (const FlowView& f : alloc_->flows(now_, 10)) {
    if (f.flow_key == 1) {
      EXPECT_LT(f.deadline_left_us, 0);  // overdue
    }
  }
  send("a", {wire::FlowletEnd{1}, wire::FlowletEnd{2}});
  settle();
  EXPECT_EQ(alloc_->counters().deadlines_missed, 1u);
  EXPECT_EQ(alloc_->counters().deadlines_met, 1u);
}

TEST(AllocatorConfig, OutOfRangeValuesAreRejected) {
  AllocatorConfig c;
  c.threshold = 0.7;
  EXPECT_THROW(validate(c), ConfigError);
  c = {};
  c.lease_refresh_us = c.lease_us;
  EXPECT_THROW(validate(c), ConfigError);
  c = {};
  c.threads = 0;
  EXPECT_THROW(validate(c), ConfigError);
  c = {};
  c.default_class = 8;
  EXPECT_THROW(validate(c), ConfigError);
  c = {};
  c.default_class = 2;
  c.top_class = 3;  // flowlets naming no class would sit above what endpoints may ask
  EXPECT_THROW(validate(c), ConfigError);
  c = {};
  EXPECT_NO_THROW(validate(c));
}

TEST(LatencyHistogram, QuantilesAreWithinOneEighth) {
  LatencyHistogram h;
  for (std::uint64_t v = 1; v <= 100000; ++v) h.record(v);
  for (double q : {0.5, 0.9, 0.99}) {
    const double exact = q * 100000;
    EXPECT_GE(static_cast<double>(h.quantile_ns(q)), exact * 0.99);
    EXPECT_LE(static_cast<double>(h.quantile_ns(q)), exact * 1.13);
  }
  EXPECT_EQ(LatencyHistogram{}.quantile_ns(0.5), 0u);
}

// ---- host pacers (flowtune-pacer) ----

// What the last message to `peer` carried, by `field`; nullopt when none went.
template <typename T>
std::optional<T> last_to(const std::vector<Outgoing>& out, std::string_view peer,
                         T wire::AllocatorMessage::*field) {
  std::optional<T> r;
  for (const auto& o : out) {
    if (o.peer == peer) r = o.message.*field;
  }
  return r;
}
std::optional<std::uint64_t> last_host_rate(const std::vector<Outgoing>& out,
                                            std::string_view peer) {
  return last_to(out, peer, &wire::AllocatorMessage::host_rate);
}
// How many rated flows the last message to `peer` counted.
std::optional<std::uint32_t> last_host_flows(const std::vector<Outgoing>& out,
                                             std::string_view peer) {
  return last_to(out, peer, &wire::AllocatorMessage::host_flows);
}

TEST_F(AllocatorTest, AHostPacerIsToldTheSumOfItsHostsRatesAcrossEndpoints) {
  // Given: a pacer for h0, and two endpoints on h0 and one on h2, all sending to h1.
  send("pacer", {wire::Hello{"pacer-h0", "h0", true}});
  hello("a", "ea", "h0");
  hello("b", "eb", "h0");
  hello("c", "ec", "h2");
  send("a", {start_of(1, 0, 1)});
  send("b", {start_of(2, 0, 1), start_of(3, 0, 1)});
  send("c", {start_of(4, 2, 1)});
  // When: the allocator settles.
  const auto out = settle();
  // Expect: the pacer's last message carries exactly the sum of h0's three rates.
  const auto rates = last_rates(out);
  const std::uint64_t h0 = rates.at({"a", 1}) + rates.at({"b", 2}) + rates.at({"b", 3});
  ASSERT_EQ(last_host_rate(out, "pacer"), h0);
  EXPECT_EQ(last_host_flows(out, "pacer"), 3u);
  EXPECT_NEAR(static_cast<double>(h0), 3 * share(4), share(4) * 1e-2);
  EXPECT_GT(alloc_->counters().host_rate_updates, 0u);
  // When: b's flows end.
  send("b", {wire::FlowletEnd{2}, wire::FlowletEnd{3}});
  const auto after = settle();
  // Expect: the pacer is told a's rate alone (now half the link).
  const auto r2 = last_rates(after);
  ASSERT_TRUE(last_host_rate(after, "pacer").has_value());
  EXPECT_EQ(*last_host_rate(after, "pacer"), r2.at({"a", 1}));
  EXPECT_EQ(last_host_flows(after, "pacer"), 1u);
  // When: a's endpoint leaves too (timeout), with only the pacer heartbeating.
  for (int i = 0; i < 4; ++i) {
    now_ += 1'000'000;
    send("pacer", {wire::Heartbeat{}});
    send("c", {wire::Heartbeat{}});
    alloc_->on_timer(now_);
  }
  const auto gone = settle();
  // Expect: h0's sum is 0 and the pacer was told so.
  EXPECT_EQ(last_host_rate(gone, "pacer"), 0u);
  EXPECT_EQ(last_host_flows(gone, "pacer"), 0u);
}

TEST_F(AllocatorTest, AHostPacerGetsLeaseRefreshesAndMayNotHoldFlows) {
  send("pacer", {wire::Hello{"pacer-h0", "h0", true}});
  hello("a", "ea", "h0");
  send("a", {start_of(1, 0, 1)});
  auto out = settle();
  const auto told = last_host_rate(out, "pacer");
  ASSERT_TRUE(told.has_value());
  // When: the lease timer runs with no change in rates.
  now_ += 300'000;
  send("pacer", {wire::Heartbeat{}});
  send("a", {wire::Heartbeat{}});
  alloc_->on_timer(now_);
  out = alloc_->take_outbox();
  // Expect: the pacer gets a lease refresh carrying the same host rate.
  bool refreshed = false;
  for (const auto& o : out) {
    if (o.peer != "pacer") continue;
    refreshed = o.message.lease_refresh_us > 0;
    EXPECT_EQ(o.message.host_rate, *told);
  }
  EXPECT_TRUE(refreshed);
  // When: the pacer tries to start a flowlet.
  send("pacer", {start_of(9, 0, 1)});
  out = settle();
  // Expect: refused with badValue, and no flow added.
  const auto errs = errors_to(out, "pacer");
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].code, ErrorCode::kBadValue);
  EXPECT_EQ(alloc_->num_flows(), 1u);
}

TEST_F(AllocatorTest, AnEndpointWithoutAPacerIsNeverToldAHostRate) {
  hello("a", "ea", "h0");
  send("a", {start_of(1, 0, 1)});
  const auto out = settle();
  for (const auto& o : out) EXPECT_EQ(o.message.host_rate, 0u);
  EXPECT_EQ(alloc_->counters().host_rate_updates, 0u);
}

// ---- operator policy: tenants, rules, floors ----

OperatorPolicy policy(std::string_view toml) { return parse_policy(toml, "test.toml"); }

// Tenant b opens eight connections from h2, tenant a one from h0, all into
// h1: each tenant gets half of h1's link. The rule names h2's flows tenant b
// whatever the endpoint says.
TEST_F(AllocatorTest, TenantsShareALinkWhateverTheirConnectionCounts) {
  AllocatorConfig c = config();
  c.policy = policy(R"([tenants.a]
weight = 1
[tenants.b]
weight = 1
[[rule]]
src_hosts = ["h2"]
tenant = "b"
)");
  make(c);
  hello("a", "ep-a", "h0");
  hello("b", "ep-b", "h2");
  wire::FlowletStart one = start_of(1, 0, 1);
  one.tenant = "a";
  send("a", {one});
  std::vector<wire::EndpointEvent> many;
  for (std::uint64_t k = 1; k <= 8; ++k) {
    wire::FlowletStart s = start_of(k, 2, 1);
    if (k == 1) s.tenant = "a";  // claims a's share: the rule says b
    many.push_back(s);
  }
  send("b", many);
  const auto rates = last_rates(settle());
  EXPECT_NEAR(static_cast<double>(rates.at({"a", 1})), share(2), share(2) * 2e-3);
  double b = 0;
  for (std::uint64_t k = 1; k <= 8; ++k) b += static_cast<double>(rates.at({"b", k}));
  EXPECT_NEAR(b, share(2), share(2) * 2e-3);
  for (const FlowView& f : alloc_->flows(now_, 20)) {
    EXPECT_EQ(f.tenant, f.endpoint_id == "ep-a" ? "a" : "b");
  }
  const FlowTotals t = alloc_->totals();
  const alloc::TenantId b_id = alloc_->policy().find("b");
  EXPECT_EQ(t.by_tenant.at(b_id).flows, 8u);
  EXPECT_EQ(alloc_->policy().spec(b_id).weight, 1);
  // SIGHUP with b at weight 3: live flows re-weighted, none dropped.
  alloc_->set_policy(policy("[tenants.a]\nweight = 1\n[tenants.b]\nweight = 3\n"));
  const auto after = last_rates(settle());
  EXPECT_NEAR(static_cast<double>(after.at({"a", 1})), share(4), share(4) * 2e-3);
  EXPECT_EQ(alloc_->num_flows(), 9u);
  // A policy that does not validate is refused whole; the old one stays.
  OperatorPolicy bad = policy("[defaults]\nclass = 1\n");
  bad.top_class = 2;
  EXPECT_THROW(alloc_->set_policy(bad), ConfigError);
  EXPECT_EQ(alloc_->config().policy.tenants.at("b").weight, 3);
}

// A rule gives one endpoint's flowlets their own default and top class.
TEST_F(AllocatorTest, RulesSetAnEndpointsDefaultAndTopClass) {
  AllocatorConfig c = config();
  c.policy = policy(R"([[rule]]
endpoint = "batch-"
class = 6
top_class = 5
)");
  make(c);
  hello("a", "batch-7", "h0");
  hello("b", "web-1", "h2");
  wire::FlowletStart greedy = start_of(1, 0, 1);
  greedy.priority_class = 0;
  send("a", {greedy, start_of(2, 0, 1)});
  wire::FlowletStart web = start_of(1, 2, 1);
  web.priority_class = 0;
  send("b", {web});
  settle();
  std::map<std::string, int> cls;
  for (const FlowView& f : alloc_->flows(now_, 10)) {
    cls[f.endpoint_id + "/" + std::to_string(f.flow_key)] = f.priority_class;
  }
  EXPECT_EQ(cls, (std::map<std::string, int>{{"batch-7/1", 5}, {"batch-7/2", 6}, {"web-1/1", 0}}));
  EXPECT_EQ(alloc_->counters().classes_lowered, 1u);
  // Defaults set by a file and then dropped from it fall back to the flags'.
  alloc_->set_policy(policy("[defaults]\nclass = 5\ntop_class = 2\n"));
  EXPECT_EQ(alloc_->config().top_class, 2);
  alloc_->set_policy(policy("[defaults]\ntenant_weight = 2\n"));
  EXPECT_EQ(alloc_->config().default_class, c.default_class);
  EXPECT_EQ(alloc_->config().top_class, c.top_class);
}

// A deadline gets a floor of what it still needs; one the link cannot hold
// as well is reported infeasible and keeps its fair share.
TEST_F(AllocatorTest, DeadlinesGetFloorsAndInfeasibleOnesAreShown) {
  hello("a", "ep-a", "h0");
  hello("b", "ep-b", "h2");
  hello("c", "ep-c", "h3");
  send("a", {start_of(1, 0, 1)});  // bulk, no deadline
  // 1 MiB in 14 ms: about 61% of the scheduled link.
  wire::FlowletStart due = start_of(1, 2, 1);
  due.deadline_us = 14'000;
  send("b", {due});
  const auto rates = last_rates(settle());
  const double need = (1 << 20) / 0.014;  // bytes/s
  EXPECT_GT(static_cast<double>(rates.at({"b", 1})), need);
  EXPECT_LT(static_cast<double>(rates.at({"a", 1})), share(2));
  // Another as urgent, due later: the two cannot both have floors.
  wire::FlowletStart also = start_of(1, 3, 1);
  also.deadline_us = 15'000;
  send("c", {also});
  settle();
  std::map<std::string, alloc::DeadlineState> state;
  for (const FlowView& f : alloc_->flows(now_, 10)) state[f.endpoint_id] = f.deadline_state;
  EXPECT_EQ(state.at("ep-a"), alloc::DeadlineState::kNone);
  EXPECT_EQ(state.at("ep-b"), alloc::DeadlineState::kReserved);
  EXPECT_EQ(state.at("ep-c"), alloc::DeadlineState::kInfeasible);
  EXPECT_EQ(alloc_->policy().counters().deadlines_infeasible, 1u);
  // Past b's deadline the allocator wakes by itself and drops its floor.
  EXPECT_LE(alloc_->next_timer_us(), now_ + 14'000);
  now_ += 20'000;
  alloc_->on_timer(now_);
  EXPECT_TRUE(alloc_->busy());
  settle();
  for (const FlowView& f : alloc_->flows(now_, 10)) {
    if (f.endpoint_id == "ep-b") {
      EXPECT_EQ(f.deadline_state, alloc::DeadlineState::kOverdue);
      EXPECT_EQ(f.floor_bps, 0);
    }
  }
}

// --coflow-policy stf: the flowlets of one coflow id are served as one, the
// smaller coflow first; without it every flowlet gets its fair share.
TEST_F(AllocatorTest, CoflowOrderServesTheSmallerCoflowFirstAndKeepsAShareForTheRest) {
  for (bool ordered : {false, true}) {
    AllocatorConfig c = config();
    if (ordered) c.coflow_policy = alloc::CoflowPolicy::kStf;
    make(c);
    hello("a", "ep-a", "h0");
    hello("b", "ep-b", "h1");
    hello("c", "ep-c", "h2");
    wire::FlowletStart small = start_of(1, 0, 3);  // 1 MiB
    small.coflow_id = 7;
    wire::FlowletStart big = start_of(1, 1, 3);
    big.bytes = 64u << 20;
    big.coflow_id = 9;
    send("a", {small});
    send("b", {big});
    big.endpoints = wire::HostPair{2, 3};
    send("c", {big});
    const auto rates = last_rates(settle());
    const double a = static_cast<double>(rates.at({"a", 1}));
    const double b = static_cast<double>(rates.at({"b", 1}));
    if (!ordered) {
      EXPECT_NEAR(a, share(3), share(3) * 0.01);
      EXPECT_NEAR(b, share(3), share(3) * 0.01);
      EXPECT_EQ(alloc_->policy().counters().coflow_plans, 0u);
      continue;
    }
    // The coflow share of h3's downlink (0.7 by default) in order, the
    // rest split three ways.
    const double s = c.coflow_share;
    EXPECT_NEAR(a, share(1) * (s + (1 - s) / 3), share(1) * 0.01);
    EXPECT_NEAR(b, share(1) * (1 - s) / 3, share(1) * 0.01);
    EXPECT_NEAR(static_cast<double>(rates.at({"c", 1})), b, b * 0.01);
    EXPECT_EQ(alloc_->policy().counters().coflows_ordered, 2u);
    for (const FlowView& f : alloc_->flows(now_, 10)) {
      if (f.endpoint_id == "ep-a") {
        EXPECT_GT(f.floor_bps, (s - 0.05) * kGbps * 0.99);
      }
    }
    // The small coflow ends: the big one takes the link, its two flowlets alike.
    send("a", {wire::FlowletEnd{1}});
    const auto after = last_rates(settle());
    EXPECT_NEAR(static_cast<double>(after.at({"b", 1})), share(2), share(2) * 0.01);
  }
}

// The policy file is read like the topology: a regular file within 4 MiB.
TEST(PolicyFile, OnlyARegularFileWithinItsBoundIsRead) {
  auto error = [](const std::string& path) {
    try {
      (void)load_policy_file(path);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  char dir[] = "/tmp/ft-policy-test-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string fifo = std::string(dir) + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error(fifo), fifo + ": not a regular file");  // no writer: would block
  EXPECT_EQ(error("/dev/zero"), "/dev/zero: not a regular file");
  const std::string big = std::string(dir) + "/big.toml";
  {
    std::FILE* f = std::fopen(big.c_str(), "w");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(::ftruncate(::fileno(f), (4 << 20) + 1), 0);
    std::fclose(f);
  }
  EXPECT_EQ(error(big), big + ": larger than 4194304 bytes");
  const std::string ok = std::string(dir) + "/ok.toml";
  {
    std::FILE* f = std::fopen(ok.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("[tenants.a]\nweight = 2\n", f);
    std::fclose(f);
  }
  EXPECT_EQ(error(ok), "accepted");
  ::unlink(fifo.c_str());
  ::unlink(big.c_str());
  ::unlink(ok.c_str());
  ::rmdir(dir);
}

TEST(PolicyFile, ErrorsNameTheFileLineAndKey) {
  auto error = [](std::string_view text) {
    try {
      (void)parse_policy(text, "p.toml");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(error("[tenants.a]\nweight = 0\n"),
            "p.toml:2: tenants.a.weight: 0 is out of range [1e-06, 1e+06]");
  EXPECT_EQ(error("\n[[rule]]\nsrc_hosts = [\"h1\"]\nclas = 2\n"),
            "p.toml:4: rule[0].clas: unknown key (allowed: src_hosts, dst_hosts, dst_ports, "
            "endpoint, keys, class, top_class, tenant)");
  EXPECT_EQ(error("[[rule]]\ntenant = \"x\"\ndst_ports = \"90-80\"\n"),
            "p.toml:3: rule[0].dst_ports: ports must be 1-65535, low to high");
  EXPECT_EQ(error("[[rule]]\nclass = 9\n"), "p.toml:2: rule[0].class: 9 is not a class (0-7)");
  // The whole string is the ports: text after a NUL is not dropped.
  EXPECT_EQ(error("[[rule]]\ntenant = \"x\"\ndst_ports = \"80\\u0000x\"\n"),
            "p.toml:3: rule[0].dst_ports: expected PORT or \"LO-HI\"");
  EXPECT_EQ(error("[[rule]]\nsrc_hosts = [\"h1\"]\n"),
            "p.toml:1: rule[0]: sets nothing (give class, top_class or tenant)");
  EXPECT_EQ(error("[tenants.a]\nguarantee_gbps = 3\ncap_gbps = 1\n"),
            "p.toml:1: tenants.a: guarantee exceeds the cap");
  EXPECT_NE(error("[tenants\n").find("p.toml:1:"), std::string::npos);
  const OperatorPolicy p = parse_policy(R"([defaults]
class = 5
top_class = 1
tenant_weight = 2
[tenants.search]
weight = 3
guarantee_gbps = 0.5
cap_gbps = 8
[[rule]]
dst_ports = 8080
tenant = "search"
[[rule]]
dst_ports = "9000-9100"
class = 2
)",
                                        "ok.toml");
  EXPECT_EQ(p.default_class, 5);
  EXPECT_EQ(p.top_class, 1);
  EXPECT_EQ(p.default_tenant.weight, 2);
  EXPECT_EQ(p.tenants.at("search").guarantee_bps, 0.5e9);
  EXPECT_EQ(p.tenants.at("search").cap_bps, 8e9);
  ASSERT_EQ(p.rules.size(), 2u);
  EXPECT_EQ(p.rules[0].dst_port_lo, 8080);
  EXPECT_EQ(p.rules[1].dst_port_hi, 9100);
  EXPECT_EQ(p.rules[1].line, 12);
}

// ---- hot standby (standby.h): what the Allocator does while standing by ----

TEST_F(AllocatorTest, StandingByTellsEveryEndpointDropsItsFlowsAndRefusesUntilActive) {
  hello("a", "ep-a", "h0");
  hello("b", "ep-b", "h1");
  send("a", {start_of(1, 0, 1)});
  send("b", {start_of(2, 1, 0)});
  (void)settle();
  ASSERT_EQ(alloc_->num_flows(), 2u);
  // When: the allocator stands by (its peer is active with a newer term).
  alloc_->stand_by("standing by; x is active", now_);
  auto out = settle();
  // Expect: both endpoints told `standby`, nothing held.
  for (const char* p : {"a", "b"}) {
    const auto e = errors_to(out, p);
    ASSERT_EQ(e.size(), 1u) << p;
    EXPECT_EQ(e[0].code, wire::ErrorCode::kStandby);
    EXPECT_EQ(e[0].text, "standing by; x is active");
  }
  EXPECT_EQ(alloc_->num_flows(), 0u);
  EXPECT_EQ(alloc_->num_endpoints(), 0u);
  EXPECT_FALSE(alloc_->active());
  // A hello while standing by is refused with `standby`, and registers nothing.
  hello("a", "ep-a", "h0");
  send("a", {start_of(1, 0, 1)});
  out = settle();
  const auto e = errors_to(out, "a");
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].code, wire::ErrorCode::kStandby);
  EXPECT_FALSE(std::any_of(out.begin(), out.end(), [](const Outgoing& o) { return o.message.hello_ack; }));
  EXPECT_EQ(alloc_->num_endpoints(), 0u);
  EXPECT_EQ(errors(Cause::kStandby), 4u);
  // When: it takes over, under a new epoch.
  alloc_->activate(43);
  hello("a", "ep-a", "h0");
  send("a", {start_of(1, 0, 1)});
  out = settle();
  ASSERT_FALSE(out.empty());
  EXPECT_TRUE(out.front().message.hello_ack);
  for (const auto& o : out) EXPECT_EQ(o.message.epoch, 43u);
  EXPECT_EQ(last_rates(out).count({"a", 1}), 1u);
}

}  // namespace
}  // namespace flowtune::daemon
