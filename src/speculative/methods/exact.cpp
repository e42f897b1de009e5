// sd and sjd: lossless speculative sampling, f = min(1, p/q), G = Norm([p - q]+) (COOL-SD, Li et
// al., 2026, Eq. 1-2), with drafts from a draft model (sd) or from the target's Jacobi iteration
// (sjd).
#include "speculative/methods/families.h"
#include "speculative/rules/rules.h"

namespace tessera::speculative {

std::vector<MethodEntry> exact_methods() {
  auto rule = [](const MethodParams&, const TargetModel&) { return make_exact_rule(); };
  MethodEntry sd, sjd;
  sd.info = {
      "sd",
      "Exact speculative decoding with a draft model (Leviathan et al., 2023; COOL-SD Alg. 1)",
      TokenKind::Discrete,
      DraftSource::DraftModel,
      {}};
  sjd.info = {"sjd",
              "Speculative Jacobi decoding: the target drafts for itself (Teng et al. 2025)",
              TokenKind::Discrete,
              DraftSource::Jacobi,
              {}};
  for (MethodEntry* e : {&sd, &sjd}) {
    e->make_rule = rule;
    e->exact = true;
  }
  return {sd, sjd};
}

}  // namespace tessera::speculative
