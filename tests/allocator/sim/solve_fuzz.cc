// libFuzzer target over `flowtune-sim solve`'s input: the input is the text of
// a problem file, read as the command reads it (parse_problem, then solve()),
// with a fixed 4 iterations so one input costs little whatever it asks.
// Checked, beyond nothing crashing or tripping a sanitizer:
//   - a refused problem throws InputError (no other exception) that names
//     the entry at fault and says why ("flows[3].path[1]: unknown link ...");
//   - an accepted one is answered in full: one finite, non-negative rate per
//     flow, in input order with its id; no flow above its max_bps; and, as
//     F-NORM promises, no link allocated above its capacity.
// Run with -max_len=4096 (a few hundred flows).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "solve.h"

namespace {

using nlohmann::json;
using flowtune::sim::InputError;

[[noreturn]] void fail(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "solve_fuzz: %s\n%s\n", what, detail.c_str());
  std::abort();
}

// Slack for rounding: F-NORM scales by a ratio computed in doubles.
constexpr double kSlack = 1e-9;

void check(const json& in, const json& out) {
  const json& flows = in.at("flows");
  const json& rates = out.at("rates");
  if (rates.size() != flows.size()) fail("not one rate per flow", out.dump());
  for (std::size_t i = 0; i < flows.size(); ++i) {
    if (rates[i].at("id") != flows[i].at("id")) fail("rates out of order", out.dump());
    const json& bps = rates[i].at("bps");
    if (!bps.is_number()) fail("a rate is not a number (NaN?)", out.dump());
    const double r = bps.get<double>();
    if (!std::isfinite(r) || r < 0) fail("a rate is negative or not finite", out.dump());
    const double cap = flows[i].value("max_bps", 0.0);
    if (cap > 0 && r > cap * (1 + kSlack)) fail("a flow above its max_bps", out.dump());
  }
  const json& links = out.at("links");
  if (links.size() != in.at("links").size()) fail("not one entry per link", out.dump());
  for (std::size_t l = 0; l < links.size(); ++l) {
    const double cap = in["links"][l].at("capacity_bps").get<double>();
    const json& a = links[l].at("allocated_bps");
    if (!a.is_number() || a.get<double>() > cap * (1 + kSlack)) {
      fail("a link is allocated above its capacity", out.dump());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  flowtune::sim::SolveOptions opt;
  opt.iterations = 4;
  json in;
  try {
    in = flowtune::sim::parse_problem(text, "fuzz.json");
  } catch (const InputError& e) {
    if (std::string_view(e.what()).rfind("malformed JSON in 'fuzz.json': ", 0) != 0) {
      fail("a malformed file's refusal does not name it", e.what());
    }
    return 0;
  }
  try {
    check(in, flowtune::sim::solve(in, opt));
  } catch (const InputError& e) {
    // "WHERE: WHAT", both non-empty.
    const std::string_view what = e.what();
    const std::size_t colon = what.find(": ");
    if (colon == 0 || colon == std::string_view::npos || colon + 2 >= what.size()) {
      fail("a refusal does not name the entry and say why", e.what());
    }
  }
  return 0;
}
