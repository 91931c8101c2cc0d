// A deliberately naive serial NED + F-NORM, the baseline the engine benchmark
// measures in the same run: array-of-structures flows with heap-allocated
// paths, doubles throughout, a division per use and no blocking. It computes
// the same iteration as the engine (Algorithm 1 + eq. 6) for log utility.
#pragma once

#include <algorithm>
#include <vector>

namespace flowtune::bench {

struct NaiveFlow {
  std::vector<int> path;
  double weight = 1;
  double rate = 0;
  double normalized = 0;
};

struct NaiveLink {
  double capacity = 0;
  double price = 1;
  double load = 0;
  double hessian = 0;
};

class NaiveEngine {
 public:
  std::vector<NaiveLink> links;
  std::vector<NaiveFlow> flows;
  double gamma = 0.4;

  void iterate() {
    for (auto& l : links) l.load = l.hessian = 0;
    for (auto& f : flows) {
      double p = 0;
      for (int l : f.path) p += links[l].price;
      f.rate = f.weight / p;
      for (int l : f.path) {
        links[l].load += f.rate;
        links[l].hessian += f.weight / (p * p);
      }
    }
    for (auto& l : links) {
      if (l.hessian > 0) {
        l.price = std::max(0.0, l.price + gamma * (l.load - l.capacity) / l.hessian);
      }
    }
    for (auto& f : flows) {
      double worst = 0;
      for (int l : f.path) worst = std::max(worst, links[l].load / links[l].capacity);
      f.normalized = f.rate / worst;
    }
  }
};

}  // namespace flowtune::bench
