// What the speculative loop and the drafters share: the draft tree and the random streams
// (speculative/streams.h). A draft is a tree of candidate tokens hanging off the root (the last
// committed token, not yet in the target's KV cache); a chain is a tree with one child per node.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "decode/image_state.h"
#include "sampling/rng.h"
#include "speculative/streams.h"
#include "tensor/tensor.h"
#include "tessera/error.h"
#include "tessera/tessera.h"

namespace tessera::speculative {

// A device loop's drafted token not yet on the host (Drafter::set_device_drafts).
inline constexpr int32_t kTokenOnDevice = -1;
// A device loop's tree node that got no token: a static tree's child past the tokens with mass
// (the host loop's tree leaves it out), or a node below one. Never accepted; its row in the
// target's forward is padding. BackendVerifier::complete marks them.
inline constexpr int32_t kTokenMissing = -2;

// A device loop's drafts on the drafter model's backend: q [n, V], each row's distribution, and
// tokens I32 [t + 1], the drawn tokens (-1: none, kTokenMissing on the host), then the draws'
// error flag (non-zero: a non-finite logit). A node drawn there names its rows (DraftNode::q_row,
// token_row). inputs (optional, I32 [t]): the tokens as a forward takes them (0 for -1), which the
// target pass reads; without it, tokens.
struct DeviceDraftRows {
  Tensor q, tokens, inputs;
};

struct DraftNode {
  int32_t token = 0;     // kTokenOnDevice: drawn on the backend, at row token_row of its tokens
  int parent = -1;       // index into the tree; -1 = the root
  int depth = 1;         // 1 = a child of the root
  std::vector<float> q;  // distribution the token was drawn from; empty = one-hot at token
  // The device loop: q's row in the drafter's Drafter::device_rows() instead (q is then empty),
  // and with kTokenOnDevice the token's row there (a chain's: q_row; a greedy tree's later
  // children have a token row and no q row, their q one-hot).
  int q_row = -1;
  int token_row = -1;
  // Siblings drawn i.i.d. from q (with replacement): the walk tests this node against its own q
  // (SpecInfer's multi-step speculative sampling). false: drawn without replacement after its
  // earlier siblings, and the walk removes their tokens from q (recursive rejection sampling).
  bool with_replacement = false;
  // A dynamic tree's node (EAGLE-2): its value, the product of the draft confidences along its
  // path (0 elsewhere); --draft-len auto's node budget reads it.
  double value = 0.0;
  // Hawk: the depth d of the vertical head whose cached proposal this is (made d rows up); 0 for
  // every other proposal. The statistics and the heatmap show where vertical proposals won.
  int vertical = 0;
};
// Nodes in topological order (parents first); siblings in the order they are to be verified.
using DraftTree = std::vector<DraftNode>;

bool is_chain(const DraftTree& tree);
// The tree's depth (0 when empty); throws unless every node's parent comes before it and its depth
// is its parent's plus one.
int tree_depth(const DraftTree& tree);
// The nodes a tree drafted, and their depth: all but the kTokenMissing ones (a device loop's
// static tree after BackendVerifier::complete; the host loop's tree lacks them).
int drafted_nodes(const DraftTree& tree);
int drafted_depth(const DraftTree& tree);

// The per-image state a drafter and the verification walk see (decode/image_state.h).
using tessera::ImageState;

// A drafter's images sample with their own settings (ImageState::sampling), shaped as its own.
inline void check_images_sampling(std::span<ImageState* const> images, const SamplingParams& p) {
  for (const ImageState* im : images)
    check(im->sampling.same_shape(p),
          "internal: an image's guidance or greediness differs from its drafter's");
}

}  // namespace tessera::speculative
