// The one verification walk shared by every method (COOL-SD (Li et al., 2026) Alg. 1, generalised
// to trees as SpecInfer/EAGLE do): starting at the root, the children of the current node are
// tested in order against the target distribution p with the method's rule; the first accepted
// child becomes the current node. A rejected child turns p into the rule's resampling distribution
// (and removes the child from q, unless the siblings were drawn with replacement:
// DraftNode::with_replacement) before its next sibling is tested. When every child is rejected,
// or the node has no children, the next token is drawn from the current p: the residual after a
// rejection, the target itself (the bonus token) otherwise.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "speculative/draft.h"
#include "speculative/rules/acceptance_rule.h"

namespace tessera::speculative {

struct VerifyOutcome {
  std::vector<int> accepted;  // accepted node indices, root to leaf
  int32_t next_token = 0;     // the resampled or bonus token that ends the round
  bool rejected = false;      // whether the round ended with a rejection
};

struct VerifySettings {
  const AcceptanceRule* rule = nullptr;
  int draft_len = 1;    // L, the round's maximum depth (COOL-SD's schedule)
  bool greedy = false;  // temperature 0: rule.greedy_accept on untempered p; argmax tokens
};

// dist(r): target distribution of row r (0 = root, j + 1 = node j). base_token = index of the
// root's next token in the image (= tokens committed before the round).
VerifyOutcome verify_draft(const VerifySettings& s, const DraftTree& tree,
                           const std::function<std::span<const float>(int)>& dist,
                           const CounterRng& rng, int64_t round, int base_token, ImageStats& stats);

}  // namespace tessera::speculative
