// A drafter proposes, for every image, a draft tree below its last committed token and the
// distribution each draft token was drawn from (q). It learns the outcome of every round.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "speculative/draft.h"
#include "speculative/verify.h"

namespace tessera::speculative {

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;
  // Draft depth per round for --draft-len L.
  virtual int draft_depth(int draft_len) const = 0;
  // Once per batch, after the target's prefill drew every image's first token.
  virtual void start(const std::vector<const Condition*>& conds,
                     std::vector<ImageState>& images) = 0;
  // Writes a tree of depth <= max_depth[j] for each image active[j] (max_depth 0: empty tree).
  virtual void propose(std::span<ImageState* const> active, std::span<const int> max_depth,
                       std::vector<DraftTree>& trees) = 0;
  // After verification: `outcome` of `tree`; `dist(r)` is the target distribution of verified row r
  // (row 0: the root's next token; row j + 1: the token after node j). image.tokens already holds
  // the tokens committed this round.
  virtual void finish_round(ImageState& image, const DraftTree& tree, const VerifyOutcome& outcome,
                            const std::function<std::span<const float>(int)>& dist) = 0;
  virtual int64_t batched_forwards() const { return 0; }
};

}  // namespace tessera::speculative
