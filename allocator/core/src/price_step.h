// One link's price step, shared by the engines (engine.cc, clos_engine.cc).
#pragma once

#include <algorithm>
#include <cmath>

namespace flowtune::alloc::detail {

// One price step for a link (or a class's layer of it) with load y and
// Hessian diagonal h against capacity c: NED's Newton step (eq. 4) or
// Gradient's. Returns the link's KKT residual, relative to its capacity.
template <typename Real>
struct PriceStep {
  Real gamma, step;
  bool ned;
  Real operator()(Real& p, Real y, Real h, Real c, Real inv_cap) const {
    const Real g = y - c;
    const Real residual = (p > 0 ? std::abs(g) : std::max(g, Real{0})) * inv_cap;
    const Real np = ned ? p + gamma * g / h : p + step * g;
    p = std::max(np, Real{0});
    return residual;
  }
};

}  // namespace flowtune::alloc::detail
