// sd and sjd: lossless speculative sampling, f = min(1, p/q), G = Norm([p - q]+) (COOL-SD, Li et
// al., 2026, Eq. 1-2), with drafts from a draft model (sd) or from the target's Jacobi iteration
// (sjd).
#include "speculative/methods/families.h"
#include "speculative/rules/rules.h"

namespace tessera::speculative {

std::vector<MethodEntry> exact_methods() {
  auto rule = [](const MethodParams&, const TargetModel&) { return make_exact_rule(); };
  MethodEntry sd, sjd, eagle;
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
  // sd verified against drafts of an EAGLE drafter (models/eagle_drafter.h): EAGLE-1/2 are lossless
  // ("strict speculative sampling", SafeAILab/EAGLE #148, #289).
  eagle.info = {
      "eagle",
      "Exact speculative decoding with an EAGLE drafter on the target's features (Li et al., "
      "2024)",
      TokenKind::Discrete,
      DraftSource::DraftModel,
      {}};
  eagle.info.drafter = "eagle";
  for (MethodEntry* e : {&sd, &sjd, &eagle}) {
    e->make_rule = rule;
    e->exact = true;
  }
  return {sd, sjd, eagle};
}

}  // namespace tessera::speculative
