// Exact speculative sampling (seed 004, Eq. 1-2; Leviathan et al. / Chen et al.): lossless.
#include <algorithm>

#include "spec/rules/rules.h"

namespace tessera::spec {
namespace {

class ExactRule final : public AcceptanceRule {
 public:
  std::string name() const override { return "exact"; }

  double accept_probability(const NodeView& n) const override {
    const double p = n.p[n.token];
    const double q = n.q_of(n.token);
    // A token the drafter could not draw (q = 0) is never proposed by a correct drafter; treat it
    // defensively as accept iff the target can produce it.
    if (q <= 0.0) return p > 0.0 ? 1.0 : 0.0;
    return std::min(1.0, p / q);  // Eq. 1
  }

  void residual(const NodeView& n, std::span<float> out) const override { exact_residual(n, out); }
};

}  // namespace

std::unique_ptr<AcceptanceRule> make_exact_rule() {
  return std::make_unique<ExactRule>();
}

}  // namespace tessera::spec
