#include "speculative/drafters/jacobi_drafter.h"

#include <algorithm>

namespace tessera::speculative {

JacobiDrafter::JacobiDrafter(int vocab_size, const SamplingParams& params)
    : V_(vocab_size), params_(params) {}

void JacobiDrafter::propose(std::span<ImageState* const> active, std::span<const int> max_depth,
                            std::vector<DraftTree>& trees) {
  trees.assign(active.size(), {});
  for (size_t j = 0; j < active.size(); ++j) {
    ImageState& im = *active[j];
    std::vector<Carried>& kept = carried_[im.id];
    const int base = static_cast<int>(im.tokens.size());  // token index of depth 1
    for (int d = 1; d <= max_depth[j]; ++d) {
      DraftNode node;
      node.parent = d - 2;
      node.depth = d;
      if (d <= static_cast<int>(kept.size())) {
        node.token = kept[d - 1].token;
        node.q = std::move(kept[d - 1].q);
      } else {  // a fresh position: uniform over the vocabulary, one-hot q (SJD 'random' init)
        const double u = im.rng.uniform(base + d - 1, stream_id(Stream::JacobiInit, im.round));
        node.token = std::min(static_cast<int>(u * V_), V_ - 1);
      }
      trees[j].push_back(std::move(node));
    }
    kept.clear();
  }
}

void JacobiDrafter::finish_round(ImageState& image, const DraftTree& tree,
                                 const VerifyOutcome& outcome, const TargetRound& target) {
  std::vector<Carried>& kept = carried_[image.id];
  kept.clear();
  if (!outcome.rejected) return;  // every draft accepted: the next window starts fresh
  // Rejected at depth d = accepted + 1. The later rows d .. |tree| hold the target's
  // distributions for the positions after the resampled token (conditioned on the rejected
  // draft, as SJD does); their samples become the next window's drafts.
  const int d = static_cast<int>(outcome.accepted.size()) + 1;
  const int first_token = static_cast<int>(image.tokens.size());  // index of row d's token
  for (int r = d; r <= static_cast<int>(tree.size()); ++r) {
    std::span<const float> p = target.dist(r);
    Carried c;
    const int t = first_token + (r - d);
    c.token =
        params_.temperature <= 0.0f
            ? argmax(p)
            : sample_index(p, image.rng.uniform(t, stream_id(Stream::JacobiCarry, image.round)));
    c.q.assign(p.begin(), p.end());
    kept.push_back(std::move(c));
  }
}

}  // namespace tessera::speculative
