// The acceptance rules the device loop's walk applies (speculative/verify_rows.h), as plain
// data: a ratio rule (ratio_rule.h) or LANTERN over its neighbour table (lantern_math.h). A rule
// gives its descriptor through AcceptanceRule::walk_rule(); rules without one (GSD's grouping,
// Medusa's typical acceptance, any rule under G* but the ratio rules) verify on the host.
#pragma once

#include <cstdint>
#include <memory>

#include "speculative/latent_neighbours.h"
#include "speculative/rules/lantern_math.h"
#include "speculative/rules/ratio_rule.h"

namespace tessera::speculative {

struct WalkRule {
  enum class Kind : int32_t { Ratio, Lantern };
  Kind kind = Kind::Ratio;
  RatioRule ratio;
  LanternRuleData lantern;  // its table points at the host's rows until the verifier uploads them
};

// A rule's descriptor and the table its pointer refers to (kept alive, and uploaded once, by the
// device loop).
struct WalkRuleSource {
  WalkRule rule;
  std::shared_ptr<const LatentNeighbours> table;
};

}  // namespace tessera::speculative
