// Every speculative method by name: its public description (tessera/methods.h) and its factory.
// The methods live in methods/, one file per method or per family sharing a rule; make_method
// (method.h) does what all methods share (drafts, draft length, resampling).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "speculative/continuous/cspd_loop.h"
#include "speculative/hawk_options.h"
#include "speculative/rules/acceptance_rule.h"
#include "tensor/backend.h"
#include "tessera/config.h"
#include "tessera/methods.h"

namespace tessera::speculative {

// The target model a discrete method's rule is built for.
struct TargetModel {
  const std::string& dir;  // its directory (LANTERN's codebook, GSD's embeddings)
  const GptConfig& config;
  Backend& backend;  // the target's backend
};

struct MethodEntry {
  MethodInfo info;
  // Discrete methods with drafts: reads and validates the parameters, builds the acceptance rule.
  std::function<std::unique_ptr<AcceptanceRule>(const MethodParams&, const TargetModel&)> make_rule;
  bool exact = false;               // lossless rule: G* is its own residual, "optimal" is refused
  bool optimal_by_default = false;  // the method is defined with G* (COOL-SD, UniformRSD)
  // Methods drafted by Hawk's heads: reads and validates their counts.
  std::function<HawkOptions(const MethodParams&)> make_hawk;
  // Continuous methods with drafts: reads and validates the parameters (draft_len is generic).
  std::function<CspdSettings(const MethodParams&)> make_cspd;
};

// Every method, in documentation order; the names are unique and a parameter name means the same
// (type and role) in every method that has it.
const std::vector<MethodEntry>& method_registry();
// The entry called `name`, or null.
const MethodEntry* find_method_entry(const std::string& name);
// Throws an Error for a parameter name no registered method has.
void check_param_names(const MethodParams& params);

}  // namespace tessera::speculative
