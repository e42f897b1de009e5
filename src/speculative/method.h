// The single entry points from the pipelines into the method registry (method_registry.h): they
// turn SpeculativeOptions / ContinuousSpecOptions into what the loops run, validating every
// parameter with a ParameterError that names it.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "speculative/continuous/cspd_loop.h"
#include "speculative/hawk_options.h"
#include "speculative/rules/acceptance_rule.h"
#include "tensor/backend.h"
#include "tessera/mar.h"
#include "tessera/tessera.h"

namespace tessera::speculative {

// A discrete method resolved for one target: what the speculative loop consumes.
struct Method {
  std::string name;
  std::unique_ptr<AcceptanceRule> rule;  // null for vanilla
  bool draft_model = false;              // false: Jacobi drafts
  int draft_len = 0;                     // resolved draft_len (auto: the longest allowed)
  bool auto_len = false;                 // --draft-len auto: the loop chooses per round
  bool optimal_resampling = false;
  std::optional<HawkOptions> hawk;  // the hawk methods' head counts (kAll unresolved)
};

// The draft length when none is given: tokens after the root with a draft model, else the Jacobi
// window (make_method clamps it to the image).
int default_draft_len(bool draft_model);

// target_dir: the target model directory (LANTERN's codebook, GSD's embeddings); backend: the
// target's, for the work a rule's tables need (GSD normalises its codebook on it).
Method make_method(const SpeculativeOptions& o, const std::string& target_dir,
                   const GptConfig& target, Backend& backend);

// The CSpD settings of a continuous method; nullopt for vanilla.
std::optional<CspdSettings> make_cspd_settings(const ContinuousSpecOptions& o);

}  // namespace tessera::speculative
