// flowtune-packet's coflow-trace workload (docs/packet.md): a trace expands
// into flows as flowtune-sim coflows expands it, every coflow completes
// under Flowtune and TCP, no coflow beats its ideal, and coflow order helps
// where it must: one large coflow and four small ones into one host.
#include "packet.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace flowtune::packet {
namespace {

// Six ports; every coflow sends to port 0. Coflow 1 is 4 MB from port 1,
// coflows 2-5 are 0.5 MB each from ports 2-5, all at time 0. Per-flow
// sharing ends the small ones together after 2.5 MB have crossed port 0, the
// large one at 6 MB (mean 3.2 MB of port time); smallest first ends them one
// by one (mean near 2.3 MB at the 0.7 share): ordering must win.
const char* kTrace =
    "6 5\n"
    "1 0 1 1 1 0:4\n"
    "2 0 1 2 1 0:0.5\n"
    "3 0 1 3 1 0:0.5\n"
    "4 0 1 4 1 0:0.5\n"
    "5 0 1 5 1 0:0.5\n";

std::string write_trace() {
  const std::string path = testing::TempDir() + "packet_coflow_test_trace.txt";
  std::ofstream(path) << kTrace;
  return path;
}

Config trace_config(Scheme s, const std::string& policy) {
  Config c;
  c.shape = Shape::kStar;
  c.star_hosts = 6;
  c.scheme = s;
  c.traffic = Traffic::kCoflowTrace;
  c.trace = write_trace();
  c.trace_byte_scale = 0.5;
  c.coflow_policy = policy;
  c.drain_ms = 50;
  return c;
}

double mean_cct(const std::vector<CoflowResult>& v) {
  double sum = 0;
  for (const auto& k : v) sum += k.end_s - k.arrival_s;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

TEST(PacketCoflowTrace, ExpandsAsTheFlowLevelSimulator) {
  Config c = trace_config(Scheme::kFlowtune, "none");
  c.trace_byte_scale = 0.25;
  c.time_scale = 2;
  const std::vector<FlowSpec> flows = make_flows(c);
  ASSERT_EQ(flows.size(), 5u);
  EXPECT_EQ(flows[0].src, 1u);
  EXPECT_EQ(flows[0].dst, 0u);
  EXPECT_EQ(flows[0].bytes, 1u << 20);  // 4 MiB x 0.25
  EXPECT_EQ(flows[4].bytes, 1u << 17);
  for (std::size_t i = 0; i < flows.size(); ++i) EXPECT_EQ(flows[i].coflow, i + 2);  // id + 1
  c.star_hosts = 4;  // ports 4 and 5 land on hosts 0 and 1: port 4's flow is inside host 0
  EXPECT_EQ(make_flows(c).size(), 4u);
}

TEST(PacketCoflowTrace, EveryCoflowCompletesAboveItsIdealAndOrderHelps) {
  double mean_pf = 0, mean_sebf = 0;
  for (const auto& [scheme, policy] :
       {std::pair{Scheme::kFlowtune, "none"}, std::pair{Scheme::kFlowtune, "sebf"},
        std::pair{Scheme::kCubic, "none"}}) {
    const Config c = trace_config(scheme, policy);
    const Result r = run(c);
    const std::vector<CoflowResult> k = coflow_results(c, r);
    const std::string what = std::string(to_string(scheme)) + "/" + policy;
    ASSERT_EQ(k.size(), 5u) << what;
    for (const auto& x : k) {
      ASSERT_GE(x.end_s, 0) << what << " coflow " << x.id << " did not complete";
      EXPECT_GE(x.end_s - x.arrival_s, x.ideal_s) << what << " coflow " << x.id;
    }
    const nlohmann::json j = summary_json(c, r);
    EXPECT_EQ(j["coflows"]["coflows"], 5) << what;
    EXPECT_EQ(j["coflows"]["unfinished"], 0) << what;
    if (scheme == Scheme::kFlowtune)
      (std::string(policy) == "sebf" ? mean_sebf : mean_pf) = mean_cct(k);
  }
  EXPECT_LT(mean_sebf, mean_pf);
}

}  // namespace
}  // namespace flowtune::packet
