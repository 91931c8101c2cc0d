// Convergence of the online engine after a flowlet arrives or leaves (paper
// §5.3.1 D, Fig. 8), NED against Gradient, both with F-NORM, 10 µs per
// iteration:
//  - "five flows": the paper's scenario, five senders in different racks to
//    one receiver, a flow joining every 10 ms up to five, then leaving in
//    order; per event, the iterations until every normalized rate is within
//    10% / 1% of the optimum and stays there until the next event;
//  - "random events": a loaded two-tier network (random host pairs) at its
//    optimum; one random arrival or departure; iterations until every flow's
//    normalized rate is within 10% / 1% of the new optimum. Each event starts
//    from the exact previous optimum (prices copied from a tightly solved
//    reference engine), so events do not inherit each other's error.
#pragma once

#include <atomic>
#include <cstdint>

#include <nlohmann/json.hpp>

namespace flowtune::sim {

struct ConvergenceOptions {
  bool quick = false;
  std::uint64_t seed = 1;
  std::atomic<std::uint64_t>* progress = nullptr;  // counts iterations
};

// Iterations the run will count on `progress` (for a progress bar).
std::uint64_t convergence_work(const ConvergenceOptions& o);
// The "convergence" figure's JSON; its summary holds ned_iterations_to_1pct
// and gradient_iterations_to_1pct (medians over the random events).
nlohmann::json run_convergence(const ConvergenceOptions& o);

}  // namespace flowtune::sim
