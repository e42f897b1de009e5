// Drafts with Medusa's heads (Cai et al., 2024, §2.1; FasterDecoding/Medusa, shared notes
// jacobi_grouped_spatial.md §4): no draft model runs. The heads read the target's hidden state
// (after its final norm) at the row that predicted the round's root: the prefill's last row for the
// first round, then the row of the last accepted node (or the root's row when none was) of each
// verification. Head d - 1 gives the candidates of depth d, d = 1..K.
//
// The tree is a static Medusa choices tree (tree_shape.h) cut at depth K (and at the round's
// depth): a node of depth d and rank r holds the r-th most likely token of head d - 1, whatever its
// parent (Medusa's tree_indices: the same top-k of one head under every parent of that depth,
// §4.2). Tokens are ranked by the head's distribution after the target's CFG (both halves' hidden
// states run through the heads), top-k and top-p (at temperature 1 for greedy decoding), so a token
// the target's sampler cannot draw is never proposed; a rank past the tokens with mass is left out
// with its subtree. The ranking runs where the heads' logits are (distribution_rows, top_rows): a
// round reads back the ranked ids, not the logits, or on the device loop nothing (the tokens stay
// there for the target pass and the walk, and come back with the verdicts). Drafts are
// deterministic (one-hot q, empty DraftNode::q): the exact walk accepts node x with p(x) and
// removes it from p when rejected, which is lossless for any candidates.
#pragma once

#include <string>

#include "models/medusa_heads.h"
#include "sampling/sampler.h"
#include "speculative/drafters/drafter.h"
#include "speculative/drafters/feature_rows.h"
#include "speculative/drafters/head_rows.h"
#include "speculative/tree_shape.h"

namespace tessera::speculative {

// The tree of the medusa methods without --tree: the chain of every head's top-1 token, K deep
// (Medusa's choices [[0], [0, 0], ...]; issue #99's top-1 tree). On a CPU a target forward's cost
// grows with its rows, and a chain verifies causally in K + 1 rows; wider trees (Medusa's 63-node
// ones are sized for GPUs) cost more than they gain there (docs/methods.md, "medusa").
std::string medusa_default_tree(int heads);

class MedusaDrafter : public Drafter {
 public:
  // max_images: images in flight at once.
  MedusaDrafter(const MedusaHeads& heads, const SamplingParams& params, TreeShape shape,
                int max_images);
  std::string name() const override { return "Medusa heads"; }
  // min(L, K, the tree's depth).
  int draft_depth(int draft_len) const override;
  int max_nodes(int draft_len) const override;
  HiddenState hidden_state() const override { return HiddenState::PostNorm; }
  void start(std::span<ImageState* const> images, const TargetPrefill& prefill) override;
  void propose(std::span<ImageState* const> active, std::span<const int> max_depth,
               std::vector<DraftTree>& trees) override;
  void finish_round(ImageState& image, const DraftTree& tree, const VerifyOutcome& outcome,
                    const TargetRound& target) override;
  void release(const ImageState& image) override { features_.erase(image.id); }
  int64_t batched_forwards() const override { return forwards_; }
  // The device loop: the ranked ids stay where they are, the tree is the whole shape with its
  // tokens there (DraftNode::token_row; a rank past the tokens with mass is a missing node, which
  // the walk skips), and nothing comes back before the verdicts.
  void set_device_drafts(bool on) override { device_drafts_ = on; }
  const DeviceDraftRows* device_rows() const override {
    return device_rows_.tokens.data ? &device_rows_ : nullptr;
  }
  DeviceDrafts device_drafts() const override { return device_drafts_counted_; }

 private:
  const MedusaHeads& heads_;
  SamplingParams params_;  // guidance on or off (the images' own settings rank their drafts)
  TreeShape shape_;
  std::vector<int> top_needed_;  // per depth d - 1: 1 + the largest rank of the shape's nodes
  MedusaHeads::Workspace ws_;
  FeatureRows features_;  // the rows the next round's heads read, by image id
  HeadRows ranking_;      // the heads' rows ranked where they are
  std::vector<DeviceSampleParams> settings_;
  std::vector<int> ids_;
  int64_t forwards_ = 0;
  bool device_drafts_ = false;
  DeviceDraftRows device_rows_;  // the last propose()'s, on the device loop
  DeviceDrafts device_drafts_counted_;
};

}  // namespace tessera::speculative
