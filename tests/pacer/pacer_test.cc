// HostPacer: what the host is shaped to, from the allocator's messages and
// the lease (no tc here: the e2e smoke runs flowtune-pacer for real); and
// flowtune-pacer's refusal of bad flags.
#include "flowtune/pacer/pacer.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace flowtune::pacer {
namespace {

PacerConfig config() {
  PacerConfig c;
  c.link_bps = 1e9;
  c.overhead = 1.05;
  c.margin = 0.02;
  c.floor_bps = 10e6;
  c.lease_us = 1'000'000;
  c.idle_hold_us = 0;
  c.lower_hysteresis = 0;
  return c;
}

wire::AllocatorMessage told(std::uint64_t host_rate) {
  wire::AllocatorMessage m;
  m.host_rate = host_rate;
  return m;
}

TEST(HostPacer, ShapesToTheSumOnTheWireWithMarginAndFloor) {
  HostPacer p(config());
  // 100 Mbit/s of payload: 100e6 * 1.05 * 1.02 + 10e6 on the wire.
  const auto bps = p.on_message(told(12'500'000), 0);
  ASSERT_TRUE(bps.has_value());
  EXPECT_DOUBLE_EQ(bps->bps, 100e6 * 1.05 * 1.02 + 10e6);
  // A tiny allocation: the floor plus next to nothing, or the minimum.
  HostPacer q(config());
  EXPECT_NEAR(q.shaping_bps(10), 10e6, 100);
  PacerConfig c0 = config();
  c0.floor_bps = 0;
  EXPECT_NEAR(HostPacer(c0).shaping_bps(10), 10 * 8 * 1.05 * 1.02, 1e-6);
  c0.min_bps = 1e6;
  EXPECT_DOUBLE_EQ(HostPacer(c0).shaping_bps(10), 1e6);
  // More than the link is the link.
  EXPECT_DOUBLE_EQ(p.shaping_bps(200'000'000), 1e9);
  // Nothing rated: the idle rate (the link by default, or as configured).
  EXPECT_DOUBLE_EQ(p.shaping_bps(0), 1e9);
  PacerConfig c = config();
  c.idle_bps = 50e6;
  EXPECT_DOUBLE_EQ(HostPacer(c).shaping_bps(0), 50e6);
}

TEST(HostPacer, ReportsAChangeOnlyWhenTheRateMoves) {
  HostPacer p(config());
  EXPECT_TRUE(p.on_message(told(1'000'000), 0).has_value());
  EXPECT_FALSE(p.on_message(told(1'000'000), 10).has_value());
  EXPECT_TRUE(p.on_message(told(2'000'000), 20).has_value());
  EXPECT_EQ(p.host_rate(), 2'000'000u);
}

TEST(HostPacer, RaisesApplyAtOnceAndSmallCutsWait) {
  PacerConfig c = config();
  c.lower_hysteresis = 0.05;
  HostPacer p(c);
  const double first = p.on_message(told(12'500'000), 0)->bps;
  // 3% less: kept.
  EXPECT_FALSE(p.on_message(told(12'125'000), 10).has_value());
  EXPECT_DOUBLE_EQ(p.current_bps(), first);
  // 10% less: applied.
  EXPECT_TRUE(p.on_message(told(11'250'000), 20).has_value());
  // Any raise: applied.
  const auto up = p.on_message(told(11'300'000), 30);
  ASSERT_TRUE(up.has_value());
  EXPECT_GT(up->bps, p.shaping_bps(11'250'000));
}

// With a raise slack, a raise goes that far above the allocation and the
// raises within it, and cuts within the hysteresis, change nothing: a run
// of small moves costs one change instead of one each.
TEST(HostPacer, ARaiseSlackAbsorbsTheSmallRaisesAfterIt) {
  PacerConfig c = config();
  c.lower_hysteresis = 0.05;
  c.raise_slack = 0.05;
  HostPacer p(c);
  ASSERT_TRUE(p.on_message(told(12'500'000), 0).has_value());
  const auto up = p.on_message(told(13'000'000), 10);
  ASSERT_TRUE(up.has_value());
  EXPECT_DOUBLE_EQ(up->bps, p.shaping_bps(13'000'000) * 1.05);
  int changes = 0;
  for (std::uint64_t r : {13'200'000u, 13'400'000u, 13'000'000u, 13'600'000u, 13'100'000u}) {
    changes += p.on_message(told(r), 20).has_value() ? 1 : 0;
  }
  EXPECT_EQ(changes, 0);
  // Past the slack: a change again, never above the link.
  EXPECT_TRUE(p.on_message(told(14'000'000), 30).has_value());
  EXPECT_DOUBLE_EQ(p.on_message(told(200'000'000), 40)->bps, 1e9);
  // The slack alone (no cut hysteresis) keeps the same band.
  PacerConfig alone = config();
  alone.raise_slack = 0.05;
  HostPacer a(alone);
  ASSERT_TRUE(a.on_message(told(12'500'000), 0).has_value());
  ASSERT_TRUE(a.on_message(told(13'000'000), 10).has_value());
  EXPECT_FALSE(a.on_message(told(13'000'000), 15).has_value()) << "the same allocation again";
  EXPECT_FALSE(a.on_message(told(13'300'000), 20).has_value()) << "a raise within the slack";
  EXPECT_FALSE(a.on_message(told(13'500'000), 30).has_value()) << "a raise within the slack";
  EXPECT_FALSE(a.on_message(told(13'100'000), 35).has_value()) << "back down, still above";
  EXPECT_TRUE(a.on_message(told(12'900'000), 40).has_value()) << "below the raise: a cut";
  // With no raise before it, the slack holds back no cut.
  HostPacer b(alone);
  ASSERT_TRUE(b.on_message(told(12'500'000), 0).has_value());
  EXPECT_TRUE(b.on_message(told(12'000'000), 10).has_value()) << "a cut with no raise before it";
  // Without the slack every raise is a change.
  HostPacer q(config());
  ASSERT_TRUE(q.on_message(told(12'500'000), 0).has_value());
  EXPECT_TRUE(q.on_message(told(12'600'000), 10).has_value());
  EXPECT_TRUE(q.on_message(told(12'700'000), 20).has_value());
}

TEST(HostPacer, ASilentAllocatorReturnsTheHostToTheLinkRateAfterALease) {
  HostPacer p(config());
  ASSERT_TRUE(p.on_message(told(1'000'000), 0).has_value());
  // Within the lease: nothing happens.
  EXPECT_FALSE(p.on_tick(999'999).has_value());
  EXPECT_EQ(p.next_tick_us(), 1'000'000u);
  // A message extends it.
  EXPECT_FALSE(p.on_message(told(1'000'000), 500'000).has_value());
  EXPECT_FALSE(p.on_tick(1'400'000).has_value());
  // Past it: the link rate, once.
  const auto bps = p.on_tick(1'500'000);
  ASSERT_TRUE(bps.has_value());
  EXPECT_DOUBLE_EQ(bps->bps, 1e9);
  EXPECT_FALSE(p.leased());
  EXPECT_FALSE(p.on_tick(3'000'000).has_value());
  EXPECT_EQ(p.next_tick_us(), UINT64_MAX);
}

TEST(HostPacer, AnIdleHostKeepsItsLastRateForTheHoldThenGoesIdle) {
  PacerConfig c = config();
  c.idle_hold_us = 100'000;
  c.idle_bps = 0;  // the link
  HostPacer p(c);
  const double rated = p.on_message(told(12'500'000), 0)->bps;
  // The last flow ends: the rate is held.
  EXPECT_FALSE(p.on_message(told(0), 10'000).has_value());
  EXPECT_DOUBLE_EQ(p.current_bps(), rated);
  EXPECT_EQ(p.next_tick_us(), 110'000u);
  // A refresh within the hold does not restart it.
  EXPECT_FALSE(p.on_message(told(0), 50'000).has_value());
  EXPECT_FALSE(p.on_tick(109'999).has_value());
  // The hold ends: the idle rate.
  const auto idle = p.on_tick(110'000);
  ASSERT_TRUE(idle.has_value());
  EXPECT_DOUBLE_EQ(idle->bps, 1e9);
  // A new rated flow within a hold cancels it.
  ASSERT_TRUE(p.on_message(told(1'000'000), 200'000).has_value());
  EXPECT_FALSE(p.on_message(told(0), 210'000).has_value());
  ASSERT_TRUE(p.on_message(told(2'000'000), 220'000).has_value());
  EXPECT_FALSE(p.on_tick(310'000).has_value());
  EXPECT_EQ(p.host_rate(), 2'000'000u);
}

// Rates on the wire equal the allocation (no margin, floor or overhead), a
// bucket of 200 us at the rate, two frames at least.
PacerConfig bucket_config() {
  PacerConfig c = config();
  c.floor_bps = 0;
  c.margin = 0;
  c.overhead = 1;
  c.burst_bytes = 3028;
  c.burst_us = 200;
  return c;
}

TEST(HostPacer, TheBucketCoversBurstTimeAtTheAllocationAndStaysSmallWhenIdle) {
  PacerConfig c = bucket_config();
  HostPacer p(c);
  // 800 Mbit/s for 200 us: 20 kB.
  const auto fast = p.on_message(told(100'000'000), 0);
  ASSERT_TRUE(fast.has_value());
  EXPECT_DOUBLE_EQ(fast->bps, 800e6);
  EXPECT_EQ(fast->burst_bytes, 20'000u);
  // 8 Mbit/s for 200 us is 200 bytes: two frames at least.
  const auto slow = p.on_message(told(1'000'000), 10);
  ASSERT_TRUE(slow.has_value());
  EXPECT_EQ(slow->burst_bytes, 3028u);
  // Idle (nothing rated, no hold): the link's rate with the small bucket, so
  // hosts that idled together cannot burst together.
  const auto idle = p.on_message(told(0), 20);
  ASSERT_TRUE(idle.has_value());
  EXPECT_DOUBLE_EQ(idle->bps, 1e9);
  EXPECT_EQ(idle->burst_bytes, 3028u);
  // The lease lapses: the link with the link's bucket (as unshaped as tbf gets).
  const auto lapsed = p.on_tick(2'000'000);
  ASSERT_TRUE(lapsed.has_value());
  EXPECT_DOUBLE_EQ(lapsed->bps, 1e9);
  EXPECT_EQ(lapsed->burst_bytes, 25'000u);
  // burst_us 0: the constant bucket.
  c.burst_us = 0;
  EXPECT_EQ(HostPacer(c).bucket_bytes(800e6, true), 3028u);
  // The same rate with only the bucket changing is a change.
  c.burst_us = 200;
  c.idle_bps = 800e6;
  HostPacer q(c);
  ASSERT_TRUE(q.on_message(told(100'000'000), 0).has_value());
  const auto same_rate = q.on_message(told(0), 10);
  ASSERT_TRUE(same_rate.has_value());
  EXPECT_EQ(same_rate->burst_bytes, 3028u);
}

TEST(HostPacer, FrequentChangesKeepTheSmallBucketSoFillsStayAShareOfTheRate) {
  PacerConfig c = bucket_config();
  c.burst_gap_share = 0.05;
  HostPacer p(c);
  // No change before: the whole burst time (800 Mbit/s for 200 us).
  EXPECT_EQ(p.on_message(told(100'000'000), 0)->burst_bytes, 20'000u);
  // 1 ms later: 5% of it, 50 us at 720 Mbit/s.
  EXPECT_EQ(p.on_message(told(90'000'000), 1'000)->burst_bytes, 4'500u);
  // 100 us later: 5 us at 640 Mbit/s is less than two frames.
  EXPECT_EQ(p.on_message(told(80'000'000), 1'100)->burst_bytes, 3'028u);
  // The same rate again soon (a refresh) changes nothing, not even a smaller
  // bucket; later it grows the bucket, the gap having earned it.
  EXPECT_FALSE(p.on_message(told(80'000'000), 1'200).has_value());
  const auto grown = p.on_message(told(80'000'000), 5'100);
  ASSERT_TRUE(grown.has_value());
  EXPECT_DOUBLE_EQ(grown->bps, 640e6);
  EXPECT_EQ(grown->burst_bytes, 16'000u);
  // Over many changes 100 us apart, the fills beyond the two-frame bucket
  // add up to at most 5% of what the rate sent, plus the first full bucket.
  HostPacer q(c);
  double extra = 0, sent = 0;
  std::uint64_t t = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::uint64_t gap = 100 + 37 * (i % 7);
    if (i > 0) sent += 99e6 * static_cast<double>(gap) / 1e6;  // the lower of the two rates
    t += gap;
    const auto s = q.on_message(told(100'000'000 - (i % 2) * 1'000'000), t);
    ASSERT_TRUE(s.has_value());
    extra += s->burst_bytes - 3028.0;
  }
  EXPECT_LE(extra, 0.05 * sent + 20'000);
  EXPECT_GT(extra, 0.0);
  // Share 1: every change gets the whole burst time.
  c.burst_gap_share = 1;
  HostPacer r(c);
  ASSERT_TRUE(r.on_message(told(100'000'000), 0).has_value());
  EXPECT_EQ(r.on_message(told(90'000'000), 200)->burst_bytes, 18'000u);
}

TEST(Shaper, TheTbfSplitsEveryPacketLargerThanTheSmallestBucket) {
  // The peak bucket caps what tbf queues whole at the smallest bucket, so a
  // bucket that shrinks can never strand a GSO packet queued under a larger
  // one; the peak rate is far above the link, never the limit.
  const std::string l = tbf_line("eth0", Qdisc::kTbf, 1e9, 3028, "change", Shape{5e8, 20'000});
  EXPECT_EQ(l,
            "qdisc change dev eth0 root handle 1: tbf rate 500000000bit burst 20000 "
            "peakrate 1000000000000bit mtu 3028 limit 8000000");
  // Under htb, which classifies, the tbf is the data class's leaf.
  const std::string h = tbf_line("v1", Qdisc::kHtb, 1e8, 3028, "add", Shape{1e6, 3028});
  EXPECT_NE(h.find("parent 1:2 handle 10: tbf rate 1000000bit burst 3028 "), std::string::npos)
      << h;
}

TEST(HostPacer, BadConfigurationsAreRefusedByName) {
  PacerConfig c = config();
  EXPECT_NO_THROW(validate(c));
  c.burst_bytes = 1000;
  EXPECT_THROW(validate(c), std::invalid_argument);
  c = config();
  c.margin = -0.1;
  EXPECT_THROW(validate(c), std::invalid_argument);
  c = config();
  c.floor_bps = 2e9;
  EXPECT_THROW(validate(c), std::invalid_argument);
  c = config();
  c.link_bps = 0;
  EXPECT_THROW(validate(c), std::invalid_argument);
  c = config();
  c.burst_us = 2'000'000;
  EXPECT_THROW(validate(c), std::invalid_argument);
  c = config();
  c.burst_gap_share = 0;
  EXPECT_THROW(validate(c), std::invalid_argument);
}

TEST(SmallPackets, EachTestFromBelowItsThresholdUntilTwiceIt) {
  const PacketSizeRule r{5e6, 100e6};
  const double fast_host = 1e9;
  const auto after = [&](PacketSizeState now, double flow, double host) {
    return small_packets(now, flow, host, r);
  };
  const PacketSizeState none, by_flows{true, false}, by_host{false, true};
  EXPECT_FALSE(after(none, 100e6, fast_host).small());
  EXPECT_TRUE(after(none, 1e6, fast_host).by_flows);
  // Once on, a flow rate between the threshold and twice it keeps it on...
  EXPECT_TRUE(after(by_flows, 8e6, fast_host).small());
  // ...and a rate there does not turn it on from off.
  EXPECT_FALSE(after(none, 8e6, fast_host).small());
  EXPECT_FALSE(after(by_flows, 10e6, fast_host).small());
  // A slow host turns small even when its one flow is fast for the flow
  // test, and stays so up to twice the host threshold.
  EXPECT_TRUE(after(none, 50e6, 50e6).by_host);
  EXPECT_TRUE(after(by_host, 150e6, 150e6).small());
  EXPECT_FALSE(after(none, 150e6, 150e6).small());
  EXPECT_FALSE(after(by_host, 200e6, 200e6).small());
  // One test's band does not hold the other's decision: small by the flow
  // test, then flows at 25 Mbit/s on a host shaped at 160 Mbit/s, inside
  // the host test's band but never below its threshold.
  EXPECT_FALSE(after(by_flows, 25e6, 160e6).small());
  // Many slow flows on a fast host: the flow test alone decides.
  EXPECT_TRUE(after(none, 4e6, 240e6).small());
  EXPECT_FALSE(after(none, 29e6, 470e6).small());
  // No allocation (host < 0): the host test is off.
  EXPECT_FALSE(after(by_host, 50e6, -1).small());
  // 0 turns a test off; both 0, never, even for a starved host.
  EXPECT_FALSE(small_packets(none, 50e6, 50e6, {5e6, 0}).small());
  EXPECT_TRUE(small_packets(none, 50e6, 50e6, {0, 100e6}).small());
  EXPECT_FALSE(small_packets(none, 1e3, 1e3, {0, 0}).small());
  EXPECT_FALSE(small_packets({true, true}, 1e3, 1e3, {0, 0}).small());
}

TEST(SmallPackets, NothingBeforeTheFirstShapeAndNoHostTestWhileIdle) {
  const PacketSizeRule r{5e6, 100e6};
  PacerConfig c = config();
  c.link_bps = 100e6;  // a host link below the host threshold
  c.floor_bps = 0;
  c.idle_hold_us = 0;
  HostPacer p(c);
  // Before any message: nothing is known, the state stays as it was.
  EXPECT_FALSE(p.packet_size({}, r).small());
  EXPECT_TRUE(p.packet_size({true, false}, r).small());
  // Allocated 40 Mbit/s (one flow): small by the host test.
  wire::AllocatorMessage m = told(5'000'000);
  m.host_flows = 1;
  ASSERT_TRUE(p.on_message(m, 0).has_value());
  PacketSizeState st = p.packet_size({}, r);
  EXPECT_TRUE(st.by_host);
  EXPECT_FALSE(st.by_flows);
  // Idle (no rated flow): shaped to the link, no allocation: back to the
  // kernel's packets although the link is below twice the threshold.
  ASSERT_TRUE(p.on_message(told(0), 10).has_value());
  EXPECT_LT(p.current_bps(), 2 * r.host_below_bps);
  EXPECT_FALSE(p.packet_size(st, r).small());
}

TEST(SmallPackets, GoByTheFlowsMeanRateNotTheHostsTotal) {
  // 60 flows sharing 240 Mbit/s: each socket is paced at 4 Mbit/s, where a
  // 64 KB packet is 130 ms of its rate, though the host is shaped high.
  HostPacer p(config());
  wire::AllocatorMessage m = told(30'000'000);
  m.host_flows = 60;
  ASSERT_TRUE(p.on_message(m, 0).has_value());
  EXPECT_GT(p.current_bps(), 240e6);
  EXPECT_DOUBLE_EQ(p.mean_flow_bps(), 4e6);
  // One flow at the same total runs at it.
  m.host_flows = 1;
  (void)p.on_message(m, 10);
  EXPECT_DOUBLE_EQ(p.mean_flow_bps(), 240e6);
  // No count (nothing rated, or an allocator that does not send it): the
  // shaped rate, as before.
  (void)p.on_message(told(30'000'000), 20);
  EXPECT_DOUBLE_EQ(p.mean_flow_bps(), p.current_bps());
}

// Bad flags end the pacer with status 2 and the reason, before it touches
// tc (so this needs no root).
TEST(PacerCli, RefusesBadValuesBeforeStarting) {
  const auto run = [](const std::string& args) {
    std::string out;
    std::FILE* p = ::popen((std::string(FT_PACER_BINARY) + " " + args + " 2>&1").c_str(), "r");
    EXPECT_NE(p, nullptr);
    char buf[512];
    while (p != nullptr && std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
    const int st = p != nullptr ? ::pclose(p) : -1;
    return std::pair<int, std::string>{WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
  };
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"--dev lo --host h1 --allocator tcp://127.0.0.1:99999", "port '99999' is not 0-65535"},
           {"--dev lo --host h1 --link-rate 0x10mbit", "expected a rate such as 1gbit"},
           {"--dev lo --host h1 --link-rate infbit", "expected a rate such as 1gbit"},
           {"--dev lo --host h1 --small-tso-below 10mbps", "expected a rate such as 1gbit"},
           {"--dev lo --host h1 --lease-ms 1e300", "--lease-ms expects a number from 0 to 3600000"},
           {"--dev lo --host h1 --curve-key /nonexistent.key", "not the allocator's public key"},
           {"--dev lo --host h1 --curve-server short", "CURVE: the allocator's public key: short"}}) {
    const auto [status, out] = run(args);
    EXPECT_EQ(status, 2) << args << ": " << out;
    EXPECT_NE(out.find(says), std::string::npos) << args << ": " << out;
  }
}

}  // namespace
}  // namespace flowtune::pacer
