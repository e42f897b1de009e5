// The draft-and-verify loop shared by every speculative method (docs/methods.md). Per round and
// image: the drafter proposes a draft below the last committed token (the root); one batched
// target forward over [root, draft...] (both CFG halves) gives the target distribution at every
// node; verify_draft walks the draft with the method's rule; the target KV cache is cut back to
// the accepted prefix. Images keep their own lengths; a result depends only on (models,
// settings, seed, image index), not on the batch it was generated in.
#pragma once

#include <functional>
#include <vector>

#include "models/llamagen.h"
#include "sampling/sampler.h"
#include "speculative/drafters/drafter.h"
#include "speculative/rules/acceptance_rule.h"

namespace tessera::speculative {

struct LoopSettings {
  const AcceptanceRule* rule = nullptr;
  Drafter* drafter = nullptr;
  int draft_len = 5;   // --draft-len (the drafter turns it into a depth)
  int max_rounds = 0;  // > 0: afterwards the target finishes the image alone
};

std::vector<std::vector<int32_t>> generate_speculative(
    const LlamaGen& target, const std::vector<const Condition*>& conds,
    const std::vector<uint64_t>& image_indices, const SamplingParams& params, uint64_t seed,
    const LoopSettings& loop, const std::function<void(int64_t)>& on_tokens, GenerateStats& stats);

}  // namespace tessera::speculative
