#include "speculative/drafters/jacobi_drafter.h"

#include <algorithm>

#include "speculative/drafters/jacobi_carry.h"

namespace tessera::speculative {

JacobiDrafter::JacobiDrafter(int vocab_size, const SamplingParams& params)
    : V_(vocab_size), params_(params) {}

void JacobiDrafter::propose(std::span<ImageState* const> active, std::span<const int> max_depth,
                            std::vector<DraftTree>& trees) {
  trees.assign(active.size(), {});
  rows_ = {};
  for (size_t j = 0; j < active.size(); ++j) {
    ImageState& im = *active[j];
    std::vector<Carried>& kept = carried_[im.id];
    const int base = static_cast<int>(im.tokens.size());  // token index of depth 1
    // A round the host verifies after one the device did: the kept rows are consecutive rows of
    // that round's distributions, read back in one download.
    std::vector<float> host_rows;
    const int n_kept = std::min(static_cast<int>(kept.size()), max_depth[j]);
    if (!device_drafts_ && n_kept > 0 && kept[0].q_row >= 0) {
      for (int i = 0; i < n_kept; ++i)
        check(kept[i].q_row == kept[0].q_row + i, "internal: carried rows not consecutive");
      host_rows.resize(static_cast<size_t>(n_kept) * V_);
      device_dist_.backend->download(device_dist_.rows(kept[0].q_row, n_kept), host_rows.data());
    }
    for (int d = 1; d <= max_depth[j]; ++d) {
      DraftNode node;
      node.parent = d - 2;
      node.depth = d;
      if (d <= static_cast<int>(kept.size())) {
        Carried& c = kept[d - 1];
        node.token = c.token;
        node.q = std::move(c.q);
        if (c.q_row >= 0 && device_drafts_) {  // verified on the device: the row stays there
          node.q_row = static_cast<int>(c.q_row);
          rows_.q = device_dist_;
        } else if (c.q_row >= 0) {
          node.q.assign(host_rows.begin() + static_cast<std::ptrdiff_t>(d - 1) * V_,
                        host_rows.begin() + static_cast<std::ptrdiff_t>(d) * V_);
        }
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
  const bool on_device = target.device_dist != nullptr;
  check(!on_device || static_cast<int>(target.carried.size()) >= static_cast<int>(tree.size()),
        "internal: a device round without its carry-over draws");
  if (on_device) device_dist_ = *target.device_dist;
  for (int r = d; r <= static_cast<int>(tree.size()); ++r) {
    Carried c;
    const int t = first_token + (r - d);  // = base + r: the index the device drew it for
    if (on_device) {
      c.token = target.carried[r - 1];
      c.q_row = target.device_row0 + r;
    } else {
      std::span<const float> p = target.dist(r);
      c.token = jacobi_carry_token(p.data(), V_, params_.temperature <= 0.0f, image.rng.seed(),
                                   image.rng.image_index(), static_cast<uint32_t>(t), image.round);
      check(c.token >= 0, "internal: sampling from an empty distribution");
      c.q.assign(p.begin(), p.end());
    }
    kept.push_back(std::move(c));
  }
}

}  // namespace tessera::speculative
