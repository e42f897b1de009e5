// The acceptance rules the device loop's chain walk applies (speculative/verify_chain.h), as plain
// data: a ratio rule (ratio_rule.h) or LANTERN over its neighbour table (lantern_math.h). A rule
// gives its descriptor through AcceptanceRule::chain_rule(); rules without one (GSD's grouping,
// Medusa's typical acceptance, any rule under G* but the ratio rules) verify on the host.
#pragma once

#include <cstdint>
#include <memory>

#include "speculative/latent_neighbours.h"
#include "speculative/rules/lantern_math.h"
#include "speculative/rules/ratio_rule.h"

namespace tessera::speculative {

struct ChainRule {
  enum class Kind : int32_t { Ratio, Lantern };
  Kind kind = Kind::Ratio;
  RatioRule ratio;
  LanternRuleData lantern;  // its table points at the host's rows until the verifier uploads them
};

// A rule's descriptor and the table its pointer refers to (kept alive, and uploaded once, by the
// device loop).
struct ChainRuleSource {
  ChainRule rule;
  std::shared_ptr<const LatentNeighbours> table;
};

}  // namespace tessera::speculative
