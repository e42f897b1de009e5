// Exact speculative sampling (Leviathan et al., 2023; Chen et al., 2023; restated in COOL-SD
// (Li et al., 2026) §3.1, Eq. 1-2): lossless.
#include "speculative/rules/rules.h"

namespace tessera::speculative {

std::unique_ptr<AcceptanceRule> make_exact_rule() {
  // f = min(1, p/q) (Eq. 1), G = Norm([p - q]+) (Eq. 2): the ratio rule with ω = 1.
  return make_ratio_rule("exact", RatioRule{});
}

}  // namespace tessera::speculative
