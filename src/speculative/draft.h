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

// A device loop's drafts on the drafter model's backend: q [n, V], each row's distribution, and
// tokens I32 [n + 1], each row's drawn token, then the draws' error flag (non-zero: a non-finite
// logit). A node drawn there names its row (DraftNode::q_row) in both.
struct DeviceDraftRows {
  Tensor q, tokens;
};

struct DraftNode {
  int32_t token = 0;     // kTokenOnDevice: drawn on the backend, at row q_row of its tokens
  int parent = -1;       // index into the tree; -1 = the root
  int depth = 1;         // 1 = a child of the root
  std::vector<float> q;  // distribution the token was drawn from; empty = one-hot at token
  // The device loop: q's row in the drafter's Drafter::device_rows() instead (q is then empty).
  int q_row = -1;
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

// The per-image state a drafter and the verification walk see (decode/image_state.h).
using tessera::ImageState;

// A drafter's images sample with their own settings (ImageState::sampling), shaped as its own.
inline void check_images_sampling(std::span<ImageState* const> images, const SamplingParams& p) {
  for (const ImageState* im : images)
    check(im->sampling.same_shape(p),
          "internal: an image's guidance or greediness differs from its drafter's");
}

}  // namespace tessera::speculative
