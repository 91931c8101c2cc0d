// flowtune::sim::solve (the offline solver library) and the flowtune-sim
// command line: output shape, rates on a parking lot against the closed form,
// every kind of bad input naming its entry, and the CLI's exit statuses.
#include "solve.h"
#include "sim_cli.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

namespace flowtune::sim {
namespace {

using nlohmann::json;

// Three 10 Gbit/s links in a row; one flow over all three, one per link:
// the long flow gets c / 4 = 2.5 Gbit/s, each short flow 3c / 4 = 7.5 Gbit/s.
json parking_lot() {
  return json::parse(R"({
    "links": [{"id": "a-b", "capacity_bps": 10e9},
              {"id": "b-c", "capacity_bps": 10e9},
              {"id": "c-d", "capacity_bps": 10e9}],
    "flows": [{"id": "long", "path": ["a-b", "b-c", "c-d"]},
              {"id": "ab", "path": ["a-b"]},
              {"id": "bc", "path": ["b-c"]},
              {"id": "cd", "path": ["c-d"], "weight": 1}]
  })");
}

SolveOptions tight() {
  SolveOptions o;
  o.engine.tolerance = 1e-10;
  return o;
}

std::map<std::string, double> rates_by_id(const json& out) {
  std::map<std::string, double> m;
  for (const auto& r : out.at("rates")) m[r.at("id").dump()] = r.at("bps").get<double>();
  return m;
}

TEST(Solve, ParkingLotRatesMatchTheClosedForm) {
  json out = solve(parking_lot(), tight());
  auto r = rates_by_id(out);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_NEAR(r["\"long\""], 2.5e9, 1e-6 * 2.5e9);
  for (const char* id : {"\"ab\"", "\"bc\"", "\"cd\""})
    EXPECT_NEAR(r[id], 7.5e9, 1e-6 * 7.5e9) << id;
  EXPECT_TRUE(out.at("converged").get<bool>());
  EXPECT_LE(out.at("max_residual").get<double>(), 1e-10);
}

TEST(Solve, OutputHasTheDocumentedShape) {
  json in = parking_lot();
  json out = solve(in, tight());
  ASSERT_TRUE(out.is_object());
  std::set<std::string> keys;
  for (const auto& [k, v] : out.items()) keys.insert(k);
  EXPECT_EQ(keys, (std::set<std::string>{"rates", "iterations", "converged", "max_link_utilization",
                                         "max_residual", "algorithm", "norm", "links"}));
  EXPECT_TRUE(out["iterations"].is_number_unsigned());
  EXPECT_GE(out["iterations"].get<std::uint64_t>(), 1u);
  EXPECT_TRUE(out["converged"].is_boolean());
  EXPECT_EQ(out["algorithm"], "ned");
  EXPECT_EQ(out["norm"], "fnorm");

  // Rates: one per flow, in input order, ids echoed with their JSON type.
  ASSERT_TRUE(out["rates"].is_array());
  ASSERT_EQ(out["rates"].size(), in["flows"].size());
  for (std::size_t i = 0; i < in["flows"].size(); ++i) {
    const json& r = out["rates"][i];
    EXPECT_EQ(r.size(), 2u);
    EXPECT_EQ(r.at("id"), in["flows"][i]["id"]);
    EXPECT_TRUE(r.at("bps").is_number());
  }
  // Links: allocation = Σ of the reported rates of flows crossing the link,
  // utilization = allocation / capacity, max_link_utilization their maximum.
  ASSERT_TRUE(out["links"].is_array());
  ASSERT_EQ(out["links"].size(), in["links"].size());
  double max_util = 0;
  for (std::size_t l = 0; l < in["links"].size(); ++l) {
    const json& link = out["links"][l];
    EXPECT_EQ(link.size(), 4u);
    EXPECT_EQ(link.at("id"), in["links"][l]["id"]);
    double sum = 0;
    for (std::size_t i = 0; i < in["flows"].size(); ++i) {
      for (const auto& hop : in["flows"][i]["path"]) {
        if (hop == in["links"][l]["id"]) sum += out["rates"][i]["bps"].get<double>();
      }
    }
    const double cap = in["links"][l]["capacity_bps"].get<double>();
    EXPECT_NEAR(link.at("allocated_bps").get<double>(), sum, 1e-9 * cap);
    EXPECT_NEAR(link.at("utilization").get<double>(), sum / cap, 1e-9);
    EXPECT_LE(link.at("utilization").get<double>(), 1 + 1e-9);
    // Each link carries one long and one short flow: price 1 / 7.5 per Gbit/s.
    EXPECT_NEAR(link.at("price").get<double>(), 1 / 7.5, 1e-6);
    max_util = std::max(max_util, link.at("utilization").get<double>());
  }
  EXPECT_DOUBLE_EQ(out["max_link_utilization"].get<double>(), max_util);
}

TEST(Solve, IntegerIdsWeightsAndCapsAreHonoured) {
  // Link 7 (12 Gbit/s): flow 1 (weight 1), flow 2 (weight 2), flow 3 capped
  // at 1 Gbit/s. Flow 3 gets its cap; flows 1 and 2 split 11 Gbit/s 1:2.
  json in = json::parse(R"({
    "links": [{"id": 7, "capacity_bps": 12e9}],
    "flows": [{"id": 1, "path": [7]},
              {"id": 2, "path": [7], "weight": 2},
              {"id": 3, "path": [7], "weight": 5, "max_bps": 1e9}]
  })");
  json out = solve(in, tight());
  ASSERT_EQ(out["rates"].size(), 3u);
  EXPECT_TRUE(out["rates"][0]["id"].is_number_integer());
  EXPECT_EQ(out["rates"][0]["id"], 1);
  EXPECT_EQ(out["links"][0]["id"], 7);
  EXPECT_NEAR(out["rates"][0]["bps"].get<double>(), 11e9 / 3, 1e-6 * 11e9);
  EXPECT_NEAR(out["rates"][1]["bps"].get<double>(), 22e9 / 3, 1e-6 * 11e9);
  EXPECT_NEAR(out["rates"][2]["bps"].get<double>(), 1e9, 1e-6 * 1e9);
}

TEST(Solve, OptionsSelectAlgorithmNormalizerAndIterationCount) {
  SolveOptions o;
  o.iterations = 5;
  o.engine.algorithm = alloc::Algorithm::kGradient;
  o.engine.normalizer = alloc::Normalizer::kUNorm;
  json out = solve(parking_lot(), o);
  EXPECT_EQ(out["iterations"], 5);
  EXPECT_EQ(out["algorithm"], "gradient");
  EXPECT_EQ(out["norm"], "unorm");
  EXPECT_FALSE(out["converged"].get<bool>());  // 5 Gradient steps are not enough
  // U-NORM: the busiest link is exactly full.
  EXPECT_NEAR(out["max_link_utilization"].get<double>(), 1.0, 1e-12);
  // Gradient converges too, given the iterations.
  SolveOptions g = tight();
  g.engine.algorithm = alloc::Algorithm::kGradient;
  g.engine.tolerance = 1e-9;
  auto r = rates_by_id(solve(parking_lot(), g));
  EXPECT_NEAR(r["\"long\""], 2.5e9, 1e-5 * 2.5e9);
  EXPECT_NEAR(r["\"cd\""], 7.5e9, 1e-5 * 7.5e9);
}

TEST(Solve, ThreadedDriverGivesTheSameAnswerAsSerial) {
  SolveOptions par = tight();
  par.threads = 2;
  json a = solve(parking_lot(), tight());
  json b = solve(parking_lot(), par);
  EXPECT_EQ(a["rates"], b["rates"]);
  EXPECT_EQ(a["iterations"], b["iterations"]);
}

TEST(Solve, NoFlowsIsTriviallySolved) {
  json out = solve(json::parse(R"({"links": [{"id": "x", "capacity_bps": 1e9}], "flows": []})"),
                   SolveOptions{});
  EXPECT_EQ(out["rates"], json::array());
  EXPECT_EQ(out["iterations"], 0);
  EXPECT_TRUE(out["converged"].get<bool>());
  EXPECT_EQ(out["links"][0]["allocated_bps"], 0.0);
}

// ---- Bad input: InputError naming the offending entry ----

// Expects solve() to throw InputError whose message starts with "where:".
void expect_input_error(const std::string& problem, const std::string& where) {
  SCOPED_TRACE(problem);
  json in = json::parse(problem);
  try {
    solve(in, SolveOptions{});
    ADD_FAILURE() << "no InputError, expected one naming " << where;
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(where + ":", 0), 0u) << "message '" << msg << "' should name " << where;
  }
}

TEST(SolveInput, UnknownLinkNamesThePathEntry) {
  expect_input_error(R"({"links": [{"id": "a", "capacity_bps": 1e9}],
                        "flows": [{"id": 0, "path": ["a"]}, {"id": 1, "path": ["b"]}]})",
                     "flows[1].path[0]");
  expect_input_error(
      R"({"links": [{"id": "a", "capacity_bps": 1e9}, {"id": 2, "capacity_bps": 1e9}],
                        "flows": [{"id": 0, "path": ["a", "2"]}]})",
      "flows[0].path[1]");
}

TEST(SolveInput, BadCapacityNamesTheLink) {
  for (const char* cap : {"-1e9", "0", "\"10e9\"", "null", "true"}) {
    expect_input_error(std::string(R"({"links": [{"id": "a", "capacity_bps": 1e9},
                                                {"id": "b", "capacity_bps": )") +
                           cap + R"(}], "flows": []})",
                       "links[1].capacity_bps");
  }
}

TEST(SolveInput, BadPathsNameTheFlow) {
  const std::string links = R"({"links": [{"id": "a", "capacity_bps": 1e9},
      {"id": "b", "capacity_bps": 1e9}, {"id": "c", "capacity_bps": 1e9},
      {"id": "d", "capacity_bps": 1e9}, {"id": "e", "capacity_bps": 1e9}], "flows": [)";
  expect_input_error(links + R"({"id": 0, "path": ["a"]}, {"id": 1, "path": []}]})",
                     "flows[1].path");
  expect_input_error(links + R"({"id": 0}]})", "flows[0].path");
  expect_input_error(links + R"({"id": 0, "path": "a"}]})", "flows[0].path");
  expect_input_error(links + R"({"id": 0, "path": ["a", "b", "c", "d", "e"]}]})", "flows[0].path");
  expect_input_error(links + R"({"id": 0, "path": ["a", "b", "a"]}]})", "flows[0].path[2]");
  expect_input_error(links + R"({"id": 0, "path": ["a", 1.5]}]})", "flows[0].path[1]");
}

TEST(SolveInput, DuplicateIdsNameTheSecondEntry) {
  expect_input_error(
      R"({"links": [{"id": "a", "capacity_bps": 1e9}, {"id": "b", "capacity_bps": 1e9},
                                   {"id": "a", "capacity_bps": 1e9}], "flows": []})",
      "links[2].id");
  expect_input_error(R"({"links": [{"id": "a", "capacity_bps": 1e9}],
                        "flows": [{"id": 5, "path": ["a"]}, {"id": 5, "path": ["a"]}]})",
                     "flows[1].id");
}

TEST(SolveInput, MissingFieldsNameTheEntry) {
  expect_input_error(R"({"links": [{"capacity_bps": 1e9}], "flows": []})", "links[0]");
  expect_input_error(R"({"links": [{"id": "a", "capacity_bps": 1e9}, {"id": "b"}], "flows": []})",
                     "links[1]");
  expect_input_error(R"({"links": [{"id": "a", "capacity_bps": 1e9}],
                        "flows": [{"id": 0, "path": ["a"]}, {"path": ["a"]}]})",
                     "flows[1]");
  expect_input_error(R"({"flows": []})", "links");
  expect_input_error(R"({"links": []})", "flows");
}

TEST(SolveInput, NonArraysAndNonObjectsAreRejected) {
  expect_input_error(R"([])", "problem");
  expect_input_error(R"("links")", "problem");
  expect_input_error(R"({"links": {"id": "a"}, "flows": []})", "links");
  expect_input_error(R"({"links": [], "flows": {}})", "flows");
  expect_input_error(R"({"links": [{"id": "a", "capacity_bps": 1e9}, 3], "flows": []})",
                     "links[1]");
  expect_input_error(R"({"links": [{"id": "a", "capacity_bps": 1e9}], "flows": [[]]})", "flows[0]");
  expect_input_error(R"({"links": [{"id": true, "capacity_bps": 1e9}], "flows": []})",
                     "links[0].id");
}

TEST(SolveInput, ParseProblemReadsJsonTextAndNamesTheSourceOfMalformedText) {
  const json p = parse_problem(parking_lot().dump(), "lot.json");
  EXPECT_EQ(p, parking_lot());
  // 1e400 overflows a double: found by solve_fuzz, it escaped as
  // json::out_of_range and flowtune-sim exited 1 ("failed"), not 2.
  for (const char* bad : {"", "{", "{\"links\": [}", "[1, 2,]", "nul", "[1e400]",
                          "{\"links\": [{\"id\": 1, \"capacity_bps\": -1e400}]}"}) {
    try {
      (void)parse_problem(bad, "bad.json");
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("malformed JSON in 'bad.json': ", 0), 0u) << e.what();
    }
  }
}

TEST(SolveInput, BadWeightsAndRateCapsNameTheField) {
  const std::string head =
      R"({"links": [{"id": "a", "capacity_bps": 1e9}], "flows": [{"id": 0, "path": ["a"], )";
  for (const char* w : {"0", "-2", "\"heavy\""}) {
    expect_input_error(head + "\"weight\": " + w + "}]}", "flows[0].weight");
  }
  for (const char* m : {"-1", "\"fast\""}) {
    expect_input_error(head + "\"max_bps\": " + m + "}]}", "flows[0].max_bps");
  }
}

TEST(SolveInput, FlowBlockLinkLimitIsAnInputErrorNotACrash) {
  // A FlowBlock addresses its links with 16-bit local ids (65,519 usable), and
  // explicit problems have one site, so every flow lands in one block. Given
  // 65,520 links with one flow each, solve() must either solve the problem or
  // reject it with InputError naming the flow that does not fit
  // (flows[65519]); it must not abort the process. Run in a child so an abort
  // fails this test only.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  constexpr int kLinks = 65520;
  EXPECT_EXIT(
      {
        json in;
        in["links"] = json::array();
        in["flows"] = json::array();
        for (int i = 0; i < kLinks; ++i) {
          in["links"].push_back({{"id", i}, {"capacity_bps", 1e9}});
          in["flows"].push_back({{"id", i}, {"path", {i}}});
        }
        int code = 0;
        try {
          json out = solve(in, SolveOptions{});
          for (const auto& r : out["rates"]) {
            if (std::abs(r["bps"].get<double>() - 1e9) > 1e-3 * 1e9) code = 3;
          }
        } catch (const InputError& e) {
          code = std::string(e.what()).rfind("flows[65519]", 0) == 0 ? 0 : 4;
        } catch (...) {
          code = 5;
        }
        std::exit(code);
      },
      ::testing::ExitedWithCode(0), "");
}

// ---- The flowtune-sim binary ----

TEST(SimCli, SolvesAValidFileAndPrintsJson) {
  const std::string file = write_temp("lot.json", parking_lot().dump());
  CliResult r = sim("solve --tolerance 1e-10 '" + file + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  json out = json::parse(r.out);
  auto rates = rates_by_id(out);
  EXPECT_NEAR(rates["\"long\""], 2.5e9, 1e-6 * 2.5e9);
  EXPECT_NEAR(rates["\"ab\""], 7.5e9, 1e-6 * 7.5e9);
  EXPECT_TRUE(out["converged"].get<bool>());
  // Same from standard input, and as a table.
  CliResult s = sim("solve --tolerance 1e-10 -", file);
  ASSERT_EQ(s.status, 0) << s.err;
  EXPECT_EQ(json::parse(s.out), out);
  CliResult t = sim("solve --table '" + file + "'");
  ASSERT_EQ(t.status, 0) << t.err;
  EXPECT_NE(t.out.find("converged"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("2500.000"), std::string::npos) << t.out;  // long flow, Mbit/s
  std::remove(file.c_str());
}

TEST(SimCli, MalformedJsonExitsWithStatusTwo) {
  const std::string file =
      write_temp("bad.json", R"({"links": [{"id": "a", "capacity_bps": 1e9},)");
  CliResult r = sim("solve '" + file + "'");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("malformed JSON"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  std::remove(file.c_str());
  // A number no double holds is bad input too (it used to exit 1).
  const std::string huge =
      write_temp("huge.json", R"({"links": [{"id": "a", "capacity_bps": 1e400}], "flows": []})");
  r = sim("solve '" + huge + "'");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("malformed JSON in '" + huge + "'"), std::string::npos) << r.err;
  std::remove(huge.c_str());
}

TEST(SimCli, BadInputExitsWithStatusTwoNamingTheEntry) {
  const std::string file = write_temp(
      "unknown.json",
      R"({"links": [{"id": "a", "capacity_bps": 1e9}], "flows": [{"id": 0, "path": ["zz"]}]})");
  CliResult r = sim("solve '" + file + "'");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("flows[0].path[0]"), std::string::npos) << r.err;
  std::remove(file.c_str());
}

TEST(SimCli, UsageErrorsExitWithStatusTwo) {
  const std::string file = write_temp("ok.json", parking_lot().dump());
  CliResult unknown_flag = sim("solve --frobnicate '" + file + "'");
  EXPECT_EQ(unknown_flag.status, 2);
  EXPECT_NE(unknown_flag.err.find("--frobnicate"), std::string::npos) << unknown_flag.err;
  EXPECT_EQ(sim("solve --iterations -3 '" + file + "'").status, 2);
  EXPECT_EQ(sim("solve --gamma abc '" + file + "'").status, 2);
  EXPECT_EQ(sim("solve --gamma -1 '" + file + "'").status, 2);  // rejected by the engine
  EXPECT_EQ(sim("solve --gamma 1e9 '" + file + "'").status, 2);  // NED diverges past 1
  EXPECT_EQ(sim("solve --gamma 0x1 '" + file + "'").status, 2);
  EXPECT_EQ(sim("solve --algorithm newton '" + file + "'").status, 2);
  EXPECT_EQ(sim("solve").status, 2);
  EXPECT_EQ(sim("solve '" + temp_path("does-not-exist.json") + "'").status, 2);
  EXPECT_EQ(sim("").status, 2);
  EXPECT_EQ(sim("frobnicate").status, 2);
  std::remove(file.c_str());
}

TEST(SimCli, HelpExitsWithStatusZero) {
  for (const char* args : {"--help", "-h", "help", "solve --help"}) {
    CliResult r = sim(args);
    EXPECT_EQ(r.status, 0) << args;
    EXPECT_NE(r.out.find("usage: flowtune-sim"), std::string::npos) << args;
  }
}

}  // namespace
}  // namespace flowtune::sim
