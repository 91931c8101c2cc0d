// The flow-level simulator: flowlets drain at their rates, runs are
// deterministic per seed, F-NORM keeps links within capacity while raw rates
// over-allocate, the threshold cuts update traffic, the oracle bounds
// throughput, convergence, and the run / figure command lines.
#include "simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "convergence.h"
#include "sim_cli.h"
#include "workload.h"

namespace flowtune::sim {
namespace {

using nlohmann::json;

SimConfig small() {
  SimConfig c;
  c.topology.racks = 4;
  c.topology.hosts_per_rack = 8;
  c.topology.spines = 2;
  c.warmup_s = 0.002;
  c.duration_s = 0.004;
  return c;
}

// Every flowlet is 1 MB; two hosts at 10 Gbit/s; so little load (25
// flowlets/s) that flowlets rarely overlap.
SimConfig lone_flowlets(const std::string& cdf, double duration_s) {
  SimConfig c;
  c.topology = {1, 2, 1, 10e9, 0};
  c.workload = cdf;
  c.load = 0.01;
  c.warmup_s = 0;
  c.duration_s = duration_s;
  c.sample_every = 0;
  return c;
}

TEST(Simulator, ALoneFlowletDrainsAtItsRateAfterOneIteration) {
  // Alone, a flowlet waits for its first rate (< one 10 µs iteration) and
  // then sends at 99% of 10 Gbit/s (threshold 0.01).
  std::string cdf = write_temp("1mb.cdf", "1000000 1\n");
  SimResult r = simulate(lone_flowlets(cdf, 2));
  std::remove(cdf.c_str());
  const double alone_us = 1e6 * 8 / 9.9e9 * 1e6;
  ASSERT_GT(r.flowlets_finished, 20u);
  EXPECT_LE(r.flowlets_finished, r.flowlets_started);
  EXPECT_GE(r.fct_us.p50, alone_us);
  EXPECT_LE(r.fct_us.p50, alone_us + 10.0 + 1e-6);
  EXPECT_GE(r.fct_us.mean, alone_us);
}

TEST(Simulator, GivenFlowsRunOnTheirSpinesAndAreRecorded) {
  // Two 1 MB flowlets from rack 0 to rack 1 arriving together: on one spine
  // (same hash) they share its 40 Gbit/s uplink and still each get a
  // host link's 9.9; the run stops once both finished, and the records
  // carry what was given plus each end.
  SimConfig c = small();
  c.warmup_s = 0;
  c.duration_s = 0.05;
  c.record_flows = true;
  c.flows = {{0, 8, 1'000'000, 1e-6, 7, -1}, {1, 9, 1'000'000, 1e-6, 7, -1}};
  const SimResult r = simulate(c);
  ASSERT_EQ(r.flow_records.size(), 2u);
  const double alone_s = 1e6 * 8 / 9.9e9;
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(r.flow_records[i].src, c.flows[i].src);
    EXPECT_EQ(r.flow_records[i].bytes, c.flows[i].bytes);
    EXPECT_EQ(r.flow_records[i].ecmp_hash, 7u);
    EXPECT_GE(r.flow_records[i].end_s, 1e-6 + alone_s);
    EXPECT_LE(r.flow_records[i].end_s, 1e-6 + alone_s + 20e-6);
  }
  EXPECT_LT(static_cast<double>(r.steps) * c.iteration_s, 2 * alone_s);
  c.flows[1].start_s = 0;  // out of order
  EXPECT_THROW(validate(c), std::invalid_argument);
}

TEST(Simulator, AFlowListRoundTripsAndBadOnesNameTheirLine) {
  const std::vector<ListedFlow> flows = {{0, 1, 100, 0.5e-6, 42, -1}, {3, 2, 7, 1e-3, 9, 2e-3}};
  const auto path = std::filesystem::temp_directory_path() / "flowtune_flow_list_test.csv";
  auto write = [&](const std::string& text) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fputs(text.c_str(), f);
    std::fclose(f);
  };
  write(format_flow_list(flows));
  const std::vector<ListedFlow> back = load_flow_list(path.string());
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].src, 3u);
  EXPECT_EQ(back[1].ecmp_hash, 9u);
  EXPECT_EQ(back[0].start_s, 0.5e-6);
  EXPECT_EQ(back[1].end_s, 2e-3);
  write(std::string(kFlowListHeader) + "\n0,1,1,5,0,0,-1\n");
  EXPECT_THROW(load_flow_list(path.string()), WorkloadError);
  write(std::string(kFlowListHeader) + "\n0,1,2,5,1,0,-1\n1,1,2,5,0.5,0,-1\n");
  try {
    load_flow_list(path.string());
    ADD_FAILURE() << "unsorted starts accepted";
  } catch (const WorkloadError& e) {
    EXPECT_NE(std::string(e.what()).find(":3:"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

TEST(Simulator, HeadroomIsLeftUnscheduledAsByTheAllocator) {
  // The daemon's capacity rule (rules::capacity_scale): a lone flowlet gets
  // (1 - threshold)(1 - headroom) of its link, rounded down to bytes/s.
  std::string cdf = write_temp("1mb-headroom.cdf", "1000000 1\n");
  SimConfig c = lone_flowlets(cdf, 1);
  c.headroom = 0.2;
  SimResult r = simulate(c);
  std::remove(cdf.c_str());
  // Oracle: 1 MB at 10 Gbit/s * 0.99 * 0.8, plus at most one iteration's wait.
  const double alone_us = 1e6 * 8 / (10e9 * 0.99 * 0.8) * 1e6;
  ASSERT_GT(r.flowlets_finished, 5u);
  EXPECT_GE(r.fct_us.p50, alone_us);
  EXPECT_LE(r.fct_us.p50, alone_us + 10.0 + 1e-3);
  c.headroom = 0.95;
  EXPECT_THROW(validate(c), std::invalid_argument);
}

TEST(Simulator, ASeedNamesOneRun) {
  SimConfig c = small();
  json a = to_json(simulate(c)), b = to_json(simulate(c));
  // Times on this machine, not results.
  for (json* j : {&a, &b}) {
    EXPECT_GT((*j)["engine_iteration_us_mean"].get<double>(), 0);
    j->erase("wall_s");
    j->erase("engine_iteration_us_mean");
  }
  EXPECT_EQ(a, b);
  c.seed = 2;
  json d = to_json(simulate(c));
  d.erase("wall_s");
  d.erase("engine_iteration_us_mean");
  EXPECT_NE(a, d);
}

TEST(Simulator, FNormKeepsLinksWithinCapacityWhileRawRatesDoNot) {
  SimConfig c;  // the paper's 144-host network, web workload
  c.load = 0.8;
  c.warmup_s = 0.002;
  c.duration_s = 0.005;
  c.threshold = 0;
  c.sample_every = 5;
  SimResult r = simulate(c);
  ASSERT_GT(r.link_samples, 50u);
  EXPECT_LE(r.max_link_utilization_normalized, 1 + 1e-9);
  EXPECT_GT(r.overallocation_gbps.mean, 0);  // NED's raw rates over-allocate
  // Carried throughput tracks the offered load (144 x 10 Gbit/s x 0.8).
  EXPECT_NEAR(r.throughput_normalized_gbps_mean, 1152, 0.2 * 1152);
  EXPECT_GT(r.flowlets_started, 1000u);
  EXPECT_GT(r.flowlets_finished, 0.8 * static_cast<double>(r.flowlets_started));
}

TEST(Simulator, ControlTrafficIsCountedAndTheThresholdCutsUpdates) {
  SimConfig c = small();
  c.load = 0.8;
  SimResult fine = simulate(c);
  c.threshold = 0.1;
  SimResult coarse = simulate(c);
  ASSERT_GT(fine.rate_updates, 0u);
  EXPECT_LT(coarse.rate_updates, fine.rate_updates);
  EXPECT_LT(coarse.bytes_from_allocator, fine.bytes_from_allocator);
  // Each message pays at least the per-packet overhead and carries at least
  // one start (to) or one update (from).
  EXPECT_GE(fine.bytes_to_allocator, fine.messages_to_allocator * (78 + 20));
  EXPECT_GE(fine.messages_from_allocator, 1u);
  EXPECT_LE(fine.messages_from_allocator, fine.rate_updates);
  const double capacity_bits = 32 * 10e9 * c.duration_s;
  EXPECT_NEAR(fine.fraction_from_allocator,
              static_cast<double>(fine.bytes_from_allocator) * 8 / capacity_bits, 1e-12);
  // A start per flowlet reaches the allocator before its first iteration.
  EXPECT_GE(fine.messages_to_allocator, 1u);
  EXPECT_GE(fine.start_events, fine.flowlets_started);
  // The paper's encodings price the same messages at 6 B per update plus
  // one packet's overhead per message (all fit one packet here).
  EXPECT_NEAR(fine.paper_encoding_fraction_from * capacity_bits / 8,
              6.0 * static_cast<double>(fine.rate_updates) +
                  78.0 * static_cast<double>(fine.messages_from_allocator),
              1.0);
}

TEST(Simulator, OracleBoundsNormalizedThroughputAndUNormLosesMore) {
  SimConfig c = small();
  c.load = 0.7;
  c.threshold = 0;
  c.oracle_every = 5;
  SimResult f = simulate(c);
  c.normalizer = alloc::Normalizer::kUNorm;
  SimResult u = simulate(c);
  ASSERT_GT(f.oracle_samples, 10u);
  EXPECT_EQ(f.oracle_unconverged, 0u);
  EXPECT_GT(f.fraction_of_optimal, 0.5);
  EXPECT_LE(f.fraction_of_optimal, 1.02);
  EXPECT_LT(u.fraction_of_optimal, f.fraction_of_optimal);
  EXPECT_LE(f.fairness_points_per_flow, 0.05);
  EXPECT_LT(u.fairness_points_per_flow, f.fairness_points_per_flow);
}

// The Clos layout iterates the same NED + F-NORM as the general engine, so
// the paper's network under load gives the same run up to rounding: the
// same arrivals, FCTs and throughput within a percent, links within
// capacity.
TEST(Simulator, TheClosEngineRunsTheSameSimulation) {
  SimConfig c;  // the paper's 144-host network, web workload
  c.load = 0.7;
  c.warmup_s = 0.002;
  c.duration_s = 0.006;
  SimResult general = simulate(c);
  c.clos_engine = true;
  SimResult clos = simulate(c);
  ASSERT_GT(general.flowlets_started, 1000u);
  EXPECT_EQ(clos.flowlets_started, general.flowlets_started);
  EXPECT_NEAR(static_cast<double>(clos.flowlets_finished), static_cast<double>(general.flowlets_finished),
              0.01 * static_cast<double>(general.flowlets_finished));
  EXPECT_NEAR(clos.fct_us.mean, general.fct_us.mean, 0.01 * general.fct_us.mean);
  EXPECT_NEAR(clos.throughput_normalized_gbps_mean, general.throughput_normalized_gbps_mean,
              0.01 * general.throughput_normalized_gbps_mean);
  EXPECT_LE(clos.max_link_utilization_normalized, 1 + 1e-9);
}

TEST(Simulator, BadConfigsAreRefused) {
  SimConfig c = small();
  c.load = 0;
  EXPECT_THROW(validate(c), std::invalid_argument);
  c = small();
  c.threshold = 0.7;
  EXPECT_THROW(validate(c), std::invalid_argument);
  c = small();
  c.topology.racks = 0;
  EXPECT_THROW(validate(c), std::invalid_argument);
  c = small();
  c.workload = "no-such-workload";
  EXPECT_THROW(simulate(c), WorkloadError);
  c = small();
  c.tagged_fraction = 1.5;
  EXPECT_THROW(validate(c), std::invalid_argument);
  c = small();
  c.clos_engine = true;
  c.normalizer = alloc::Normalizer::kUNorm;  // the Clos engine runs F-NORM only
  EXPECT_THROW(validate(c), std::invalid_argument);
}

TEST(Simulator, Class0ShortensTheTaggedFlowletsAndOnlyThem) {
  // The same flowlets (one seed, tagging drawn in both modes) at load 0.8:
  // in class 0 the tagged tenth's short flowlets finish faster at p99; the
  // rest, which yield to them, do not get faster. Without class 0 the
  // tagged flowlets are a random sample of all: the same distribution.
  SimConfig c = small();
  c.load = 0.8;
  c.duration_s = 0.01;
  c.sample_every = 0;
  c.tagged_fraction = 0.1;
  SimResult one = simulate(c);
  c.tagged_class0 = true;
  SimResult prio = simulate(c);
  ASSERT_GT(one.short_fct_tagged_us.count, 200u);
  for (const SimResult* r : {&one, &prio}) {
    const double n = static_cast<double>(r->short_fct_tagged_us.count + r->short_fct_other_us.count);
    EXPECT_NEAR(static_cast<double>(r->short_fct_tagged_us.count) / n, 0.1, 0.03);
  }
  EXPECT_LT(prio.short_fct_tagged_us.p99, 0.5 * one.short_fct_tagged_us.p99);
  EXPECT_GE(prio.short_fct_other_us.p99, one.short_fct_other_us.p99);
  EXPECT_LT(one.short_fct_tagged_us.p50, 1.5 * one.short_fct_other_us.p50);
  EXPECT_GT(one.short_fct_tagged_us.p50, one.short_fct_other_us.p50 / 1.5);
}

TEST(Convergence, NedReachesTheOptimumFasterThanGradient) {
  ConvergenceOptions o;
  o.quick = true;
  json j = run_convergence(o);
  const json& s = j["summary"];
  EXPECT_GE(s["ned_iterations_to_1pct"].get<double>(), 1);
  EXPECT_LT(s["ned_iterations_to_1pct"].get<double>(), s["gradient_iterations_to_1pct"].get<double>());
  EXPECT_EQ(s["ned_censored_events"], 0);
  // One bottleneck: F-NORM shares it exactly from the first iteration.
  EXPECT_LE(s["five_flows_ned_worst_iterations_to_1pct"].get<int>(), 3);
  EXPECT_EQ(j["five_flows"]["ned"]["events"].size(), 9u);  // 5 joins, 4 leaves with flows left
}

// ---- the command line ----

TEST(SimCli, RunPrintsConfigAndResult) {
  CliResult r = sim("run --racks 2 --hosts-per-rack 4 --spines 1 --duration-ms 2 --warmup-ms 1 "
                    "--load 0.5 --workload hadoop --no-progress");
  ASSERT_EQ(r.status, 0) << r.err;
  json out = json::parse(r.out);
  EXPECT_EQ(out["config"]["hosts"], 8);
  EXPECT_EQ(out["config"]["workload"], "hadoop");
  EXPECT_GT(out["result"]["flowlets"]["started"].get<int>(), 0);
  EXPECT_TRUE(out["result"]["control"].contains("fraction_of_capacity"));
}

TEST(SimCli, BadRunArgumentsExitTwoWithAReason) {
  struct Case {
    const char* args;
    const char* needle;
  } cases[] = {
      {"run --load abc", "--load expects a number"},
      {"run --load 0", "load must be in"},
      {"run --headroom 0.95", "headroom must be in"},
      {"run --workload no-such-workload --duration-ms 1", "unknown workload"},
      {"run --algorithm newton", "--algorithm must be"},
      {"run --frobnicate", "unknown option"},
      {"figure", "figure needs a NAME"},
      {"figure bogus", "unknown figure 'bogus'"},
  };
  for (const auto& k : cases) {
    CliResult r = sim(k.args);
    EXPECT_EQ(r.status, 2) << k.args;
    EXPECT_NE(r.err.find(k.needle), std::string::npos) << k.args << ": " << r.err;
  }
}

TEST(SimCli, FigureWritesJsonWithItsSummary) {
  std::string dir = temp_path("fig");
  CliResult r = sim("figure convergence --quick --no-plot --no-progress --out '" + dir + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  json j = json::parse(slurp(dir + "/convergence.json"));
  EXPECT_EQ(j["figure"], "convergence");
  EXPECT_TRUE(j["quick"].get<bool>());
  EXPECT_TRUE(j["summary"].contains("ned_iterations_to_1pct"));
  EXPECT_TRUE(j["summary"].contains("gradient_iterations_to_1pct"));
  EXPECT_NE(r.out.find("convergence: {"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

// The normalizers figure reruns load 0.8 at the interval each engine
// sustained in its 10 µs run (its own time per iteration, rounded up to
// 0.1 µs) and reports it beside the swept intervals.
TEST(SimCli, NormalizersRerunAtTheIntervalTheEngineSustains) {
  std::string dir = temp_path("fig");
  CliResult r = sim("figure normalizers --quick --no-plot --no-progress --out '" + dir + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  json j = json::parse(slurp(dir + "/normalizers.json"));
  int sustained = 0;
  for (const json& p : j["interval_sweep"]) {
    EXPECT_GT(p["engine_iteration_us_mean"].get<double>(), 0);
    if (!p["sustained"].get<bool>()) continue;
    ++sustained;
    for (const json& q : j["interval_sweep"]) {
      if (q["sustained"].get<bool>() || q["scheme"] != p["scheme"] || q["iteration_us"].get<double>() != 10) continue;
      const double want = std::max(0.1, std::ceil(q["engine_iteration_us_mean"].get<double>() * 10) / 10);
      EXPECT_NEAR(p["iteration_us"].get<double>(), want, 1e-9) << p["scheme"];
    }
    const std::string key = p["scheme"].get<std::string>() + "_fraction_of_optimal_at_sustained_interval_load_0_8";
    EXPECT_EQ(j["summary"][key], p["fraction_of_optimal"]);
    EXPECT_GT(p["fraction_of_optimal"].get<double>(), 0.5);
  }
  EXPECT_EQ(sustained, 2) << "NED and Gradient";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace flowtune::sim
