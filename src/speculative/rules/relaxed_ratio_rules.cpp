// Relaxed ratio rules: UniformRSD and COOL-SD (COOL-SD (Li et al., 2026) §3.2, Eq. 7 and 10), the
// naive lossy baselines amplify and addition (GSD (So et al., 2025) §5), and the G* resampling
// decorator (COOL-SD Eq. 5).
#include <algorithm>
#include <cmath>
#include <functional>

#include "speculative/rules/rules.h"
#include "tessera/error.h"

namespace tessera::speculative {
namespace {

// f = min(1, ω_i p / q) (COOL-SD Eq. 7) with a per-position ω_i.
class OmegaRule final : public AcceptanceRule {
 public:
  OmegaRule(std::string name, std::function<double(const NodeView&)> omega)
      : name_(std::move(name)), omega_(std::move(omega)) {}
  std::string name() const override { return name_; }
  double accept_probability(const NodeView& n) const override {
    return ratio_accept(omega_(n) * static_cast<double>(n.p[n.token]), n.q_of(n.token));
  }
  void residual(const NodeView& n, std::span<float> out) const override { exact_residual(n, out); }

 private:
  std::string name_;
  std::function<double(const NodeView&)> omega_;
};

// f = min(1, (p + ε)/q) (GSD §5 "Addition").
class AdditionRule final : public AcceptanceRule {
 public:
  explicit AdditionRule(float eps) : eps_(eps) {}
  std::string name() const override { return "addition"; }
  double accept_probability(const NodeView& n) const override {
    return ratio_accept(static_cast<double>(n.p[n.token]) + eps_, n.q_of(n.token));
  }
  void residual(const NodeView& n, std::span<float> out) const override { exact_residual(n, out); }

 private:
  double eps_;
};

// Same acceptance, G* = Norm([p - q f]+) as the resampling distribution (COOL-SD Eq. 5).
class OptimalResampling final : public AcceptanceRule {
 public:
  explicit OptimalResampling(std::unique_ptr<AcceptanceRule> inner) : inner_(std::move(inner)) {
    check(inner_ != nullptr, "with_optimal_resampling: no rule");
  }
  std::string name() const override { return inner_->name() + "+G*"; }
  double accept_probability(const NodeView& n) const override {
    return inner_->accept_probability(n);
  }
  void residual(const NodeView& n, std::span<float> out) const override {
    optimal_residual(*inner_, n, out);
  }
  bool greedy_accept(const NodeView& n) const override { return inner_->greedy_accept(n); }
  bool greedy_filtered() const override { return inner_->greedy_filtered(); }

 private:
  std::unique_ptr<AcceptanceRule> inner_;
};

}  // namespace

double cool_sd_default_nu(int L) {
  // COOL-SD §5 uses ν = 0.7 with EAGLE drafts of depth L = 5, where ω_1/ω_L = exp(0.7 x 4) ≈ 16.4.
  // Keeping that first-to-last ratio for any L gives ν = 2.8 / (L - 1); a Jacobi window of 16 would
  // otherwise take ω_1/ω_L = exp(0.7 x 15) ≈ 36000, nearly all relaxation on the first draft.
  return L > 1 ? 2.8 / (L - 1) : 0.7;
}

double cool_sd_omega(float delta, float nu, int i, int L) {
  // ω_i = δ exp(-ν i - μ) with exp(μ) = (1/L) Σ_{j=1..L} exp(-ν j), so that Σ_i exp(-ν i - μ) = L
  // (COOL-SD Eq. 10): the ω_i average to δ and decay with depth (annealing, Prop. 2).
  L = std::max(1, L);
  i = std::clamp(i, 1, L);
  const double v = nu < 0.0f ? cool_sd_default_nu(L) : static_cast<double>(nu);
  double mean = 0.0;
  for (int j = 1; j <= L; ++j) mean += std::exp(-v * j);
  mean /= L;
  return static_cast<double>(delta) * std::exp(-v * i) / mean;
}

std::unique_ptr<AcceptanceRule> make_uniform_rsd_rule(float delta) {
  const double w = delta;
  return std::make_unique<OmegaRule>("uniform-rsd", [w](const NodeView&) { return w; });
}

std::unique_ptr<AcceptanceRule> make_cool_sd_rule(float delta, float nu) {
  return std::make_unique<OmegaRule>("cool-sd", [delta, nu](const NodeView& n) {
    return cool_sd_omega(delta, nu, n.position, n.draft_len);
  });
}

std::unique_ptr<AcceptanceRule> make_amplify_rule(float k) {
  const double w = k;
  return std::make_unique<OmegaRule>("amplify", [w](const NodeView&) { return w; });
}

std::unique_ptr<AcceptanceRule> make_addition_rule(float eps) {
  return std::make_unique<AdditionRule>(eps);
}

std::unique_ptr<AcceptanceRule> with_optimal_resampling(std::unique_ptr<AcceptanceRule> rule) {
  return std::make_unique<OptimalResampling>(std::move(rule));
}

}  // namespace tessera::speculative
