// Flow utilities: the α-fair family U(x) = w·x^(1-α)/(1-α), with α = 1 meaning
// U(x) = w·log x (weighted proportional fairness, the default). Large α
// approaches max-min fairness. NED needs two things from a utility (paper §2):
// the rate a flow picks at path price P, x = U'^-1(P), and its slope dx/dP.
// For this family both have closed forms:
//   x(P) = (w / P)^(1/α),   dx/dP = -x / (α·P).
#pragma once

#include <cmath>

namespace flowtune::alloc {

class AlphaFair {
 public:
  explicit AlphaFair(double alpha = 1.0) : alpha_(alpha), inv_alpha_(1.0 / alpha) {}

  double alpha() const { return alpha_; }
  bool is_log() const { return alpha_ == 1.0; }

  // x = U'^-1(P). Requires P > 0.
  template <typename Real>
  Real rate(Real weight, Real price) const {
    if (is_log()) return weight / price;
    return static_cast<Real>(std::pow(weight / price, static_cast<Real>(inv_alpha_)));
  }
  // -dx/dP at rate x and price P (positive).
  template <typename Real>
  Real slope(Real rate, Real price) const {
    return rate / (static_cast<Real>(alpha_) * price);
  }
  // U'(x): the price at which a flow asks for exactly x. Requires x > 0.
  double marginal(double weight, double x) const {
    return is_log() ? weight / x : weight * std::pow(x, -alpha_);
  }
  // U(x), for reporting an allocation's total utility.
  double utility(double weight, double x) const {
    return is_log() ? weight * std::log(x) : weight * std::pow(x, 1 - alpha_) / (1 - alpha_);
  }

 private:
  double alpha_;
  double inv_alpha_;
};

}  // namespace flowtune::alloc
