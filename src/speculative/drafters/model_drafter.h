// Drafts with a smaller autoregressive model over the same vocabulary (classic speculative
// decoding, Leviathan et al. 2023 / Chen et al. 2023; COOL-SD Alg. 1 line 2): a chain of L tokens,
// each drawn from the draft model's distribution after the same CFG, temperature, top-k and top-p
// as the target's. The draft model runs both CFG halves like the target, in its own session.
//
// With a TreeShape (speculative/tree_shape.h) it drafts a static tree instead, as EAGLE-1's
// topK_genrate_v1 does: one draft forward per depth over all nodes of that depth (tree attention
// mask, positions by depth), each node's children being the shape's ranks of the draft
// distribution at that node (see propose_tree). The draft KV then keeps the accepted path
// (finish_round compacts it). Without a shape, or with a chain shape, the drafts are the chain's.
#pragma once

#include <map>
#include <memory>
#include <optional>

#include "decode/session.h"
#include "sampling/sampler.h"
#include "speculative/drafters/drafter.h"
#include "speculative/tree_shape.h"

namespace tessera::speculative {

class ModelDrafter : public Drafter {
 public:
  // max_images: images in flight at once (the session's slots). shape: draft this static tree
  // (cut at the round's depth) instead of a chain.
  ModelDrafter(const AutoregressiveModel& model, const SamplingParams& params, int max_depth,
               int max_images, std::optional<TreeShape> shape = std::nullopt);
  std::string name() const override { return "draft model"; }
  int draft_depth(int draft_len) const override { return draft_len; }
  // With a shape: its nodes down to the round's depth (the target's session is sized by this).
  int max_nodes(int draft_len) const override;
  void start(std::span<ImageState* const> images) override;
  void propose(std::span<ImageState* const> active, std::span<const int> max_depth,
               std::vector<DraftTree>& trees) override;
  void finish_round(ImageState& image, const DraftTree& tree, const VerifyOutcome& outcome,
                    const TargetRound& target) override;
  void release(const ImageState& image) override;
  int64_t batched_forwards() const override { return session_.forwards(); }

 private:
  struct Slots {
    int cond = -1, uncond = -1;
    // Tree drafting: the cache length before the round's tree rows, and the cache position of
    // each node of the last DraftTree (-1: not fed, a leaf).
    int tree_base = -1;
    std::vector<int> fed_at;
  };
  void propose_tree(std::span<ImageState* const> active, std::span<const int> max_depth,
                    std::vector<DraftTree>& trees);
  void catch_up(std::span<ImageState* const> active, const std::vector<int>& who, StepBatch& b);
  const AutoregressiveModel& model_;
  SamplingParams params_;
  Session session_;
  std::map<int, Slots> slots_;  // by image id
  std::vector<float> logits_;
  std::optional<TreeShape> shape_;
  std::vector<std::vector<int>> children_;  // shape node -> its children (index nodes: the root)
};

}  // namespace tessera::speculative
