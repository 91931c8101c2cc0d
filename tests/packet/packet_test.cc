// flowtune-packet against closed forms (one flow at line rate, N flows at 1/N
// under Flowtune, DCTCP's queue near K, control messages after their path's
// delay), the quick run's robust facts, the metrics and the CLI.
#include "packet.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>

namespace flowtune::packet {
namespace {

// Goodput of one data packet's payload on the wire (IPv4, TCP with
// timestamps, PPP: 54 bytes of headers per 1,448 of payload).
constexpr double kPayloadShare = 1448.0 / (1448.0 + 54.0);

Config star(std::uint32_t hosts, Scheme s) {
  Config c;
  c.shape = Shape::kStar;
  c.star_hosts = hosts;
  c.scheme = s;
  c.traffic = Traffic::kGiven;
  c.drain_ms = 20;
  return c;
}

// Mean goodput of a flow over bins [from, to), Gbit/s.
double goodput_gbps(const Config& c, const FlowResult& f, std::size_t from, std::size_t to) {
  if (f.bins.size() < to) return 0;
  const double bytes = std::accumulate(f.bins.begin() + static_cast<long>(from),
                                       f.bins.begin() + static_cast<long>(to), 0.0);
  return bytes * 8 / (static_cast<double>(to - from) * c.bin_us * 1e-6) / 1e9;
}

TEST(PacketSanity, OneLongFlowReachesLineRate) {
  for (Scheme s : {Scheme::kFlowtune, Scheme::kCubic}) {
    Config c = star(2, s);
    c.flows = {{0, 1, 4'000'000, 0, 0}};
    c.bin_us = 100;
    Result r = run(c);
    ASSERT_EQ(r.flows.size(), 1u);
    ASSERT_GE(r.flows[0].end_s, 0) << to_string(s);
    // Bins 5-25 (0.5-2.5 ms): past the handshake and the first rate.
    const double g = goodput_gbps(c, r.flows[0], 5, 25);
    const double line = c.host_gbps * kPayloadShare;
    EXPECT_GT(g, 0.96 * line) << to_string(s);
    EXPECT_LT(g, 1.001 * line) << to_string(s);
  }
}

TEST(PacketSanity, FlowtuneGivesNFlowsOnOneLinkOneNthEach) {
  Config c = star(5, Scheme::kFlowtune);
  for (std::uint32_t i = 1; i <= 4; ++i) c.flows.push_back({i, 0, 3'000'000, 0, 0});
  c.bin_us = 100;
  Result r = run(c);
  const double share = c.host_gbps * kPayloadShare * rules::capacity_scale(c.threshold, 0) / 4;
  for (const auto& f : r.flows) {
    ASSERT_GE(f.end_s, 0);
    const double g = goodput_gbps(c, f, 5, 25);
    EXPECT_NEAR(g, share, 0.03 * share) << "flow from " << f.spec.src;
  }
  // No queue builds at the receiver's port: paced at 99% of the link.
  EXPECT_LT(r.hops[3].queue_delay_us.p99, 5.0);
  EXPECT_EQ(r.hops[3].dropped_bytes, 0u);
}

TEST(PacketSanity, DctcpQueueStaysNearK) {
  Config c = star(5, Scheme::kDctcp);
  c.dctcp_k_packets = 30;
  for (std::uint32_t i = 1; i <= 4; ++i) c.flows.push_back({i, 0, 4'000'000, 0, 0});
  c.queue_host = 0;
  c.queue_sample_us = 5;
  Result r = run(c);
  for (const auto& f : r.flows) ASSERT_GE(f.end_s, 0);
  // Samples while all four send (0.2-2 ms), not the ramp or the tail.
  std::vector<double> q(r.queue_samples.begin() + 40, r.queue_samples.begin() + 400);
  const Distribution d = summarize(q);
  const double k = c.dctcp_k_packets;
  EXPECT_GT(d.p50, 0.5 * k);
  EXPECT_LT(d.p50, 1.5 * k);
  EXPECT_LT(d.max, 2.5 * k);
  EXPECT_GT(r.hops[3].marked_packets, 0u);
  EXPECT_EQ(r.hops[3].dropped_packets, 0u);
}

TEST(PacketSanity, ControlMessagesArriveAfterTheirPathsDelay) {
  Config c = star(2, Scheme::kFlowtune);
  c.link_delay_us = 5;
  c.flows = {{0, 1, 10'000, 0, 0}, {1, 0, 10'000, 0.001, 0}};
  Result r = run(c);
  ASSERT_EQ(r.control_delay_us.size(), 2u);
  for (double d : r.control_delay_us) {
    // Two links of 5 µs, plus serializing ~100 bytes at 10 and 40 Gbit/s.
    EXPECT_GE(d, 10.0);
    EXPECT_LT(d, 10.3);
  }
}

TEST(PacketSanity, FlowtuneConvergesAfterEveryJoinAndLeave) {
  Config c = star(9, Scheme::kFlowtune);
  c.traffic = Traffic::kJoinLeave;
  c.join_interval_ms = 0.5;
  c.drain_ms = 5;
  Result r = run(c);
  const auto conv = rate_convergence_us(c, r, 0.1);
  // 8 joins and 7 leaves that leave someone; each settles within a few
  // turns of 45 µs.
  ASSERT_EQ(conv.size(), 15u);
  for (double t : conv) EXPECT_LT(t, 300.0);
  const Distribution d = summarize(conv);
  std::printf("convergence after join/leave: p50 %.1f µs, max %.1f µs\n", d.p50, d.max);
}

// The quick run's facts, every scheme on the same small Clos and workload.
TEST(PacketQuick, EveryFlowFinishesAndFlowtuneDropsNothing) {
  Config c;
  c.racks = 2;
  c.hosts_per_rack = 4;
  c.spines = 2;
  c.core_gbps = 20;
  c.duration_ms = 1;
  for (Scheme s :
       {Scheme::kFlowtune, Scheme::kDctcp, Scheme::kCubic, Scheme::kBbr, Scheme::kFqCodel}) {
    c.scheme = s;
    Result r = run(c);
    const nlohmann::json j = summary_json(c, r);
    ASSERT_GT(r.flows.size(), 20u);
    EXPECT_EQ(j["finished"].get<std::uint64_t>(), r.flows.size()) << to_string(s);
    for (const char* key :
         {"fct_slowdown", "hops", "dropped_bytes", "pf_score", "allocator_traffic_fraction",
          "wall_s_per_simulated_ms", "control_delay_us"}) {
      EXPECT_TRUE(j.contains(key)) << key;
    }
    for (int b = 0; b < kBuckets; ++b) EXPECT_TRUE(j["fct_slowdown"].contains(bucket_name(b)));
    if (s == Scheme::kFlowtune) {
      EXPECT_EQ(j["dropped_bytes"].get<std::uint64_t>(), 0u);
      EXPECT_GT(j["allocator_traffic_fraction"].get<double>(), 0.0);
    }
  }
}

TEST(PacketMetrics, SizeBucketsArePacketCounts) {
  EXPECT_EQ(size_bucket(1, 1448), 0);
  EXPECT_EQ(size_bucket(1448, 1448), 0);
  EXPECT_EQ(size_bucket(1449, 1448), 1);
  EXPECT_EQ(size_bucket(14480, 1448), 1);
  EXPECT_EQ(size_bucket(14481, 1448), 2);
  EXPECT_EQ(size_bucket(144800, 1448), 2);
  EXPECT_EQ(size_bucket(1448000, 1448), 3);
  EXPECT_EQ(size_bucket(1448001, 1448), 4);
}

TEST(PacketMetrics, SummarizeTakesNearestRankPercentiles) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  const Distribution d = summarize(v);
  EXPECT_EQ(d.p50, 50);
  EXPECT_EQ(d.p99, 99);
  EXPECT_EQ(d.max, 100);
  EXPECT_DOUBLE_EQ(d.mean, 50.5);
}

TEST(PacketMetrics, ConvergenceIsTheLastRateThatMadeSharesFair) {
  Config c = star(3, Scheme::kFlowtune);
  Result r;
  r.flows.resize(2);
  r.flows[0].spec = {1, 0, 1, 0.0, 0};
  r.flows[1].spec = {2, 0, 1, 1e-3, 0};
  const double full = 10e9 * 0.99;
  r.rates = {{10e-6, 0, full}, {1.05e-3, 1, full / 2}, {1.08e-3, 0, full / 2}};
  const auto conv = rate_convergence_us(c, r, 0.1);
  ASSERT_EQ(conv.size(), 2u);
  EXPECT_NEAR(conv[0], 10.0, 1e-6);
  EXPECT_NEAR(conv[1], 80.0, 1e-6);
}

TEST(PacketMetrics, ThroughputConvergenceIsTheFirstEvenBinAfterAnEvent) {
  Config c = star(3, Scheme::kCubic);
  c.bin_us = 100;
  Result r;
  r.flows.resize(2);
  r.flows[0].spec = {1, 0, 1, 0.0, 0};
  r.flows[0].end_s = 1e-3;
  r.flows[0].bins = {50, 100, 100, 100, 70, 50, 50, 50, 50, 50};
  r.flows[1].spec = {2, 0, 1, 0.00025, 0};
  r.flows[1].end_s = 1e-3;
  r.flows[1].bins = {0, 0, 0, 10, 30, 50, 50, 50, 50, 50};
  const auto conv = throughput_convergence_us(c, r, 0.25);
  // Flow 0's start: bin 0 alone (100 µs). Flow 1's start at 250 µs: bins
  // 3 (10 vs 100) and 4 (30 vs 70, 40% off their mean) are not even, bin
  // 5 is: 600 - 250 = 350 µs. The ends at 1 ms leave nobody.
  ASSERT_EQ(conv.size(), 2u);
  EXPECT_NEAR(conv[0], 100.0, 1e-6);
  EXPECT_NEAR(conv[1], 350.0, 1e-6);
}

int run_cli(const std::string& args, std::string* out) {
  const std::string path = ::testing::TempDir() + "packet_cli.json";
  std::remove(path.c_str());
  const int st = std::system(
      (std::string(FT_PACKET_BINARY) + " " + args + " --out " + path + " 2>/dev/null").c_str());
  std::stringstream buf;
  buf << std::ifstream(path).rdbuf();
  *out = buf.str();
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(PacketCli, WritesOneRunPerScheme) {
  std::string out;
  ASSERT_EQ(
      run_cli("--topology star --star-hosts 4 --duration-ms 0.5 --schemes flowtune,dctcp", &out),
      0);
  const auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j["runs"].size(), 2u);
  EXPECT_EQ(j["runs"][0]["config"]["scheme"], "flowtune");
  EXPECT_EQ(j["runs"][1]["config"]["scheme"], "dctcp");
  EXPECT_EQ(j["runs"][1]["finished"], j["runs"][1]["flows"]);
}

TEST(PacketCli, BadFlagsExitTwo) {
  std::string out;
  EXPECT_EQ(run_cli("--scheme-typo flowtune", &out), 2);
  EXPECT_EQ(run_cli("--schemes xcp", &out), 2);
  EXPECT_EQ(run_cli("--load 1.5", &out), 2);
  EXPECT_EQ(run_cli("--racks many", &out), 2);
}

}  // namespace
}  // namespace flowtune::packet
