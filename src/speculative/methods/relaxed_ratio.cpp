// uniform-rsd, cool-sd (COOL-SD, Li et al., 2026) and the naive baselines amplify and addition (GSD
// §5): the relaxed ratio rules of rules/relaxed_ratio_rules.cpp, f = min(1, ω p/q) or min(1, (p +
// ε)/q).
#include "speculative/method_params.h"
#include "speculative/methods/families.h"
#include "speculative/rules/rules.h"

namespace tessera::speculative {

namespace {

struct RsdOptions {
  float delta = 1.1f;
};
struct CoolOptions {
  float delta = 1.1f;
  float nu = -1.0f;  // < 0: cool_sd_default_nu(L), per round (docs/methods.md)
};
struct AmplifyOptions {
  float k = 2.0f;
};
struct AdditionOptions {
  float eps = 0.1f;
};

// An entry whose rule is built from its own options struct O.
template <class O, class Make>
MethodEntry entry(std::string name, std::string summary, std::vector<ParamSpec<O>> specs,
                  Make make) {
  MethodEntry e;
  e.info = {std::move(name), std::move(summary), TokenKind::Discrete, DraftSource::ModelOrJacobi,
            describe(specs, O{})};
  e.make_rule = [specs, make](const MethodParams& given, const TargetModel&) {
    return make(read_params(specs, given, O{}));
  };
  return e;
}

}  // namespace

std::vector<MethodEntry> relaxed_ratio_methods() {
  MethodEntry rsd = entry<RsdOptions>(
      "uniform-rsd",
      "Relaxed SD with a uniform relaxation ω_i = δ (COOL-SD, Li et al., 2026, Eq. 7)",
      {ParamSpec<RsdOptions>("rsd.delta", &RsdOptions::delta, "UniformRSD relaxation ω = δ")
           .in(Range::above(0))
           .tune({1.05, 1.2, 1.5, 2})},
      [](const RsdOptions& o) { return make_uniform_rsd_rule(o.delta); });
  MethodEntry cool = entry<CoolOptions>(
      "cool-sd",
      "COOL-SD: relaxation ω_i = δ exp(-ν i - μ) decaying with draft depth (COOL-SD §3.2)",
      {ParamSpec<CoolOptions>("cool.delta", &CoolOptions::delta, "COOL-SD relaxation budget δ")
           .in(Range::above(0))
           .tune({1.05, 1.2, 1.5, 2}),
       ParamSpec<CoolOptions>("cool.nu", &CoolOptions::nu, "COOL-SD decay ν")
           .in(Range::at_least(0))
           .tune({0.35, 0.7, 1.4})
           .default_shown_as("2.8 / (L - 1) (0.7 at L = 5)")},
      [](const CoolOptions& o) { return make_cool_sd_rule(o.delta, o.nu); });
  // Both are defined with G* (COOL-SD, Li et al., 2026, Alg. 1 line 12).
  rsd.optimal_by_default = cool.optimal_by_default = true;
  MethodEntry amplify = entry<AmplifyOptions>(
      "amplify", "Naive lossy baseline f = min(1, k p/q) (GSD §5)",
      {ParamSpec<AmplifyOptions>("amplify.k", &AmplifyOptions::k, "Amplify factor k")
           .in(Range::at_least(1))
           .tune({1.25, 1.5, 2, 3})},
      [](const AmplifyOptions& o) { return make_amplify_rule(o.k); });
  MethodEntry addition = entry<AdditionOptions>(
      "addition", "Naive lossy baseline f = min(1, (p + ε)/q) (GSD §5)",
      {ParamSpec<AdditionOptions>("addition.eps", &AdditionOptions::eps, "Addition ε")
           .in(Range::at_least(0))
           .tune({0.01, 0.03, 0.1})},
      [](const AdditionOptions& o) { return make_addition_rule(o.eps); });
  return {rsd, cool, amplify, addition};
}

}  // namespace tessera::speculative
