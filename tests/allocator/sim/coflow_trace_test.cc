// Coflow trace replay: the Coflow-Benchmark parser (and its errors), CCTs on
// instances small enough to work out by hand, and the `coflows` and
// `figure coflow-trace` command lines.
#include "coflow_trace.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <stdexcept>

#include "sim_cli.h"

namespace flowtune::sim {
namespace {

using nlohmann::json;

constexpr double kMiB = 1024.0 * 1024.0;

CoflowTrace parse(const std::string& text) {
  std::istringstream in(text);
  return parse_coflow_trace(in, "t.txt");
}

std::string parse_error(const std::string& text) {
  try {
    parse(text);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// Ports of 1 MiB/s, so a flow of N MiB alone takes N seconds.
CoflowSimConfig exact(const std::string& policy) {
  CoflowSimConfig c;
  c.policy = policy;
  c.port_gbps = 8 * kMiB / 1e9;
  c.ordered_share = 1;
  c.batch_s = 0;
  return c;
}

double cct(const CoflowSimResult& r, std::uint64_t id) {
  for (const auto& o : r.coflows) {
    if (o.id == id) return o.cct_s;
  }
  ADD_FAILURE() << "no coflow " << id;
  return -1;
}

TEST(CoflowTrace, ParsesTheBenchmarkFormat) {
  const CoflowTrace t = parse("4 2\n1 0 2 0 1 1 3:2.5\n2 1500 1 2 2 0:1 3:4\n");
  EXPECT_EQ(t.ports, 4u);
  ASSERT_EQ(t.coflows.size(), 2u);
  EXPECT_EQ(t.coflows[0].mappers, (std::vector<std::uint32_t>{0, 1}));
  ASSERT_EQ(t.coflows[0].reducers.size(), 1u);
  EXPECT_EQ(t.coflows[0].reducers[0].first, 3u);
  EXPECT_DOUBLE_EQ(t.coflows[0].reducers[0].second, 2.5 * kMiB);
  EXPECT_DOUBLE_EQ(t.coflows[1].arrival_s, 1.5);
  EXPECT_EQ(t.coflows[1].id, 2u);
}

TEST(CoflowTrace, BadInputIsRefusedWithItsLine) {
  EXPECT_EQ(parse_error(""), "t.txt:0: empty trace");
  EXPECT_NE(parse_error("x 1\n").find("t.txt:1: expected 'PORTS COFLOWS'"), std::string::npos);
  EXPECT_NE(parse_error("4 1\n1 0 1 9 1 3:1\n").find("t.txt:2: mapper port"), std::string::npos);
  EXPECT_NE(parse_error("4 1\n1 0 1 0 1 3-1\n").find("t.txt:2: reducer '3-1'"), std::string::npos);
  EXPECT_NE(parse_error("4 1\n1 0 1 0 2 3:1\n").find("fewer reducers"), std::string::npos);
  EXPECT_NE(parse_error("4 1\n1 0 1 0 1 3:1 7\n").find("unexpected '7'"), std::string::npos);
  EXPECT_NE(parse_error("4 2\n1 5 1 0 1 3:1\n2 4 1 0 1 3:1\n").find("t.txt:3: arrival times"),
            std::string::npos);
  EXPECT_NE(parse_error("4 3\n1 0 1 0 1 3:1\n").find("announces 3 coflows, found 1"),
            std::string::npos);
}

TEST(CoflowTrace, PortsAndSizesMustBeNumbersAndIdsUnique) {
  EXPECT_NE(parse_error("4 1\n1 0 1 0 1 :5\n").find("reducer ':5'"), std::string::npos);
  EXPECT_NE(parse_error("4 1\n1 0 1 0 1 3:\n").find("reducer '3:': bad MB"), std::string::npos);
  EXPECT_NE(parse_error("4 1\n1 0 1 0 1 3:x\n").find("bad MB"), std::string::npos);
  EXPECT_NE(parse_error("4 2\n1 0 1 0 1 3:1\n1 5 1 0 1 3:1\n").find("t.txt:3: coflow id 1 repeats"),
            std::string::npos);
}

TEST(CoflowReplay, BatchedEndsNeverBeatTheBoundAndBarelyMoveTheMean) {
  // One coflow of two flows sharing port 0's uplink at 0.5 MiB/s each, the
  // one listed first the longer: both end in one batch, the coflow with the
  // later (2.008 s, at the rate of the moment; 2.004 exactly).
  CoflowSimConfig c = exact("pf");
  c.batch_s = 0.01;
  const auto two = simulate_coflows(parse("3 1\n1 0 1 0 2 2:1.004 1:1\n"), c);
  EXPECT_NEAR(cct(two, 1), 2.008, 1e-9);
  EXPECT_EQ(two.events, 1u);
  // The shipped trace's first 50 coflows; flows that end within 10 ms of
  // the next end end with it, each at its own time.
  const CoflowTrace t = load_coflow_trace("fb");
  for (const char* p : {"pf", "stf", "sebf"}) {
    CoflowSimConfig exact_ends, batched;
    exact_ends.policy = batched.policy = p;
    exact_ends.max_coflows = batched.max_coflows = 50;
    exact_ends.batch_s = 0;
    batched.batch_s = 0.01;
    const auto a = simulate_coflows(t, exact_ends);
    const auto b = simulate_coflows(t, batched);
    ASSERT_EQ(a.coflows.size(), b.coflows.size());
    EXPECT_LT(b.events, a.events) << p;
    double sa = 0, sb = 0;
    for (std::size_t i = 0; i < a.coflows.size(); ++i) {
      for (const auto* o : {&a.coflows[i], &b.coflows[i]}) {
        ASSERT_GE(o->cct_s, o->bound_s * (1 - 1e-9)) << p << " coflow " << o->id;
      }
      sa += a.coflows[i].cct_s;
      sb += b.coflows[i].cct_s;
    }
    EXPECT_NEAR(sb / sa, 1.0, 0.02) << p;
  }
}

TEST(CoflowReplay, SmallestFirstBeatsFairSharingByTheWorkedOutFactor) {
  // Two coflows on one path at t = 0: 2 MiB and 1 MiB. Fair sharing ends
  // them at 3 s and 2 s; either coflow policy at 3 s and 1 s.
  const CoflowTrace t = parse("2 2\n1 0 1 0 1 1:2\n2 0 1 0 1 1:1\n");
  const auto pf = simulate_coflows(t, exact("pf"));
  EXPECT_NEAR(cct(pf, 1), 3, 1e-9);
  EXPECT_NEAR(cct(pf, 2), 2, 1e-9);
  for (const char* p : {"stf", "sebf"}) {
    const auto r = simulate_coflows(t, exact(p));
    EXPECT_NEAR(cct(r, 1), 3, 1e-9) << p;
    EXPECT_NEAR(cct(r, 2), 1, 1e-9) << p;
  }
  const auto off = simulate_coflows(t, exact("offline"));
  EXPECT_NEAR(cct(off, 1), 2, 1e-9);
  EXPECT_NEAR(cct(off, 2), 1, 1e-9);
  // The starvation guard: with 0.9 ordered, the large coflow keeps moving
  // (half of the other tenth), so the small one ends a little later.
  CoflowSimConfig guarded = exact("stf");
  guarded.ordered_share = 0.9;
  EXPECT_NEAR(cct(simulate_coflows(t, guarded), 2), 1 / 0.95, 1e-9);
}

TEST(CoflowReplay, EqualSharesLeaveWhatAFlowCannotUseIdle) {
  // Port 0 sends coflow 1 (0 -> 1) and coflow 2 (0 -> 2); coflow 3 sends
  // from ports 1 and 3 into port 2; every flow 1 MiB. Port 2's downlink
  // holds three flows at 1/3 MiB/s each. Max-min (pf) hands port 0's spare
  // uplink to coflow 1 (2/3 MiB/s: 1.5 s); equal shares give it only half
  // its uplink (2 s). Everything into port 2 ends at 3 s either way.
  const CoflowTrace t = parse("4 3\n1 0 1 0 1 1:1\n2 0 1 0 1 2:1\n3 0 2 1 3 1 2:2\n");
  const auto pf = simulate_coflows(t, exact("pf"));
  const auto fair = simulate_coflows(t, exact("fair"));
  EXPECT_NEAR(cct(pf, 1), 1.5, 1e-9);
  EXPECT_NEAR(cct(fair, 1), 2, 1e-9);
  for (std::uint64_t id : {2, 3}) {
    EXPECT_NEAR(cct(pf, id), 3, 1e-9) << id;
    EXPECT_NEAR(cct(fair, id), 3, 1e-9) << id;
  }
}

// The same instance under the allocator's own engine (pf-engine: NED +
// F-NORM solved at every event): proportional fairness, which is neither
// max-min nor equal shares. Port 0's uplink and port 2's downlink bind:
// with prices a and b, coflow 1 gets 1/a, coflow 2 1/(a + b) and each of
// coflow 3's flows 1/b, so 1/a + 1/(a + b) = 1 and 1/(a + b) + 2/b = 1:
// a = 4/3, b = 8/3, rates 3/4, 1/4 and 3/8 MiB/s. Coflow 1 ends at 4/3 s;
// then port 2's three flows share it equally (1/3 each): coflow 3's halves
// end 1.5 s later, at 17/6 s, and coflow 2's last 1/6 MiB alone at 3 s.
TEST(CoflowReplay, TheEnginesProportionalFairnessIsNeitherMaxMinNorEqualShares) {
  const CoflowTrace t = parse("4 3\n1 0 1 0 1 1:1\n2 0 1 0 1 2:1\n3 0 2 1 3 1 2:2\n");
  const auto pf = simulate_coflows(t, exact("pf-engine"));
  EXPECT_NEAR(cct(pf, 1), 4.0 / 3, 2e-3);
  EXPECT_NEAR(cct(pf, 3), 17.0 / 6, 2e-3);
  EXPECT_NEAR(cct(pf, 2), 3, 2e-3);
}

TEST(CoflowReplay, SebfBeatsStfWhenTheLargerCoflowIsTheQuickerOne) {
  // X (id 1): mappers 0, 1 to reducers 2, 3, 1 MiB per flow: 4 MiB, 2 s
  // alone. Y (id 2): 3 MiB from 0 to 2, 3 s alone. STF serves Y first (Y 3 s,
  // X 5 s), SEBF X first (X 2 s, Y 5 s).
  const CoflowTrace t = parse("4 2\n1 0 2 0 1 2 2:2 3:2\n2 0 1 0 1 2:3\n");
  const auto sebf = simulate_coflows(t, exact("sebf"));
  EXPECT_NEAR(cct(sebf, 1), 2, 1e-9);
  EXPECT_NEAR(cct(sebf, 2), 5, 1e-9);
  const auto stf = simulate_coflows(t, exact("stf"));
  EXPECT_NEAR(cct(stf, 2), 3, 1e-9);
  EXPECT_NEAR(cct(stf, 1), 5, 1e-9);
}

// Aging against a stream: 1 MiB coflows arrive every second for 100 s on
// one link, each ending as the next comes, and a 10 MiB coflow arrives at
// 0.5 s. Without a guard smallest-first never serves it until the stream
// stops (CCT 109.5 s). With aging T its key 10 / (1 + waited / T) falls
// below a newcomer's 1 once it has waited 9T; the stream's queued coflows
// age too and take turns with it, so it ends later than 9T + 10, but before
// the stream does for T = 1 and 3 s, and sooner the smaller T. With T = 30
// s its weight never reaches 10 within the stream: starved as without.
TEST(CoflowReplay, AgingServesALargeCoflowThatAStreamOfSmallOnesWouldStarve) {
  std::string text = "2 101\n1 0 1 0 1 1:1\n1000 500 1 0 1 1:10\n";
  for (int i = 1; i < 100; ++i) {
    text += std::to_string(i + 1) + " " + std::to_string(i * 1000) + " 1 0 1 1:1\n";
  }
  const CoflowTrace t = parse(text);
  for (const char* p : {"stf", "sebf", "bssi"}) {
    SCOPED_TRACE(p);
    CoflowSimConfig c = exact(p);
    const auto aged = [&](double aging_s) {
      c.aging_s = aging_s;
      return cct(simulate_coflows(t, c), 1000);
    };
    const auto starved = simulate_coflows(t, c);
    EXPECT_NEAR(cct(starved, 1000), 109.5, 1e-6);
    EXPECT_NEAR(summarize(starved)["slowdown_max"].get<double>(), 10.95, 1e-6);
    const double one = aged(1), three = aged(3);
    EXPECT_GE(one, 9 * 1 + 10 - 0.5);
    EXPECT_GE(three, 9 * 3 + 10 - 0.5);
    EXPECT_LT(one, three);
    EXPECT_LT(three + 0.5, 99);
    EXPECT_NEAR(aged(30), 109.5, 1e-6);
  }
}

TEST(CoflowReplay, RackLocalFlowsAndLoadAreAccountedFor) {
  // Coflow 1 is rack-local only (mapper and reducer on port 0); coflow 2
  // moves 2 MiB over 2 ports in 4 s of arrivals: load 2 MiB / (2 x 1 MiB/s x 4 s).
  const CoflowTrace t = parse("2 2\n1 0 1 0 1 0:5\n2 4000 1 0 1 1:2\n");
  const auto r = simulate_coflows(t, exact("pf"));
  EXPECT_EQ(r.left_out, 1u);
  ASSERT_EQ(r.coflows.size(), 1u);
  EXPECT_NEAR(cct(r, 2), 2, 1e-9);
  EXPECT_EQ(r.offered_load, 0);  // one coflow over the fabric: no span
  CoflowSimConfig slow = exact("pf");
  slow.time_scale = 2;
  const CoflowTrace u = parse("2 2\n1 0 1 0 1 1:2\n2 4000 1 1 1 0:2\n");
  EXPECT_NEAR(simulate_coflows(u, slow).offered_load, 4.0 / (2 * 8), 1e-9);
  EXPECT_NEAR(cct(simulate_coflows(u, slow), 2), 2, 1e-9);
}

TEST(CoflowCli, ReplaysATraceFileAndRefusesBadArguments) {
  const std::string trace = write_temp("trace.txt", "2 2\n1 0 1 0 1 1:2\n2 0 1 0 1 1:1\n");
  CliResult r = sim("coflows --trace '" + trace + "' --policy stf --per-coflow");
  ASSERT_EQ(r.status, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["config"]["policy"], "stf");
  EXPECT_EQ(j["summary"]["coflows"], 2);
  EXPECT_EQ(j["coflows"].size(), 2u);
  EXPECT_GT(j["summary"]["cct_mean_s"].get<double>(), 0);
  const std::string bad = write_temp("bad.txt", "2 1\n1 0 1 7 1 1:2\n");
  struct Case {
    std::string args;
    const char* needle;
  } cases[] = {
      {"coflows --policy fifo", "policy must be pf, pf-engine, fair, stf, sebf, bssi or offline"},
      {"coflows --ordered-share 0", "ordered share must be within"},
      {"coflows --aging-s -1", "aging must be within [0, 1e9) s"},
      {"coflows --trace /no/such/trace", "cannot open"},
      {"coflows --trace '" + bad + "'", ":2: mapper port"},
  };
  for (const auto& k : cases) {
    CliResult e = sim(k.args);
    EXPECT_EQ(e.status, 2) << k.args;
    EXPECT_NE(e.err.find(k.needle), std::string::npos) << k.args << ": " << e.err;
  }
  std::remove(trace.c_str());
  std::remove(bad.c_str());
}

TEST(CoflowCli, TheTraceFigureReportsSpeedupsOverFairSharing) {
  const std::string dir = temp_path("coflowfig");
  CliResult r = sim("figure coflow-trace --quick --no-plot --no-progress --out '" + dir + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  json j = json::parse(slurp(dir + "/coflow-trace.json"));
  for (const char* p : {"pf", "fair", "stf", "sebf", "offline"}) {
    ASSERT_TRUE(j["summary"].contains(p)) << p;
    EXPECT_GT(j["summary"][p]["cct_mean_s"].get<double>(), 0) << p;
  }
  EXPECT_DOUBLE_EQ(j["summary"]["pf"]["speedup_mean_vs_pf"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j["summary"]["fair"]["speedup_mean_vs_fair"].get<double>(), 1.0);
  // Max-min hands on what equal shares leave idle: faster on this trace.
  EXPECT_GE(j["summary"]["pf"]["speedup_mean_vs_fair"].get<double>(), 1.0);
  // No schedule beats each coflow alone; the coflow policies beat fair
  // sharing on the trace's small coflows.
  for (const char* p : {"pf", "fair", "stf", "sebf"}) {
    EXPECT_GE(j["summary"][p]["cct_mean_s"].get<double>(),
              j["summary"]["offline"]["cct_mean_s"].get<double>() * (1 - 1e-9))
        << p;
    if (std::string(p) != "pf" && std::string(p) != "fair") {
      EXPECT_GT(j["summary"][p]["speedup_small_vs_pf"].get<double>(), 1.5) << p;
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace flowtune::sim
