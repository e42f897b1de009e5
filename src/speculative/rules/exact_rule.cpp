// Exact speculative sampling (Leviathan et al., 2023; Chen et al., 2023; restated in COOL-SD
// (Li et al., 2026) §3.1, Eq. 1-2): lossless.
#include <algorithm>

#include "speculative/rules/rules.h"

namespace tessera::speculative {
namespace {

class ExactRule final : public AcceptanceRule {
 public:
  std::string name() const override { return "exact"; }

  double accept_probability(const NodeView& n) const override {
    return ratio_accept(n.p[n.token], n.q_of(n.token));  // Eq. 1
  }

  void residual(const NodeView& n, std::span<float> out) const override { exact_residual(n, out); }
};

}  // namespace

std::unique_ptr<AcceptanceRule> make_exact_rule() {
  return std::make_unique<ExactRule>();
}

}  // namespace tessera::speculative
