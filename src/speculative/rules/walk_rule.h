// The acceptance rules the device loop's walk applies (speculative/verify_rows.h), as plain
// data: a ratio rule (ratio_rule.h), LANTERN over its neighbour table (lantern_math.h) or GSD's
// grouping over its embedding (gsd_math.h) or Medusa's typical acceptance (typical_math.h), each
// with its own residual or G*. A rule gives its descriptor through AcceptanceRule::walk_rule();
// a rule without one verifies on the host.
#pragma once

#include <cstdint>
#include <memory>

#include <vector>

#include "speculative/latent_neighbours.h"
#include "speculative/rules/gsd_math.h"
#include "speculative/rules/lantern_math.h"
#include "speculative/rules/ratio_rule.h"
#include "speculative/rules/typical_math.h"

namespace tessera::speculative {

struct WalkRule {
  enum class Kind : int32_t { Ratio, Lantern, Gsd, Typical };
  Kind kind = Kind::Ratio;
  RatioRule ratio;  // Ratio's rule; for Gsd the exact rule, whose residual GSD resamples from
  LanternRuleData lantern;  // its table points at the host's rows until the verifier uploads them
  GsdRuleData gsd;          // its embedding likewise
  TypicalRuleData typical;  // Medusa's typical acceptance (resamples from p itself)
  // LANTERN, GSD and typical acceptance: resample from G* = [p - q f]+ (COOL-SD Eq. 5) instead
  // of their own residual (a ratio rule carries this in `ratio`).
  int32_t optimal = 0;
};

// A rule's descriptor and the table or embedding its pointer refers to (kept alive, and uploaded
// once, by the device loop).
struct WalkRuleSource {
  WalkRule rule;
  std::shared_ptr<const LatentNeighbours> table;
  std::shared_ptr<const std::vector<float>> embedding;
};

}  // namespace tessera::speculative
