// The allocator's Prometheus metrics: the exposition built from
// flowtune-ctl's replies of a real Allocator (fed hand-built messages)
// against its Counters read directly, the histogram buckets against a
// naive count, and the doc-table check (metrics_doc_test checks the
// tables against docs/operate.md).
#include "flowtune/daemon/metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>

#include "flowtune/daemon/allocator.h"
#include "flowtune/daemon/control.h"
#include "flowtune/metrics/doc_table.h"
#include "flowtune/metrics/exposer.h"
#include "flowtune/wire/codec.h"

namespace flowtune::daemon {
namespace {

using nlohmann::json;

// name{labels} -> value, from families of counters and gauges; histograms
// as NAME_count and NAME_sum.
std::map<std::string, double> samples(const std::vector<prometheus::MetricFamily>& fams) {
  std::map<std::string, double> out;
  for (const auto& f : fams) {
    for (const auto& m : f.metric) {
      std::string key = f.name;
      for (const auto& l : m.label) key += "{" + l.name + "=" + l.value + "}";
      if (f.type == prometheus::MetricType::Counter) out[key] = m.counter.value;
      if (f.type == prometheus::MetricType::Gauge) out[key] = m.gauge.value;
      if (f.type == prometheus::MetricType::Histogram) {
        out[key + "_count"] = static_cast<double>(m.histogram.sample_count);
        out[key + "_sum"] = m.histogram.sample_sum;
      }
    }
  }
  return out;
}

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    alloc_ = std::make_unique<Allocator>(Network::big_switch(4, 1e9, 0), AllocatorConfig{}, 7, &log_);
  }
  void send(std::string_view peer, std::vector<wire::EndpointEvent> events) {
    wire::EndpointMessage m;
    m.events = std::move(events);
    alloc_->on_message(peer, wire::encode(m), now_, nullptr, {});
  }
  void start(std::string_view peer, std::uint64_t key, std::uint32_t src, std::uint32_t dst) {
    wire::FlowletStart s;
    s.flow_key = key;
    s.endpoints = wire::HostPair{src, dst};
    s.bytes = 1 << 20;
    s.weight = 1;
    send(peer, {s});
  }
  void settle() {
    for (int i = 0; i < 100000 && alloc_->busy(); ++i) {
      now_ += 10;
      alloc_->iterate(now_);
      (void)alloc_->take_outbox();
    }
  }
  json ask(const std::string& request) {
    return json::parse(control_reply(*alloc_, {"x", 5'000'000, {}, {}, {}}, request, now_, cache_));
  }
  std::map<std::string, double> exposition() {
    return samples(allocator_metrics({ask("status"), ask("histograms"), ask("links 500")}));
  }
  Log log_{[](std::string_view) {}, LogLevel::kError, 1'000'000};
  std::unique_ptr<Allocator> alloc_;
  ControlCache cache_;
  std::uint64_t now_ = 1'000'000;
};

TEST_F(MetricsTest, CountersAndGaugesEqualTheAllocatorsOwn) {
  // Given: two endpoints, three flowlets, one of them ended, one refusal.
  send("a", {wire::Hello{"ep-a", "h0"}});
  send("b", {wire::Hello{"ep-b", "h1"}});
  start("a", 1, 0, 2);
  start("a", 2, 0, 3);
  start("b", 3, 1, 2);
  settle();
  send("a", {wire::FlowletEnd{1}});
  send("z", {wire::Heartbeat{}});  // not registered: refused
  settle();
  // When
  const auto s = exposition();
  // Expect: the allocator's counters, read directly, in the exposition.
  const Counters& c = alloc_->counters();
  EXPECT_EQ(s.at("flowtune_allocator_flowlet_starts_total"), static_cast<double>(c.starts));
  EXPECT_EQ(c.starts, 3u);
  EXPECT_EQ(s.at("flowtune_allocator_flowlet_ends_total"), 1);
  EXPECT_EQ(s.at("flowtune_allocator_flows"), static_cast<double>(alloc_->num_flows()));
  EXPECT_EQ(alloc_->num_flows(), 2u);
  EXPECT_EQ(s.at("flowtune_allocator_endpoints"), 2);
  EXPECT_EQ(s.at("flowtune_allocator_iterations_total"), static_cast<double>(c.iterations));
  EXPECT_GT(c.iterations, 0u);
  EXPECT_EQ(s.at("flowtune_allocator_rate_updates_total"), static_cast<double>(c.rate_updates));
  EXPECT_EQ(s.at("flowtune_allocator_refusals_total{reason=not_registered}"), 1);
  EXPECT_EQ(s.at("flowtune_allocator_refusals_total{reason=too_large}"), 0);
  EXPECT_EQ(s.at("flowtune_allocator_active"), 1);
  EXPECT_EQ(s.at("flowtune_allocator_iteration_seconds_count"), static_cast<double>(c.iteration_ns.count()));
  EXPECT_DOUBLE_EQ(s.at("flowtune_allocator_iteration_seconds_sum"), static_cast<double>(c.iteration_ns.sum_ns()) * 1e-9);
  EXPECT_EQ(s.at("flowtune_allocator_busy_links"), 4);  // h0 up, h1 up, h2 down, h3 down
  EXPECT_EQ(s.count("flowtune_allocator_auth_accepted_total"), 0u) << "CURVE is off: no auth metrics";
}

TEST_F(MetricsTest, PerLinkMetricsAreBoundedByThePageAsked) {
  send("a", {wire::Hello{"ep-a", "h0"}});
  start("a", 1, 0, 1);
  start("a", 2, 0, 2);
  start("a", 3, 0, 3);
  settle();
  const auto fams = allocator_metrics({ask("status"), ask("histograms"), ask("links 2")});
  const auto s = samples(fams);
  std::size_t links = 0;
  for (const auto& [k, v] : s) links += k.rfind("flowtune_allocator_link_price{", 0) == 0 ? 1 : 0;
  EXPECT_EQ(links, 2u) << "links 2 asks for two";
  EXPECT_EQ(s.at("flowtune_allocator_busy_links"), 4) << "the total busy links, beyond the page";
}

TEST(MetricTable, EveryStatusCounterIsExportedOrSaysWhyNot) {
  Log log{[](std::string_view) {}, LogLevel::kError, 1'000'000};
  Allocator a(Network::big_switch(2, 1e9, 0), AllocatorConfig{}, 1, &log);
  ControlCache cache;
  const json status = json::parse(control_reply(a, {}, "status", 0, cache));
  std::set<std::string> exported;
  for (const metrics::Row& r : allocator_metric_rows()) exported.insert(r.pointer);
  for (const char* skip : allocator_counters_not_exported()) exported.insert(std::string("/counters/") + skip);
  for (const auto& [k, v] : status.at("counters").items()) {
    EXPECT_TRUE(exported.count("/counters/" + k)) << "status counter '" << k
                                                  << "' has no metric: add it to metric_table.cc";
  }
  // The policy's counters too; its per-class and per-tenant tables are
  // flowtune-ctl tenants' (unbounded names), and tenants_shown is how many
  // status printed.
  const std::set<std::string> policy_tables = {"classes", "tenants", "no_tenant", "tenants_shown"};
  for (const auto& [k, v] : status.at("policy").items()) {
    if (policy_tables.count(k) > 0) continue;
    EXPECT_TRUE(exported.count("/policy/" + k)) << "status policy counter '" << k << "' has no metric";
  }
}

TEST(MetricTable, NamesFollowPrometheusConventions) {
  for (const metrics::Spec& s : allocator_metric_specs()) {
    const std::string n = s.name;
    EXPECT_EQ(n.rfind("flowtune_allocator_", 0), 0u) << n;
    const bool total = n.size() > 6 && n.substr(n.size() - 6) == "_total";
    EXPECT_EQ(total, s.type == metrics::Type::kCounter) << n << ": counters, and only they, end in _total";
    if (std::string(s.unit) == "seconds") {
      EXPECT_NE(n.find("_seconds"), std::string::npos) << n;
    }
    if (std::string(s.unit) == "bytes") {
      EXPECT_NE(n.find("bytes"), std::string::npos) << n;
    }
  }
}

TEST(DocTable, ReportsEveryKindOfDisagreement) {
  const metrics::Spec table[] = {{"a_total", metrics::Type::kCounter, "1", "", "x"},
                                 {"b_seconds", metrics::Type::kGauge, "seconds", "", "y"}};
  const std::string doc =
      "<!-- metrics:t -->\n| metric | type | unit | labels | meaning |\n|---|---|---|---|---|\n"
      "| `a_total` | gauge | 1 | reason | x |\n| `c` | gauge | 1 | - | z |\n<!-- /metrics:t -->\n";
  const auto diff = metrics::compare(metrics::doc_rows(doc, "t"), table);
  ASSERT_EQ(diff.size(), 4u);  // a's type, a's labels, c unknown, b missing
  EXPECT_NE(diff[0].find("type gauge"), std::string::npos) << diff[0];
  EXPECT_NE(diff[1].find("labels 'reason'"), std::string::npos) << diff[1];
  EXPECT_NE(diff[2].find("not in the code"), std::string::npos) << diff[2];
  EXPECT_NE(diff[3].find("b_seconds is in the code but not in the doc"), std::string::npos) << diff[3];
  EXPECT_THROW(metrics::doc_rows("no table", "t"), std::runtime_error);
}

TEST(LatencyHistogram, CountBelowPowersOfTwoMatchesANaiveCount) {
  LatencyHistogram h;
  std::vector<std::uint64_t> values;
  std::uint64_t x = 12345;
  for (int i = 0; i < 20000; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    values.push_back((x >> 20) >> (x % 40));  // spread over many powers of two
  }
  values.push_back(0);
  values.push_back(1024);
  values.push_back(1023);
  std::uint64_t sum = 0;
  for (std::uint64_t v : values) {
    h.record(v);
    sum += v;
  }
  EXPECT_EQ(h.sum_ns(), sum);
  for (int k = 0; k <= 64; ++k) {
    std::uint64_t naive = 0;
    for (std::uint64_t v : values) naive += (k == 64 || v < (std::uint64_t{1} << k)) ? 1 : 0;
    EXPECT_EQ(h.count_below_pow2(k), naive) << "k=" << k;
  }
}

TEST(MetricsListen, RefusesWhatIsNotAddrPort) {
  EXPECT_EQ(metrics::listen_error("127.0.0.1:9464"), "");
  EXPECT_EQ(metrics::listen_error("0.0.0.0:0"), "");
  EXPECT_EQ(metrics::listen_error("[::1]:9464"), "");
  EXPECT_NE(metrics::listen_error("9464"), "");
  EXPECT_NE(metrics::listen_error("localhost:9464"), "");
  EXPECT_NE(metrics::listen_error("127.0.0.1:70000"), "");
  EXPECT_NE(metrics::listen_error("127.0.0.1:"), "");
}

}  // namespace
}  // namespace flowtune::daemon
