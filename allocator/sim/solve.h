// The offline solver behind `flowtune-sim solve`: reads a problem (links with
// capacities, flows with paths and weights) as JSON, runs the engine until it
// converges or for a fixed number of iterations, and reports rates as JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "flowtune/alloc/engine.h"

namespace flowtune::sim {

// Bad input: the message names the offending entry (e.g. "flows[3].path[1]").
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct SolveOptions {
  alloc::EngineConfig engine;
  // Run exactly this many iterations; unset = until converged (or max_iterations).
  std::optional<std::uint64_t> iterations;
  std::uint64_t max_iterations = 100000;
  // 0 = serial engine; otherwise the multi-core driver with this many threads.
  unsigned threads = 0;
};

// The problem in a solve input's text (a file's or stdin's bytes); throws
// InputError "malformed JSON in 'SOURCE': ..." when it is not JSON (or holds
// a number no double can hold). solve() checks what the JSON holds.
nlohmann::json parse_problem(std::string_view text, const std::string& source);

// Throws InputError for malformed or inconsistent problems.
nlohmann::json solve(const nlohmann::json& problem, const SolveOptions& options);

}  // namespace flowtune::sim
