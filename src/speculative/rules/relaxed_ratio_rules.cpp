// Relaxed ratio rules: UniformRSD and COOL-SD (COOL-SD (Li et al., 2026) §3.2, Eq. 7 and 10), the
// naive lossy baselines amplify and addition (GSD (So et al., 2025) §5), and the G* resampling
// decorator (COOL-SD Eq. 5).
#include <algorithm>
#include <cmath>
#include <optional>

#include "speculative/rules/rules.h"
#include "tessera/error.h"

namespace tessera::speculative {
namespace {

// A ratio rule (ratio_rule.h): f = min(1, ω_i p / q) or min(1, (p + ε)/q), resampled from [p - q]+
// or G*; its descriptor is what it computes with.
class RatioRuleImpl final : public AcceptanceRule {
 public:
  RatioRuleImpl(std::string name, const RatioRule& rule) : name_(std::move(name)), rule_(rule) {}
  std::string name() const override { return name_; }
  double accept_probability(const NodeView& n) const override {
    return ratio_accept_probability(rule_, ratio_omega(rule_, n.position, n.draft_len),
                                    n.p[n.token], static_cast<float>(n.q_of(n.token)));
  }
  void residual(const NodeView& n, std::span<float> out) const override {
    ratio_residual(rule_, n, out);
  }
  std::optional<RatioRule> ratio() const override { return rule_; }

 private:
  std::string name_;
  RatioRule rule_;
};

// Same acceptance, G* = Norm([p - q f]+) as the resampling distribution (COOL-SD Eq. 5), for a rule
// that is not a ratio rule (a ratio rule carries G* in its descriptor).
class OptimalResampling final : public AcceptanceRule {
 public:
  explicit OptimalResampling(std::unique_ptr<AcceptanceRule> inner) : inner_(std::move(inner)) {
    check(inner_ != nullptr, "with_optimal_resampling: no rule");
  }
  std::string name() const override { return inner_->name() + "+G*"; }
  double accept_probability(const NodeView& n) const override {
    return inner_->accept_probability(n);
  }
  void residual(const NodeView& n, std::span<float> out) const override { inner_->g_star(n, out); }
  bool greedy_accept(const NodeView& n) const override { return inner_->greedy_accept(n); }
  bool greedy_filtered() const override { return inner_->greedy_filtered(); }
  // The device walk's G* (verify_rows.h, optimal_residual_row) for LANTERN, GSD and typical
  // acceptance: an O(k), O(G) (the row ranked once) or O(1) f per token.
  std::optional<WalkRuleSource> walk_rule() const override {
    std::optional<WalkRuleSource> s = inner_->walk_rule();
    if (!s || s->rule.kind == WalkRule::Kind::Ratio) return std::nullopt;
    s->rule.optimal = 1;
    return s;
  }

 private:
  std::unique_ptr<AcceptanceRule> inner_;
};

}  // namespace

std::unique_ptr<AcceptanceRule> make_ratio_rule(std::string name, const RatioRule& rule) {
  return std::make_unique<RatioRuleImpl>(std::move(name), rule);
}

std::unique_ptr<AcceptanceRule> make_uniform_rsd_rule(float delta) {
  return make_ratio_rule("uniform-rsd", {.scale = delta});
}

std::unique_ptr<AcceptanceRule> make_cool_sd_rule(float delta, float nu) {
  return make_ratio_rule("cool-sd", {.scale = delta, .annealed = true, .nu = nu});
}

std::unique_ptr<AcceptanceRule> make_amplify_rule(float k) {
  return make_ratio_rule("amplify", {.scale = k});
}

std::unique_ptr<AcceptanceRule> make_addition_rule(float eps) {
  return make_ratio_rule("addition", {.kind = RatioRule::Kind::Add, .eps = eps});
}

std::unique_ptr<AcceptanceRule> with_optimal_resampling(std::unique_ptr<AcceptanceRule> rule) {
  check(rule != nullptr, "with_optimal_resampling: no rule");
  if (std::optional<RatioRule> r = rule->ratio()) {
    r->optimal = true;
    return make_ratio_rule(rule->name() + "+G*", *r);
  }
  return std::make_unique<OptimalResampling>(std::move(rule));
}

}  // namespace tessera::speculative
