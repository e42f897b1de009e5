// Medusa's typical acceptance (Cai et al., 2024, §2.3.1; FasterDecoding/Medusa e2a5d20
// utils.py get_typical_posterior_mask / evaluate_posterior, shared notes
// jacobi_grouped_spatial.md §4.3): lossy. A candidate x is accepted iff
//   p(x) > min(ε, α exp(-H(p))),   H(p) = -Σ_y p(y) log(p(y) + 1e-5)
// (the code's 1e-5 inside the log), deterministically (f is 0 or 1). Medusa has no residual: after
// a rejection the next token is drawn from the unmodified p.
#include <algorithm>
#include <cmath>

#include "speculative/rules/rules.h"

namespace tessera::speculative {
namespace {

class TypicalRule final : public AcceptanceRule {
 public:
  TypicalRule(float eps, float alpha) : eps_(eps), alpha_(alpha) {}
  std::string name() const override { return "typical"; }

  double accept_probability(const NodeView& n) const override {
    return static_cast<double>(n.p[n.token]) > typical_threshold(n.p, eps_, alpha_) ? 1.0 : 0.0;
  }

  // The unmodified p (Medusa resamples from the target itself).
  void residual(const NodeView& n, std::span<float> out) const override {
    std::copy(n.p.begin(), n.p.end(), out.begin());
  }

 private:
  double eps_, alpha_;
};

}  // namespace

double typical_threshold(std::span<const float> p, float eps, float alpha) {
  double h = 0.0;
  for (const float v : p) h -= static_cast<double>(v) * std::log(static_cast<double>(v) + 1e-5);
  return std::min(static_cast<double>(eps), static_cast<double>(alpha) * std::exp(-h));
}

std::unique_ptr<AcceptanceRule> make_typical_rule(float eps, float alpha) {
  return std::make_unique<TypicalRule>(eps, alpha);
}

}  // namespace tessera::speculative
