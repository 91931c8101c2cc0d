// `flowtune-sim figure NAME`: the paper's numeric and rate-update experiments
// (§5.3.2 Figs. 9-11, §5.3.1 convergence, §5.3.3 K fairness, §5.4 Figs. 16-17)
// as parameter sweeps over the simulator, each producing one JSON document
// with a top-level "summary" of headline figures beside the paper's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace flowtune::sim {

struct FigureOptions {
  bool quick = false;    // shorter runs, fewer points: the whole figure in well under a minute
  unsigned jobs = 0;     // simulations run side by side; 0 = one per core
  std::uint64_t seed = 1;
  bool progress = false;  // a progress bar on stderr
};

const std::vector<std::string>& figure_names();  // without "all"

// Runs one figure; throws std::invalid_argument for an unknown name.
// Simulations shared between figures (the normalizer and fairness runs) are
// run once per FigureRunner.
class FigureRunner {
 public:
  explicit FigureRunner(FigureOptions options);
  ~FigureRunner();
  FigureRunner(const FigureRunner&) = delete;
  FigureRunner& operator=(const FigureRunner&) = delete;
  nlohmann::json run(const std::string& name);

 struct Impl;  // the figures themselves (figures.cc)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace flowtune::sim
