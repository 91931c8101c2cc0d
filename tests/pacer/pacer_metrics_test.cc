// flowtune-pacer's metrics: tc's JSON read back (a reply captured from
// `tc -s -j qdisc show` on a veth with a tbf that had dropped a packet),
// and the exposition built from it and from the loop's state.
#include "flowtune/pacer/metrics.h"

#include <gtest/gtest.h>

#include <map>

namespace flowtune::pacer {
namespace {

constexpr const char* kTbf =
    R"([{"kind":"tbf","handle":"1:","root":true,"refcnt":3,"options":{"rate":125000,"burst":3028,"lat":215776},)"
    R"("bytes":6176,"packets":6,"drops":1,"overlimits":25,"requeues":0,"backlog":27000,"qlen":18}])";

// An htb root with a child tbf: the root's figures count.
constexpr const char* kHtb =
    R"([{"kind":"htb","handle":"1:","root":true,"bytes":900,"packets":9,"drops":4,"overlimits":2,"requeues":1,)"
    R"("backlog":0,"qlen":0},{"kind":"tbf","handle":"10:","parent":"1:1","bytes":800,"packets":8,"drops":3}])";

TEST(PacerMetrics, ReadsTheRootQdiscFromTcsJson) {
  const auto q = root_qdisc(kTbf);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->kind, "tbf");
  EXPECT_EQ(q->bytes, 6176u);
  EXPECT_EQ(q->packets, 6u);
  EXPECT_EQ(q->drops, 1u);
  EXPECT_EQ(q->overlimits, 25u);
  EXPECT_EQ(q->backlog_bytes, 27000u);
  EXPECT_EQ(q->qlen, 18u);
  const auto h = root_qdisc(kHtb);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->kind, "htb");
  EXPECT_EQ(h->drops, 4u);
  EXPECT_FALSE(root_qdisc("Cannot find device \"v9\""));
  EXPECT_FALSE(root_qdisc("[]"));
}

TEST(PacerMetrics, ExposesTheQdiscAndTheLoopsState) {
  PacerState s;
  s.shaped_bps = 8e6;
  s.burst_bytes = 3028;
  s.host_rate_bytes_per_sec = 900'000;
  s.changes = 7;
  s.messages = 11;
  s.registered = true;
  std::map<std::string, double> v;
  for (const auto& f : pacer_metrics(s, root_qdisc(kTbf), "v0")) {
    const auto& m = f.metric.at(0);
    if (f.name != "flowtune_pacer_up") {
      EXPECT_EQ(m.label.at(0).value, "v0") << f.name;
    }
    v[f.name] = f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
  }
  EXPECT_EQ(v.size(), pacer_metric_specs().size()) << "every documented metric, once";
  EXPECT_EQ(v["flowtune_pacer_up"], 1);
  EXPECT_EQ(v["flowtune_pacer_qdisc_drops_total"], 1);
  EXPECT_EQ(v["flowtune_pacer_qdisc_sent_bytes_total"], 6176);
  EXPECT_EQ(v["flowtune_pacer_qdisc_backlog_packets"], 18);
  EXPECT_EQ(v["flowtune_pacer_shaped_bytes_per_second"], 1e6) << "8 Mbit/s on the wire";
  EXPECT_EQ(v["flowtune_pacer_host_rate_bytes_per_second"], 900'000);
  EXPECT_EQ(v["flowtune_pacer_registered"], 1);
}

TEST(PacerMetrics, SaysDownWithoutTheQdiscButKeepsTheLoopsState) {
  PacerState s;
  s.changes = 3;
  std::map<std::string, double> v;
  for (const auto& f : pacer_metrics(s, std::nullopt, "v0")) {
    v[f.name] = f.type == prometheus::MetricType::Counter ? f.metric[0].counter.value : f.metric[0].gauge.value;
  }
  EXPECT_EQ(v["flowtune_pacer_up"], 0);
  EXPECT_EQ(v.count("flowtune_pacer_qdisc_drops_total"), 0u);
  EXPECT_EQ(v["flowtune_pacer_changes_total"], 3);
}

}  // namespace
}  // namespace flowtune::pacer
