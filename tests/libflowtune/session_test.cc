// The endpoint protocol state machine, fed by hand (no sockets, no clock):
// what it reports to the allocator, and what pacing it asks for.
#include "session.h"

#include <gtest/gtest.h>

namespace flowtune::client {
namespace {

constexpr SocketRef kSock{7, 1};
constexpr SocketRef kOther{8, 1};

wire::FiveTuple tuple(std::uint16_t port) { return {0x0a000001, 0x0a000002, port, 5201, 6}; }

class SessionTest : public ::testing::Test {
 protected:
  SessionTest() {
    SessionConfig c;
    c.endpoint_id = "ep";
    c.min_flowlet_bytes = 1000;
    c.heartbeat_us = 1'000'000;
    c.initial_rtt_us = 500;
    s_ = std::make_unique<Session>(c);
    s_->on_register(kSock, tuple(1), 1448, now_);
    s_->on_register(kOther, tuple(2), 1448, now_);
  }
  // Everything the session says now, events flattened.
  std::vector<wire::EndpointEvent> said() {
    std::vector<wire::EndpointEvent> all;
    while (auto m = s_->take_message(now_)) {
      for (auto& e : m->events) all.push_back(std::move(e));
    }
    return all;
  }
  template <class T>
  static std::vector<T> of(const std::vector<wire::EndpointEvent>& ev) {
    std::vector<T> out;
    for (const auto& e : ev) {
      if (const auto* x = std::get_if<T>(&e)) out.push_back(*x);
    }
    return out;
  }
  wire::AllocatorMessage rates(std::vector<wire::RateUpdate> r, std::uint64_t epoch = 9) {
    wire::AllocatorMessage m;
    m.epoch = epoch;
    m.rates = std::move(r);
    m.hello_ack = true;  // harmless once registered
    return m;
  }
  std::unique_ptr<Session> s_;
  std::uint64_t now_ = 1000;
};

TEST_F(SessionTest, FirstMessageIsHelloWithStateThenStartsAreReported) {
  // Given: a flowlet begins before anything was said.
  s_->on_begin(kSock, 5000, {}, now_);
  auto ev = said();
  // Expect: hello (host from the socket's local address) and a resync holding it.
  ASSERT_EQ(of<wire::Hello>(ev).size(), 1u);
  EXPECT_EQ(of<wire::Hello>(ev)[0].host_id, "10.0.0.1");
  ASSERT_EQ(of<wire::Resync>(ev).size(), 1u);
  ASSERT_EQ(of<wire::Resync>(ev)[0].flows.size(), 1u);
  EXPECT_EQ(of<wire::Resync>(ev)[0].flows[0].bytes, 5000u);
  // When: another socket begins, it is a plain start.
  FlowletPolicy weighted;
  weighted.weight = 2;
  weighted.coflow_id = 77;
  s_->on_begin(kOther, 5000, weighted, now_);
  ev = said();
  ASSERT_EQ(of<wire::FlowletStart>(ev).size(), 1u);
  EXPECT_EQ(of<wire::FlowletStart>(ev)[0].weight, 2.0f);
  EXPECT_EQ(of<wire::FlowletStart>(ev)[0].coflow_id, 77u);
  EXPECT_EQ(std::get<wire::FiveTuple>(of<wire::FlowletStart>(ev)[0].endpoints), tuple(2));
}

TEST_F(SessionTest, PolicyTravelsWithStartsAndResyncsAndDeadlinesCountDown) {
  auto tenants = std::make_shared<TenantNames>();
  SessionConfig c;
  c.endpoint_id = "ep";
  c.min_flowlet_bytes = 1000;
  c.tenants = tenants;
  Session s(c);
  // Given: a socket registered with defaults (class 1, tenant "b", 50 ms
  // deadline) and one without.
  FlowletPolicy defaults;
  defaults.priority_class = 1;
  defaults.tenant = static_cast<std::uint8_t>(tenants->intern("b"));
  defaults.deadline_ms = 50;
  s.on_register(kSock, tuple(1), 1448, now_, defaults);
  s.on_register(kOther, tuple(2), 1448, now_);
  // When: the first socket's flowlet brings no policy, the other's its own.
  s.on_begin(kSock, 5000, {}, now_);
  FlowletPolicy own;
  own.priority_class = 0;
  own.tenant = static_cast<std::uint8_t>(tenants->intern("a"));
  s.on_begin(kOther, 5000, own, now_);
  now_ += 20'000;
  auto m = s.take_message(now_);
  ASSERT_TRUE(m);
  // Expect: the resync after hello carries each flowlet's policy, the
  // deadline as time left (50 ms from the begin, 20 ms ago).
  const auto flows = std::get<wire::Resync>(m->events.at(1)).flows;
  ASSERT_EQ(flows.size(), 2u);
  for (const wire::FlowletStart& f : flows) {
    const bool first = std::get<wire::FiveTuple>(f.endpoints) == tuple(1);
    EXPECT_EQ(f.priority_class, first ? 1 : 0);
    EXPECT_EQ(f.tenant, first ? "b" : "a");
    EXPECT_EQ(f.deadline_us, first ? 30'000u : 0u);
  }
  s.on_message(rates({}), now_);
  // When: the flowlet is extended, then the allocator restarts after its
  // deadline passed.
  s.on_begin(kSock, 5000, own, now_);  // coalesces: keeps the first policy
  now_ += 100'000;
  s.on_message(rates({}, 10), now_);
  m = s.take_message(now_);
  ASSERT_TRUE(m);
  for (const wire::FlowletStart& f : std::get<wire::Resync>(m->events.at(1)).flows) {
    if (std::get<wire::FiveTuple>(f.endpoints) != tuple(1)) continue;
    EXPECT_EQ(f.priority_class, 1);
    EXPECT_EQ(f.deadline_us, 1u);  // overdue: the allocator counts it missed
  }
  // A socket's next flowlet starts its own deadline.
  s.on_end(kSock, now_);
  s.on_begin(kSock, 5000, {}, now_);
  const auto starts = of<wire::FlowletStart>([&] {
    std::vector<wire::EndpointEvent> all;
    while (auto x = s.take_message(now_)) {
      for (auto& e : x->events) all.push_back(std::move(e));
    }
    return all;
  }());
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].deadline_us, 50'000u);
  EXPECT_EQ(starts[0].tenant, "b");
}

TEST(TenantNames, InternsUpToTheLimitAndRefusesWhatTheWireWouldNot) {
  TenantNames t;
  EXPECT_EQ(t.intern(""), 0);
  const int a = t.intern("a");
  EXPECT_EQ(a, 1);
  EXPECT_EQ(t.intern("a"), a);
  EXPECT_EQ(t.name(static_cast<std::uint8_t>(a)), "a");
  EXPECT_EQ(t.intern(std::string(wire::kMaxTextBytes + 1, 'x')), -1);
  for (std::size_t i = 2; i <= TenantNames::kMax; ++i) {
    EXPECT_EQ(t.intern("t" + std::to_string(i)), static_cast<int>(i));
  }
  EXPECT_EQ(t.intern("one too many"), -1);
  EXPECT_EQ(t.intern("a"), a);  // known names still resolve
}

TEST_F(SessionTest, RatesBecomePacingAndLapseWithTheirLease) {
  s_->on_begin(kSock, 5000, {}, now_);
  auto ev = said();
  const std::uint64_t key = of<wire::Resync>(ev)[0].flows[0].flow_key;
  s_->on_message(rates({{key, 123456, 100'000}}), now_);
  auto act = s_->take_actions();
  ASSERT_EQ(act.size(), 1u);
  EXPECT_EQ(act[0].socket, kSock);
  EXPECT_EQ(act[0].bytes_per_sec, 123456u);
  EXPECT_EQ(s_->rate_of(kSock), 123456u);
  // A refresh extends the lease; without more, it lapses and the cap goes.
  now_ += 90'000;
  wire::AllocatorMessage refresh = rates({});
  refresh.lease_refresh_us = 100'000;
  s_->on_message(refresh, now_);
  now_ += 50'000;
  s_->on_timer(now_);
  EXPECT_TRUE(s_->take_actions().empty());
  now_ += 60'000;
  EXPECT_LE(s_->next_timer_us(), now_);
  s_->on_timer(now_);
  act = s_->take_actions();
  ASSERT_EQ(act.size(), 1u);
  EXPECT_EQ(act[0].bytes_per_sec, 0u);
  EXPECT_EQ(s_->stats().leases_lapsed, 1u);
}

TEST_F(SessionTest, BackToBackBeginsCoalesceAndMiceAreNotReported) {
  said();  // nothing yet: no flowlet
  s_->on_begin(kSock, 400, {}, now_);  // a mouse
  auto ev = said();
  EXPECT_TRUE(of<wire::Resync>(ev).empty() || of<wire::Resync>(ev)[0].flows.empty());
  EXPECT_TRUE(of<wire::FlowletStart>(ev).empty());
  EXPECT_EQ(s_->stats().mice, 1u);
  // More begins on the live flowlet coalesce; past the threshold it is reported once.
  s_->on_begin(kSock, 400, {}, now_);
  s_->on_begin(kSock, 400, {}, now_);
  s_->on_begin(kSock, 400, {}, now_);
  ev = said();
  ASSERT_EQ(of<wire::FlowletStart>(ev).size(), 1u);
  EXPECT_EQ(of<wire::FlowletStart>(ev)[0].bytes, 1200u);
  EXPECT_EQ(s_->stats().flowlets_coalesced, 3u);
  EXPECT_EQ(s_->stats().flowlets_started, 1u);
  // A mouse lasts until its queue drains, then ends without a word.
  s_->on_begin(kOther, 10, {}, now_);
  s_->on_sent(kOther, 10, now_);
  ASSERT_EQ(s_->take_drain_queries().size(), 1u);
  s_->on_unsent(kOther, 0, now_);
  EXPECT_TRUE(said().empty());
  ASSERT_EQ(s_->take_ended().size(), 1u);
}

TEST_F(SessionTest, EndIsSentInAdvanceWhenTheQueueDrainsWithinARoundTrip) {
  s_->on_begin(kSock, 1'000'000, {}, now_);
  const std::uint64_t key = of<wire::Resync>(said())[0].flows[0].flow_key;
  s_->on_message(rates({{key, 10'000'000, 1'000'000}}), now_);  // 10 MB/s
  (void)s_->take_actions();
  (void)s_->take_drain_queries();
  // When: every byte is handed to the kernel.
  s_->on_sent(kSock, 600'000, now_);
  EXPECT_TRUE(s_->take_drain_queries().empty());
  s_->on_sent(kSock, 400'000, now_);
  ASSERT_EQ(s_->take_drain_queries().size(), 1u);
  // Given: 200 kB unsent = 20 ms at 10 MB/s, far more than the RTT.
  s_->on_unsent(kSock, 200'000, now_);
  EXPECT_TRUE(of<wire::FlowletEnd>(said()).empty());
  // Expect: a look after half a burst's time (64 kB at 10 MB/s: 3.3 ms),
  // sooner than halfway to the predicted drain (the RTT estimate moved from
  // 500 us toward the 0 us sample of the rate above).
  EXPECT_EQ(s_->rtt_us(), (7 * 500 + 0) / 8);
  const std::uint64_t half_burst = Session::kLastBurstBytes * 500'000 / 10'000'000;
  EXPECT_EQ(s_->next_timer_us(), now_ + std::min<std::uint64_t>((20'000 - s_->rtt_us()) / 2, half_burst));
  now_ = s_->next_timer_us();
  s_->on_timer(now_);
  ASSERT_EQ(s_->take_drain_queries().size(), 1u);
  s_->on_unsent(kSock, 150'000, now_);  // slower than predicted: look again
  EXPECT_EQ(s_->next_timer_us(), now_ + half_burst);
  now_ = s_->next_timer_us();
  s_->on_timer(now_);
  ASSERT_EQ(s_->take_drain_queries().size(), 1u);
  // The last burst (<= 64 kB) is predicted: the end goes one RTT and half a
  // burst time before it drains.
  s_->on_unsent(kSock, 50'000, now_);
  EXPECT_EQ(s_->next_timer_us(), now_ + 5'000 - s_->rtt_us() - half_burst);
  EXPECT_TRUE(of<wire::FlowletEnd>(said()).empty());
  now_ = s_->next_timer_us();
  s_->on_timer(now_);
  // Due: one last look, so a write call still under way can hold it off.
  ASSERT_EQ(s_->take_drain_queries().size(), 1u);
  s_->on_unsent(kSock, 30'000, now_, /*writing=*/true);
  EXPECT_TRUE(of<wire::FlowletEnd>(said()).empty());
  EXPECT_EQ(s_->next_timer_us(), now_ + Session::kWritingRecheckUs);
  now_ = s_->next_timer_us();
  s_->on_timer(now_);
  ASSERT_EQ(s_->take_drain_queries().size(), 1u);
  s_->on_unsent(kSock, 25'000, now_);  // the call returned having taken nothing
  // Re-predicted: 25 kB at 10 MB/s is 2.5 ms; end one RTT + half a burst early.
  const std::uint64_t lead = s_->rtt_us() + half_burst;
  EXPECT_EQ(s_->next_timer_us(), now_ + (2'500 > lead ? 2'500 - lead : 0));
  now_ = s_->next_timer_us();
  s_->on_timer(now_);
  ASSERT_EQ(s_->take_drain_queries().size(), 1u);
  s_->on_unsent(kSock, 20'000, now_);
  const auto ends = of<wire::FlowletEnd>(said());
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(ends[0].flow_key, key);
  EXPECT_EQ(s_->stats().ends_in_advance, 1u);
  // The last bytes are still queued: the cap stays so they leave paced, and
  // is lifted once a look at the queue finds it empty.
  EXPECT_TRUE(s_->take_actions().empty());
  EXPECT_EQ(s_->rate_of(kSock), 10'000'000u);
  EXPECT_LE(s_->next_timer_us(), now_);  // look at the queue at once
  EXPECT_EQ(s_->state_of(kSock), FlowletState::kDraining);
  s_->on_timer(now_);
  ASSERT_EQ(s_->take_drain_queries().size(), 1u);
  s_->on_unsent(kSock, 20'000, now_);  // 2 ms at 10 MB/s: look again in 1 ms
  EXPECT_TRUE(s_->take_actions().empty());
  EXPECT_EQ(s_->next_timer_us(), now_ + 1'000);
  now_ = s_->next_timer_us();
  s_->on_timer(now_);
  ASSERT_EQ(s_->take_drain_queries().size(), 1u);
  s_->on_unsent(kSock, 0, now_);
  const auto act = s_->take_actions();
  ASSERT_EQ(act.size(), 1u);
  EXPECT_EQ(act[0].bytes_per_sec, 0u);  // drained: the cap goes
  // A begin after that is a new flowlet; an observed tail shorter than an
  // RTT ends it at once.
  s_->on_begin(kSock, 100'000, {}, now_);
  const auto starts = of<wire::FlowletStart>(said());
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_NE(starts[0].flow_key, key);
  s_->on_message(rates({{starts[0].flow_key, 10'000'000, 1'000'000}}), now_);
  s_->on_sent(kSock, 100'000, now_);
  (void)s_->take_drain_queries();
  s_->on_unsent(kSock, 3'000, now_);  // 300 us < RTT
  EXPECT_EQ(of<wire::FlowletEnd>(said()).size(), 1u);
  EXPECT_EQ(s_->stats().ends_in_advance, 2u);
}

// A long queue is looked at halfway to its predicted drain (at most 50 ms
// on), not every half burst: a 10 MB queue at 10 MB/s (1 s) takes about
// 20 looks to its end, where a look every half burst (3.3 ms) took 306.
TEST_F(SessionTest, ALongQueueIsLookedAtInLogarithmicallyManySteps) {
  s_->on_begin(kSock, 10'000'000, {}, now_);
  const std::uint64_t key = of<wire::Resync>(said())[0].flows[0].flow_key;
  constexpr std::uint64_t kRate = 10'000'000;  // bytes/s
  s_->on_message(rates({{key, kRate, 10'000'000}}), now_);
  (void)s_->take_actions();
  s_->on_sent(kSock, 10'000'000, now_);
  ASSERT_EQ(s_->take_drain_queries().size(), 1u);
  std::uint64_t unsent = 10'000'000;
  s_->on_unsent(kSock, unsent, now_);
  const std::uint64_t start = now_;
  EXPECT_EQ(s_->next_timer_us(), now_ + Session::kFarLookMaxUs) << "far from the end: the cap";
  int looks = 1;
  while (of<wire::FlowletEnd>(said()).empty() && looks < 1000) {
    const std::uint64_t next = s_->next_timer_us();
    ASSERT_GT(next, now_);
    const std::uint64_t drained = (next - now_) * kRate / 1'000'000;
    unsent = drained >= unsent ? 0 : unsent - drained;  // the queue at the cap's rate
    now_ = next;
    s_->on_timer(now_);
    if (s_->take_drain_queries().empty()) continue;  // an end due without a look
    s_->on_unsent(kSock, unsent, now_);
    ++looks;
  }
  EXPECT_LE(looks, 30);
  // And the end still comes within a burst's time of the drain.
  EXPECT_NEAR(static_cast<double>(now_ - start), 1e6, 7'000);
}

// A lapsed lease removes the cap, so a watched queue drains faster than
// its look predicted: it is looked at again at once, not at that look.
TEST_F(SessionTest, ALapsedLeaseLooksAtAWatchedQueueAtOnce) {
  s_->on_begin(kSock, 10'000'000, {}, now_);
  const std::uint64_t key = of<wire::Resync>(said())[0].flows[0].flow_key;
  s_->on_message(rates({{key, 10'000'000, 20'000}}), now_);  // a 20 ms lease
  (void)s_->take_actions();
  s_->on_sent(kSock, 10'000'000, now_);
  ASSERT_EQ(s_->take_drain_queries().size(), 1u);
  s_->on_unsent(kSock, 10'000'000, now_);
  EXPECT_TRUE(s_->take_drain_queries().empty());
  ASSERT_EQ(s_->state_of(kSock), FlowletState::kWatching);
  now_ += 20'000;  // the lease ends 30 ms before the next look was due
  s_->on_timer(now_);
  EXPECT_EQ(s_->rate_of(kSock), 0u) << "the lease lapsed";
  EXPECT_EQ(s_->take_drain_queries().size(), 1u) << "a look at once";
}

TEST_F(SessionTest, PiecewiseWritesAreOneFlowletThatEndsWhenTheQueueDrains) {
  said();
  // Given: a sender that learns sizes only as it writes (the shim).
  s_->on_wrote(kSock, 30'000, now_);
  auto starts = of<wire::FlowletStart>(said());
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].bytes, 30'000u);
  ASSERT_EQ(s_->take_drain_queries().size(), 1u);
  s_->on_message(rates({{starts[0].flow_key, 1'000'000, 1'000'000}}), now_);
  (void)s_->take_drain_queries();
  s_->on_unsent(kSock, 30'000, now_);  // 30 ms of queue: no end yet
  // When: it keeps writing while the queue is non-empty.
  s_->on_wrote(kSock, 30'000, now_);
  s_->on_wrote(kSock, 30'000, now_);
  // Expect: still one flowlet (no new start, no end), and no stale predicted end.
  auto ev = said();
  EXPECT_TRUE(of<wire::FlowletStart>(ev).empty());
  EXPECT_TRUE(of<wire::FlowletEnd>(ev).empty());
  // The allocator's helloAck did not say it reads progress: none is sent.
  EXPECT_TRUE(of<wire::Progress>(ev).empty());
  EXPECT_EQ(s_->stats().flowlets_started, 1u);
  EXPECT_EQ(s_->stats().flowlets_coalesced, 0u);
  (void)s_->take_drain_queries();
  s_->on_unsent(kSock, 0, now_);  // drained
  EXPECT_EQ(of<wire::FlowletEnd>(said()).size(), 1u);
}

// An allocator that reads progress hears how a piecewise-written flowlet
// grows: each time it is half as large again as it last heard (O(log size)
// reports), with the bytes handed over so far.
TEST_F(SessionTest, AGrowingFlowletIsReportedEachTimeItGrowsByHalf) {
  said();
  s_->on_wrote(kSock, 30'000, now_);
  const auto starts = of<wire::FlowletStart>(said());
  ASSERT_EQ(starts.size(), 1u);
  auto ack = rates({{starts[0].flow_key, 1'000'000, 1'000'000}});
  ack.progress_ok = true;
  s_->on_message(ack, now_);
  std::vector<wire::FlowProgress> got;
  for (int i = 0; i < 9; ++i) {
    s_->on_wrote(kSock, 30'000, now_);
    for (const auto& p : of<wire::Progress>(said())) got.insert(got.end(), p.flows.begin(), p.flows.end());
  }
  // 60k >= 45k, 90k >= 90k, 150k >= 135k, 240k >= 225k; 300k < 360k.
  ASSERT_EQ(got.size(), 4u);
  const std::uint64_t sizes[] = {60'000, 90'000, 150'000, 240'000};
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].flow_key, starts[0].flow_key);
    EXPECT_EQ(got[i].bytes, sizes[i]);
    EXPECT_EQ(got[i].sent, sizes[i] - 30'000);  // handed over before this write
  }
  EXPECT_TRUE(of<wire::FlowletStart>(said()).empty());
}

// Growth while the hello was unanswered is told once the helloAck says
// progress is read; an ack without progressOk (an older allocator) hears none.
TEST_F(SessionTest, GrowthBeforeTheHelloAckIsToldWithTheAck) {
  for (bool ok : {true, false}) {
    SessionConfig c;
    c.endpoint_id = "ep";
    c.min_flowlet_bytes = 1000;
    c.initial_rtt_us = 500;
    s_ = std::make_unique<Session>(c);
    s_->on_register(kSock, tuple(1), 1448, now_);
    said();  // the hello goes out
    s_->on_wrote(kSock, 30'000, now_);
    s_->on_wrote(kSock, 10'000, now_);
    auto ev = said();
    ASSERT_EQ(of<wire::FlowletStart>(ev).size(), 1u);
    EXPECT_EQ(of<wire::FlowletStart>(ev)[0].bytes, 30'000u);
    EXPECT_TRUE(of<wire::Progress>(ev).empty());
    auto ack = rates({});
    ack.progress_ok = ok;
    s_->on_message(ack, now_);
    const auto got = of<wire::Progress>(said());
    if (!ok) {
      EXPECT_TRUE(got.empty());
      continue;
    }
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(got[0].flows.size(), 1u);
    EXPECT_EQ(got[0].flows[0].bytes, 40'000u);
    EXPECT_EQ(got[0].flows[0].sent, 40'000u);
  }
}

TEST_F(SessionTest, NewEpochOrNotRegisteredMakesItResendState) {
  s_->on_begin(kSock, 5000, {}, now_);
  s_->on_begin(kOther, 5000, {}, now_);
  said();
  s_->on_message(rates({}, 9), now_);
  s_->on_end(kOther, now_);
  said();
  // When: a reply carries another epoch (the allocator restarted).
  s_->on_message(rates({}, 10), now_);
  auto ev = said();
  // Expect: hello + resync of the one live flowlet, not the history.
  ASSERT_EQ(of<wire::Hello>(ev).size(), 1u);
  ASSERT_EQ(of<wire::Resync>(ev).size(), 1u);
  EXPECT_EQ(of<wire::Resync>(ev)[0].flows.size(), 1u);
  EXPECT_EQ(s_->stats().resyncs, 1u);
  s_->on_message(rates({}, 10), now_);  // acknowledged
  // Same after a notRegistered error, after a short backoff (it may repeat).
  wire::AllocatorMessage err = rates({}, 10);
  err.hello_ack = false;
  err.errors.push_back({wire::ErrorCode::kNotRegistered, "who?", 0});
  s_->on_message(err, now_);
  EXPECT_TRUE(said().empty());
  EXPECT_LE(s_->next_timer_us(), now_ + Session::kMinBackoffUs);
  now_ += Session::kMinBackoffUs;
  s_->on_timer(now_);
  ev = said();
  EXPECT_EQ(of<wire::Resync>(ev).size(), 1u);
  EXPECT_EQ(s_->stats().resyncs, 2u);
}

TEST_F(SessionTest, ExplicitEndAndUnregisterEndOnce) {
  s_->on_begin(kSock, 5000, {}, now_);
  said();
  s_->on_end(kSock, now_);
  s_->on_end(kSock, now_);  // double end: nothing more
  EXPECT_EQ(of<wire::FlowletEnd>(said()).size(), 1u);
  s_->on_begin(kOther, 5000, {}, now_);
  said();
  s_->on_unregister(kOther, now_);
  EXPECT_EQ(of<wire::FlowletEnd>(said()).size(), 1u);
  // Events for an unregistered socket are ignored.
  s_->on_begin(kOther, 5000, {}, now_);
  EXPECT_TRUE(said().empty());
}

TEST_F(SessionTest, HeartbeatsKeepTheEndpointAliveAndRatesAreCappedAtTheHostLink) {
  SessionConfig c;
  c.endpoint_id = "ep";
  c.host = "h0";
  c.max_rate_bytes_per_sec = 1000;
  c.heartbeat_us = 100;
  Session s(c);
  s.on_register(kSock, tuple(1), 0, now_);
  s.on_begin(kSock, 1'000'000, {}, now_);
  auto m = s.take_message(now_);
  ASSERT_TRUE(m);
  EXPECT_EQ(std::get<wire::Hello>(m->events[0]).host_id, "h0");
  const auto key = std::get<wire::Resync>(m->events[1]).flows[0].flow_key;
  s.on_message(rates({{key, 5000, 1'000'000}}), now_);
  EXPECT_EQ(s.link_state(), LinkState::kRegistered);
  EXPECT_EQ(s.rate_of(kSock), 1000u);
  now_ += 150;
  s.on_timer(now_);
  m = s.take_message(now_);
  ASSERT_TRUE(m);
  EXPECT_TRUE(std::holds_alternative<wire::Heartbeat>(m->events.at(0)));
}

TEST_F(SessionTest, NoSocketIsPacedBelowTheFloorUnlessTheHostLinkIsLower) {
  // A rate of 60 B/s would space two segments 48 s apart, and a raise
  // would not pull the next send in: the floor keeps the wait short.
  SessionConfig c;
  c.endpoint_id = "ep";
  c.min_rate_bytes_per_sec = 16'000;
  Session s(c);
  s.on_register(kSock, tuple(1), 0, now_);
  s.on_begin(kSock, 1'000'000, {}, now_);
  auto m = s.take_message(now_);
  ASSERT_TRUE(m);
  const auto key = std::get<wire::Resync>(m->events[1]).flows[0].flow_key;
  s.on_message(rates({{key, 60, 1'000'000}}), now_);
  EXPECT_EQ(s.rate_of(kSock), 16'000u);
  s.on_message(rates({{key, 50'000, 1'000'000}}), now_);
  EXPECT_EQ(s.rate_of(kSock), 50'000u);
  // The host link's cap is a hard bound: it wins over the floor.
  c.max_rate_bytes_per_sec = 1000;
  Session t(c);
  t.on_register(kSock, tuple(1), 0, now_);
  t.on_begin(kSock, 1'000'000, {}, now_);
  m = t.take_message(now_);
  const auto key2 = std::get<wire::Resync>(m->events[1]).flows[0].flow_key;
  t.on_message(rates({{key2, 60, 1'000'000}}), now_);
  EXPECT_EQ(t.rate_of(kSock), 1000u);
}

// ---- repair rules: every loss signal repairs (docs/wire.md) ----

class RepairTest : public SessionTest {
 protected:
  // A registered session with one reported flowlet on kSock, rated.
  std::uint64_t registered_with_rate(std::uint64_t rate = 50'000) {
    s_->on_begin(kSock, 1'000'000, {}, now_);
    const std::uint64_t key = of<wire::Resync>(said()).at(0).flows.at(0).flow_key;
    s_->on_message(rates({{key, rate, 1'000'000}}), now_);
    (void)s_->take_actions();
    EXPECT_EQ(s_->link_state(), LinkState::kRegistered);
    return key;
  }
  wire::AllocatorMessage error(wire::ErrorCode c, std::uint64_t key) {
    wire::AllocatorMessage m = rates({});
    m.hello_ack = false;
    m.errors.push_back({c, "refused", key});
    return m;
  }
};

TEST_F(RepairTest, ALapsedLeaseAsksForTheRateUntilTheAllocatorAnswers) {
  const std::uint64_t key = registered_with_rate();
  // Given: the allocator falls silent past the lease (refreshes stop).
  now_ += 1'000'000;
  s_->on_timer(now_);
  auto act = s_->take_actions();
  ASSERT_EQ(act.size(), 1u);
  EXPECT_EQ(act[0].bytes_per_sec, 0u);  // fail-open: plain TCP meanwhile
  // Expect: a rate request for the flow, at once, then again with backoff.
  auto asks = of<wire::RateRequest>(said());
  ASSERT_EQ(asks.size(), 1u);
  EXPECT_EQ(asks[0].flow_keys, std::vector<std::uint64_t>{key});
  std::uint64_t gaps[3];
  for (std::uint64_t& gap : gaps) {
    const std::uint64_t before = now_;
    now_ = s_->next_timer_us();
    s_->on_timer(now_);
    while (of<wire::RateRequest>(said()).empty()) {
      now_ = s_->next_timer_us();
      s_->on_timer(now_);
    }
    gap = now_ - before;
  }
  EXPECT_LT(gaps[0], gaps[1]);
  EXPECT_LT(gaps[1], gaps[2]);
  // A lease refresh alone does not bring back a cap that lapsed.
  wire::AllocatorMessage refresh = rates({});
  refresh.lease_refresh_us = 1'000'000;
  s_->on_message(refresh, now_);
  EXPECT_EQ(s_->rate_of(kSock), 0u);
  // When the allocator answers with the rate, the cap is back and asking stops.
  s_->on_message(rates({{key, 50'000, 1'000'000}}), now_);
  EXPECT_EQ(s_->rate_of(kSock), 50'000u);
  now_ += 500'000;  // within the lease
  s_->on_timer(now_);
  EXPECT_TRUE(of<wire::RateRequest>(said()).empty());
  EXPECT_GE(s_->stats().rate_requests, 4u);
}

TEST_F(RepairTest, AStartWhoseRateNeverComesIsAskedForAgain) {
  s_->on_begin(kSock, 1'000'000, {}, now_);
  const std::uint64_t key = of<wire::Resync>(said()).at(0).flows.at(0).flow_key;
  s_->on_message(rates({}), now_);  // acknowledged, but no rate (lost)
  now_ += Session::kFirstAskUs;
  s_->on_timer(now_);
  const auto asks = of<wire::RateRequest>(said());
  ASSERT_EQ(asks.size(), 1u);
  EXPECT_EQ(asks[0].flow_keys.at(0), key);
}

TEST_F(RepairTest, ARateLimitedMessageIsRepairedByAResyncThatBacksOff) {
  registered_with_rate();
  s_->on_begin(kOther, 1'000'000, {}, now_);
  said();  // its start: dropped whole by the allocator's rate limit
  s_->on_message(error(wire::ErrorCode::kRateLimited, 0), now_);
  EXPECT_TRUE(said().empty());  // not at once: the limit may still hold
  std::uint64_t last_gap = 0;
  for (int i = 0; i < 4; ++i) {
    const std::uint64_t before = now_;
    std::vector<wire::EndpointEvent> ev;
    for (int turns = 0; turns < 100 && of<wire::Resync>(ev).empty(); ++turns) {
      now_ = s_->next_timer_us();
      s_->on_timer(now_);
      ev = said();
    }
    ASSERT_EQ(of<wire::Resync>(ev).size(), 1u);
    EXPECT_EQ(of<wire::Resync>(ev)[0].flows.size(), 2u);  // both live flowlets
    EXPECT_GE(now_ - before, last_gap / 2);              // doubling, jittered
    // Not within the allocator's quiet time: it would drop the resync unanswered.
    EXPECT_GE(now_ - before, wire::kRateLimitedQuietUs);
    last_gap = now_ - before;
    s_->on_message(error(wire::ErrorCode::kRateLimited, 0), now_);  // limited again
  }
  EXPECT_GE(last_gap, 4 * Session::kMinBackoffUs);
  EXPECT_EQ(s_->stats().resyncs, 4u);
}

TEST_F(RepairTest, ARefusedHelloBacksOffAndTheProgramIsToldOnce) {
  s_->on_begin(kSock, 1'000'000, {}, now_);
  std::uint64_t hellos = 0;
  const std::uint64_t t0 = now_;
  // The allocator refuses every hello for 5 s (unknown host).
  while (now_ < t0 + 5'000'000) {
    const auto ev = said();
    if (!of<wire::Hello>(ev).empty()) {
      ++hellos;
      s_->on_message(error(wire::ErrorCode::kUnknownHost, 0), now_);
    }
    s_->on_begin(kOther, 100'000, {}, now_);  // the program keeps sending
    s_->on_end(kOther, now_);
    now_ = std::max(now_ + 1, std::min(s_->next_timer_us(), now_ + 1000));
    s_->on_timer(now_);
  }
  // Expect: exponential backoff (10 ms doubling: ~10 tries in 5 s, not thousands).
  EXPECT_GE(hellos, 5u);
  EXPECT_LE(hellos, 14u);
  const auto notices = s_->take_notices();
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].text.find("refused"), std::string::npos);
  // When the allocator accepts, the backoff resets.
  while (of<wire::Hello>(said()).empty()) {
    now_ = s_->next_timer_us();
    s_->on_timer(now_);
  }
  s_->on_message(rates({}), now_);
  EXPECT_EQ(s_->link_state(), LinkState::kRegistered);
  EXPECT_EQ(s_->take_notices().size(), 1u);  // "accepted"
}

TEST_F(RepairTest, ARefusedFlowLosesItsCapAndARefreshDoesNotRevive) {
  const std::uint64_t key = registered_with_rate();
  s_->on_begin(kOther, 1'000'000, {}, now_);
  const std::uint64_t other = of<wire::FlowletStart>(said()).at(0).flow_key;
  s_->on_message(rates({{other, 70'000, 1'000'000}}), now_);
  (void)s_->take_actions();
  // When: after an allocator restart, the resync is answered with a refusal
  // of kSock's flow (the new allocator has no room for it).
  s_->on_message(rates({}, 10), now_);
  const auto resync = of<wire::Resync>(said());
  ASSERT_EQ(resync.size(), 1u);
  ASSERT_EQ(resync[0].flows.size(), 2u);
  wire::AllocatorMessage m = rates({}, 10);
  m.errors.push_back({wire::ErrorCode::kTooManyFlows, "full", key});
  s_->on_message(m, now_);
  // Expect: its cap goes at once; the other flow keeps its own.
  auto act = s_->take_actions();
  ASSERT_EQ(act.size(), 1u);
  EXPECT_EQ(act[0].socket, kSock);
  EXPECT_EQ(act[0].bytes_per_sec, 0u);
  EXPECT_EQ(s_->stats().flows_refused, 1u);
  // A later rate for the refused key does not bring it back, and a later
  // resync does not carry it.
  s_->on_message(rates({{key, 50'000, 1'000'000}}), now_);
  EXPECT_EQ(s_->rate_of(kSock), 0u);
  EXPECT_EQ(s_->rate_of(kOther), 70'000u);
  s_->on_message(rates({}, 11), now_);
  const auto again = of<wire::Resync>(said());
  ASSERT_EQ(again.size(), 1u);
  ASSERT_EQ(again[0].flows.size(), 1u);
  EXPECT_EQ(again[0].flows[0].flow_key, other);
}

TEST_F(RepairTest, AnUnknownLiveFlowMakesItResyncButAStaleOneDoesNot) {
  const std::uint64_t key = registered_with_rate();
  s_->on_end(kSock, now_);
  said();
  // An unknownFlow about an ended flowlet (a duplicate end): nothing to repair.
  s_->on_message(error(wire::ErrorCode::kUnknownFlow, key), now_);
  now_ += Session::kMaxBackoffUs;
  s_->on_timer(now_);
  EXPECT_TRUE(of<wire::Resync>(said()).empty());
  // About a live flowlet (its start was lost): resend state.
  s_->on_begin(kOther, 1'000'000, {}, now_);
  const std::uint64_t live = of<wire::FlowletStart>(said()).at(0).flow_key;
  s_->on_message(error(wire::ErrorCode::kUnknownFlow, live), now_);
  now_ = s_->next_timer_us();
  s_->on_timer(now_);
  const auto resync = of<wire::Resync>(said());
  ASSERT_EQ(resync.size(), 1u);
  EXPECT_EQ(resync[0].flows.at(0).flow_key, live);
}

TEST_F(RepairTest, ManyRateRequestsAreSplitWithinTheWireLimits) {
  SessionConfig c;
  c.endpoint_id = "ep";
  c.host = "h";
  c.min_flowlet_bytes = 1;
  Session s(c);
  const int n = 20'000;
  for (int i = 0; i < n; ++i) {
    const SocketRef r{100 + i, 1};
    s.on_register(r, tuple(static_cast<std::uint16_t>(i)), 0, now_);
    s.on_begin(r, 10, {}, now_);
  }
  while (s.take_message(now_)) {
  }
  s.on_message(rates({}), now_);  // registered; no rates at all
  now_ += Session::kFirstAskUs;
  s.on_timer(now_);
  std::size_t keys = 0;
  while (auto m = s.take_message(now_)) {
    std::size_t items = 0;
    for (const auto& e : m->events) {
      items += 1;
      if (const auto* q = std::get_if<wire::RateRequest>(&e)) {
        items += q->flow_keys.size();
        keys += q->flow_keys.size();
      }
    }
    EXPECT_LE(items, wire::kMaxItemsPerMessage);
  }
  EXPECT_EQ(keys, static_cast<std::size_t>(n));
}

// ---- the flowlet state machine, transition by transition ----

class StateTest : public SessionTest {
 protected:
  // Drives kSock (rated at 1 MB/s) into `want` and checks it got there.
  std::uint64_t into(FlowletState want) {
    using S = FlowletState;
    s_->on_begin(kSock, 1'000'000, {}, now_);
    const std::uint64_t key = of<wire::Resync>(said()).at(0).flows.at(0).flow_key;
    s_->on_message(rates({{key, 1'000'000, 10'000'000}}), now_);
    (void)s_->take_actions();
    EXPECT_EQ(s_->state_of(kSock), S::kSending);
    if (want == S::kSending) return key;
    s_->on_sent(kSock, 1'000'000, now_);
    EXPECT_EQ(s_->state_of(kSock), S::kWatching);
    EXPECT_EQ(s_->take_drain_queries().size(), 1u);
    if (want == S::kWatching) return key;
    if (want == S::kDraining) {
      s_->on_end(kSock, now_);
      EXPECT_EQ(s_->state_of(kSock), S::kDraining);
      return key;
    }
    s_->on_unsent(kSock, 60'000, now_);  // the last burst: 60 ms at 1 MB/s
    EXPECT_EQ(s_->state_of(kSock), S::kEndAt);
    if (want == S::kEndAt) return key;
    now_ = s_->next_timer_us();
    s_->on_timer(now_);
    EXPECT_EQ(s_->state_of(kSock), S::kEndDue);
    EXPECT_EQ(s_->take_drain_queries().size(), 1u);
    return key;
  }
};

TEST_F(StateTest, EveryStateReturnsToSendingOnABegin) {
  for (FlowletState from : {FlowletState::kSending, FlowletState::kWatching, FlowletState::kEndAt,
                            FlowletState::kEndDue, FlowletState::kDraining}) {
    SetUp();
    s_ = std::make_unique<Session>(SessionConfig{"ep", "", 1000, 0, 1'000'000, 500});
    s_->on_register(kSock, tuple(1), 1448, now_);
    into(from);
    s_->on_begin(kSock, 5000, {}, now_);
    EXPECT_EQ(s_->state_of(kSock), FlowletState::kSending) << to_string(from);
    EXPECT_EQ(s_->active_flowlets(), 1u) << to_string(from);
  }
}

TEST_F(StateTest, EndDueEndsUnlessAWriteIsUnderWay) {
  const std::uint64_t key = into(FlowletState::kEndDue);
  s_->on_unsent(kSock, 30'000, now_, /*writing=*/true);
  EXPECT_EQ(s_->state_of(kSock), FlowletState::kWatching);
  now_ = s_->next_timer_us();
  s_->on_timer(now_);
  ASSERT_EQ(s_->take_drain_queries().size(), 1u);
  s_->on_unsent(kSock, 100, now_);  // drains within the RTT: the end, in advance
  EXPECT_EQ(s_->state_of(kSock), FlowletState::kDraining);
  const auto ends = of<wire::FlowletEnd>(said());
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(ends[0].flow_key, key);
  EXPECT_EQ(s_->active_flowlets(), 0u);
}

TEST_F(StateTest, DrainingLiftsTheCapOnlyWhenTheQueueIsEmpty) {
  into(FlowletState::kDraining);
  EXPECT_EQ(s_->rate_of(kSock), 1'000'000u);
  // The look taken while watching answers for the drain too.
  s_->on_timer(now_);
  EXPECT_TRUE(s_->take_drain_queries().empty());
  s_->on_unsent(kSock, 10'000, now_);
  EXPECT_EQ(s_->state_of(kSock), FlowletState::kDraining);
  EXPECT_TRUE(s_->take_actions().empty());
  now_ = s_->next_timer_us();
  s_->on_timer(now_);
  ASSERT_EQ(s_->take_drain_queries().size(), 1u);
  s_->on_unsent(kSock, 0, now_);
  EXPECT_EQ(s_->state_of(kSock), FlowletState::kIdle);
  const auto act = s_->take_actions();
  ASSERT_EQ(act.size(), 1u);
  EXPECT_EQ(act[0].bytes_per_sec, 0u);
}

TEST_F(StateTest, ALapsedLeaseWhileDrainingIsIdle) {
  into(FlowletState::kDraining);
  now_ += 10'000'001;
  s_->on_timer(now_);
  EXPECT_EQ(s_->state_of(kSock), FlowletState::kIdle);
  EXPECT_EQ(s_->rate_of(kSock), 0u);
}

TEST_F(StateTest, AMouseAfterATailDropsTheTailsCap) {
  into(FlowletState::kDraining);
  s_->on_begin(kSock, 10, {}, now_);  // below min_flowlet_bytes: unscheduled
  EXPECT_EQ(s_->state_of(kSock), FlowletState::kSending);
  EXPECT_EQ(s_->rate_of(kSock), 0u);
}

TEST_F(StateTest, ALookInFlightIsNeverDoubled) {
  into(FlowletState::kWatching);
  // A rate arrives while the first look is on its way: no second look.
  s_->on_message(rates({}), now_);
  s_->on_begin(kSock, 10, {}, now_);
  s_->on_sent(kSock, 10, now_);
  EXPECT_TRUE(s_->take_drain_queries().empty());
}

// ---- hot standby: several allocators listed (config.failover) ----

class FailoverTest : public RepairTest {
 protected:
  FailoverTest() {
    SessionConfig c;
    c.endpoint_id = "ep";
    c.min_flowlet_bytes = 1000;
    c.heartbeat_us = 1'000'000;
    c.failover = true;
    s_ = std::make_unique<Session>(c);
    s_->on_register(kSock, tuple(1), 1448, now_);
  }
};

TEST_F(FailoverTest, AStandbyAnswerAsksToMoveOnWithoutTakingItsEpochOrCountingARefusal) {
  const std::uint64_t key = registered_with_rate();
  ASSERT_FALSE(s_->failover_due(now_));
  wire::AllocatorMessage standby = error(wire::ErrorCode::kStandby, 0);
  standby.epoch = 77;
  s_->on_message(standby, now_);
  EXPECT_TRUE(s_->failover_due(now_));
  EXPECT_EQ(s_->stats().hellos_refused, 0u);
  EXPECT_TRUE(s_->take_notices().empty());  // no "refused" to the program
  EXPECT_EQ(s_->rate_of(kSock), 50'000u);   // the cap stays until its lease says
  // When: the runtime has moved to the next allocator.
  s_->on_allocator_switched(now_);
  EXPECT_FALSE(s_->failover_due(now_));
  // Expect: hello + resync at once, no backoff.
  const auto ev = said();
  ASSERT_EQ(of<wire::Hello>(ev).size(), 1u);
  ASSERT_EQ(of<wire::Resync>(ev).size(), 1u);
  EXPECT_EQ(of<wire::Resync>(ev)[0].flows.at(0).flow_key, key);
}

TEST_F(FailoverTest, LateRatesOfTheAllocatorLeftAreIgnored) {
  const std::uint64_t key = registered_with_rate();  // epoch 9
  s_->on_allocator_switched(now_);
  (void)said();
  // A late message of the allocator left, with another rate: not ours now.
  s_->on_message(rates({{key, 1'000, 1'000'000}}, 9), now_);
  (void)s_->take_actions();
  EXPECT_EQ(s_->rate_of(kSock), 50'000u);
  EXPECT_EQ(s_->link_state(), LinkState::kHelloSent);
  // The new one's answer, epoch 12, is taken, its rate applied.
  s_->on_message(rates({{key, 80'000, 1'000'000}}, 12), now_);
  (void)s_->take_actions();
  EXPECT_EQ(s_->link_state(), LinkState::kRegistered);
  EXPECT_EQ(s_->rate_of(kSock), 80'000u);
}

// Registered with A, moved to B (a standby), back to A: A, still active
// under the epoch left first, must be heard again; B's late answers not.
TEST_F(FailoverTest, BackAtTheAllocatorLeftFirstItsAnswersCountAndTheStandbysDoNot) {
  const std::uint64_t key = registered_with_rate();  // A, epoch 9
  s_->on_allocator_switched(now_);                   // to B
  (void)said();
  wire::AllocatorMessage standby = error(wire::ErrorCode::kStandby, 0);
  standby.epoch = 77;
  s_->on_message(standby, now_);
  ASSERT_TRUE(s_->failover_due(now_));
  s_->on_allocator_switched(now_);  // back to A
  EXPECT_FALSE(s_->stats().connected);
  ASSERT_EQ(of<wire::Hello>(said()).size(), 1u);
  s_->on_message(standby, now_);  // B's late second answer: ignored
  EXPECT_FALSE(s_->failover_due(now_));
  s_->on_message(rates({{key, 70'000, 1'000'000}}, 9), now_);  // A acknowledges
  (void)s_->take_actions();
  EXPECT_EQ(s_->link_state(), LinkState::kRegistered);
  EXPECT_EQ(s_->rate_of(kSock), 70'000u);
  EXPECT_TRUE(s_->stats().connected);
}

// A standby answers, then takes over before the runtime has moved on (it
// waits out a round's backoff) and acknowledges the hello sent again: the
// session stays with it.
TEST_F(FailoverTest, AStandbyThatTakesOverBeforeTheMoveIsKept) {
  s_->on_begin(kSock, 1'000'000, {}, now_);
  (void)said();
  wire::AllocatorMessage standby = error(wire::ErrorCode::kStandby, 0);
  standby.epoch = 77;
  s_->on_message(standby, now_);
  ASSERT_TRUE(s_->failover_due(now_));
  now_ += Session::kMaxBackoffUs;  // the resync's backoff, whatever it drew
  s_->on_timer(now_);
  ASSERT_EQ(of<wire::Hello>(said()).size(), 1u);
  s_->on_message(rates({}, 78), now_);  // active now, a new epoch: acknowledged
  EXPECT_EQ(s_->link_state(), LinkState::kRegistered);
  EXPECT_FALSE(s_->failover_due(now_));
}

TEST_F(FailoverTest, AHelloUnansweredForTwoHeartbeatsAsksToMoveOn) {
  s_->on_begin(kSock, 1'000'000, {}, now_);
  ASSERT_EQ(of<wire::Hello>(said()).size(), 1u);
  const std::uint64_t sent = now_;
  // Heartbeats do not count as answers; only a message from the allocator does.
  for (now_ = sent; now_ < sent + Session::kSilentHeartbeats * 1'000'000; now_ += 100'000) {
    EXPECT_FALSE(s_->failover_due(now_)) << now_ - sent;
    s_->on_timer(now_);
    (void)said();
  }
  EXPECT_LE(s_->next_timer_us(), sent + Session::kSilentHeartbeats * 1'000'000);
  EXPECT_TRUE(s_->failover_due(sent + Session::kSilentHeartbeats * 1'000'000));
}

TEST_F(FailoverTest, AnswersKeepTheSilenceRuleQuietAndASingleAllocatorNeverFailsOver) {
  registered_with_rate();
  for (int i = 0; i < 50; ++i) {
    now_ += 100'000;
    s_->on_timer(now_);
    (void)said();
    s_->on_message(rates({}), now_);  // a lease refresh or an answer now and then
    EXPECT_FALSE(s_->failover_due(now_));
  }
  // One allocator listed: a standby's answer is retried later, never a move.
  SessionConfig c;
  c.endpoint_id = "solo";
  Session solo(c);
  wire::AllocatorMessage standby = error(wire::ErrorCode::kStandby, 0);
  solo.on_message(standby, now_);
  EXPECT_FALSE(solo.failover_due(now_ + 100'000'000));
}

}  // namespace
}  // namespace flowtune::client
