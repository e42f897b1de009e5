// Turns SpeculativeOptions (the CLI's --method and its flags) into a rule, its resampling
// distribution and a drafter kind, validating every parameter with a message naming the flag.
#pragma once

#include <memory>
#include <string>

#include "speculative/rules/acceptance_rule.h"
#include "tessera/tessera.h"

namespace tessera::speculative {

struct Method {
  std::string name;
  std::unique_ptr<AcceptanceRule> rule;
  bool draft_model = false;  // false: Jacobi drafts
  int draft_len = 0;         // resolved --draft-len
  bool optimal_resampling = false;
};

// Every method name --method accepts, in documentation order.
const std::vector<std::string>& method_names();

// target_dir: the target model directory (LANTERN's codebook, GSD's embeddings).
Method make_method(const SpeculativeOptions& o, const std::string& target_dir,
                   const GptConfig& target);

}  // namespace tessera::speculative
