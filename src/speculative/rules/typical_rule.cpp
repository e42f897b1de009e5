// Medusa's typical acceptance (Cai et al., 2024, §2.3.1; FasterDecoding/Medusa e2a5d20
// utils.py get_typical_posterior_mask / evaluate_posterior, shared notes
// jacobi_grouped_spatial.md §4.3): lossy. A candidate x is accepted iff
//   p(x) > min(ε, α exp(-H(p))),   H(p) = -Σ_y p(y) log(p(y) + 1e-5)
// (the code's 1e-5 inside the log), deterministically (f is 0 or 1). Medusa has no residual: after
// a rejection the next token is drawn from the unmodified p.
#include <algorithm>
#include <cmath>

#include "speculative/rules/rules.h"
#include "speculative/rules/typical_math.h"

namespace tessera::speculative {
namespace {

class TypicalRule final : public AcceptanceRule {
 public:
  TypicalRule(float eps, float alpha) : eps_(eps), alpha_(alpha) {}
  std::string name() const override { return "typical"; }

  double accept_probability(const NodeView& n) const override {
    return typical_accept_probability({eps_, alpha_}, n.p.data(), n.token,
                                      static_cast<int>(n.p.size()));
  }

  // The device walk: the same test, p itself as the resampling distribution.
  std::optional<WalkRuleSource> walk_rule() const override {
    WalkRuleSource s;
    s.rule.kind = WalkRule::Kind::Typical;
    s.rule.typical = {eps_, alpha_};
    return s;
  }

  // The unmodified p (Medusa resamples from the target itself).
  void residual(const NodeView& n, std::span<float> out) const override {
    std::copy(n.p.begin(), n.p.end(), out.begin());
  }

 private:
  float eps_, alpha_;
};

}  // namespace

double typical_threshold(std::span<const float> p, float eps, float alpha) {
  return typical_threshold_row(p.data(), static_cast<int>(p.size()), eps, alpha);
}

std::unique_ptr<AcceptanceRule> make_typical_rule(float eps, float alpha) {
  return std::make_unique<TypicalRule>(eps, alpha);
}

}  // namespace tessera::speculative
