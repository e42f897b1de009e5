// medusa and medusa-typical: drafts of Medusa's heads (Cai et al., 2024; models/medusa_heads.h,
// drafters/medusa_drafter.h) on a static tree, verified in one target forward.
//   medusa:          exact verification, f = min(1, p/q) with one-hot q = p(x), residual p without
//                    x: lossless (the rule of sd and eagle).
//   medusa-typical:  Medusa's typical acceptance (§2.3.1), rules/typical_rule.cpp: lossy.
#include "speculative/method_params.h"
#include "speculative/methods/families.h"
#include "speculative/rules/rules.h"

namespace tessera::speculative {

namespace {

struct TypicalOptions {
  // FasterDecoding/Medusa medusa_generate's defaults (posterior_threshold, posterior_alpha).
  float eps = 0.09f;
  float alpha = 0.3f;
};

}  // namespace

std::vector<MethodEntry> medusa_methods() {
  MethodEntry exact;
  exact.info = {"medusa",
                "Exact speculative decoding of a tree of Medusa heads' candidates (Cai et al., "
                "2024)",
                TokenKind::Discrete,
                DraftSource::DraftModel,
                {}};
  exact.make_rule = [](const MethodParams&, const TargetModel&) { return make_exact_rule(); };
  exact.exact = true;

  using O = TypicalOptions;
  const std::vector<ParamSpec<O>> specs = {
      ParamSpec<O>("typical.eps", &O::eps,
                   "Typical acceptance's hard threshold ε (Medusa's posterior_threshold)")
          .in(Range::closed(0, 1))
          .tune({0.03, 0.09, 0.3}),
      ParamSpec<O>("typical.alpha", &O::alpha,
                   "Typical acceptance's entropy factor α (Medusa's posterior_alpha)")
          .in(Range::closed(0, 1))
          .tune({0.1, 0.3, 0.6})};
  MethodEntry typical;
  typical.info = {"medusa-typical",
                  "Medusa heads with Medusa's typical acceptance p(x) > min(ε, α exp(-H(p))) "
                  "(Cai et al., 2024, §2.3.1; lossy)",
                  TokenKind::Discrete, DraftSource::DraftModel, describe(specs, O{})};
  typical.make_rule = [specs](const MethodParams& given, const TargetModel&) {
    const O o = read_params(specs, given, O{});
    return make_typical_rule(o.eps, o.alpha);
  };
  for (MethodEntry* e : {&exact, &typical}) e->info.drafter = "medusa";
  return {exact, typical};
}

}  // namespace tessera::speculative
