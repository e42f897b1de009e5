#include "speculative/drafters/medusa_drafter.h"

#include <algorithm>

#include "sampling/sample_rows.h"
#include "tessera/error.h"

namespace tessera::speculative {

MedusaDrafter::MedusaDrafter(const MedusaHeads& heads, const SamplingParams& params,
                             TreeShape shape, int max_images)
    : heads_(heads),
      params_(params),
      shape_(std::move(shape)),
      ws_(heads.make_workspace(std::max(max_images, 1) * (params.uses_cfg() ? 2 : 1))),
      features_(heads.backend(), heads.dim(), params.uses_cfg(), max_images),
      ranking_(heads.backend(), heads.vocab_size(), "medusa") {
  top_needed_.assign(shape_.max_depth(), 0);
  for (int u = 0; u < shape_.nodes(); ++u)
    top_needed_[shape_.depth[u] - 1] =
        std::max(top_needed_[shape_.depth[u] - 1], shape_.rank[u] + 1);
}

std::string medusa_default_tree(int heads) {
  return "chain:" + std::to_string(std::clamp(heads, 1, kMaxTreeDepth));
}

int MedusaDrafter::draft_depth(int draft_len) const {
  return std::max(0, std::min({draft_len, heads_.num_heads(), shape_.max_depth()}));
}

int MedusaDrafter::max_nodes(int draft_len) const {
  const int depth = draft_depth(draft_len);
  return static_cast<int>(
      std::count_if(shape_.depth.begin(), shape_.depth.end(), [&](int d) { return d <= depth; }));
}

void MedusaDrafter::start(std::span<ImageState* const> images, const TargetPrefill& prefill) {
  // The prefill's last prefix row of each slot predicted the image's first token, the first root.
  const int n = static_cast<int>(images.size()), rows = prefill.rows;
  for (int i = 0; i < n; ++i)
    features_.put(images[i]->id, prefill.hidden, static_cast<int64_t>(i) * rows + rows - 1,
                  &prefill.hidden, static_cast<int64_t>(n + i) * rows + rows - 1);
}

void MedusaDrafter::finish_round(ImageState& image, const DraftTree&, const VerifyOutcome& outcome,
                                 const TargetRound& target) {
  // The row that predicted the next root (outcome.next_token): the last accepted node's, else the
  // root's (row 0).
  const int row = outcome.accepted.empty() ? 0 : outcome.accepted.back() + 1;
  features_.put(image.id, target.hidden, row, &target.hidden_uncond, row);
}

void MedusaDrafter::propose(std::span<ImageState* const> active, std::span<const int> max_depth,
                            std::vector<DraftTree>& trees) {
  check_images_sampling(active, params_);
  trees.assign(active.size(), {});
  device_rows_ = {};
  std::vector<int> who;
  int depth = 0;
  for (size_t j = 0; j < active.size(); ++j) {
    const int d = std::min(max_depth[j], draft_depth(max_depth[j]));
    if (d <= 0) continue;
    who.push_back(static_cast<int>(j));
    depth = std::max(depth, d);
  }
  if (who.empty()) return;
  const bool cfg = params_.uses_cfg();
  const int m = static_cast<int>(who.size()), R = cfg ? 2 * m : m;
  // One forward of the heads over every image's features (cond rows, then uncond rows), gathered
  // where they are.
  ids_.clear();
  for (int i = 0; i < m; ++i) ids_.push_back(active[who[i]]->id);
  features_.gather(ids_, ws_.features);
  const Tensor logits = heads_.forward(ws_, R, depth);
  forwards_++;

  // Each depth's candidates: the top ranks of its head by each image's guided distribution
  // (greedy images' at temperature 1: a one-hot has no ranks beyond 0), ranked where the logits
  // are; K ids a row come back.
  const int K = std::max(1, *std::max_element(top_needed_.begin(), top_needed_.begin() + depth));
  settings_.resize(static_cast<size_t>(depth) * m);
  for (int i = 0; i < m; ++i) {
    const ImageState& im = *active[who[i]];
    const SamplingParams ranking = ranking_params(im.sampling);
    for (int d = 1; d <= depth; ++d)  // token index of depth d: the root's + d
      settings_[(d - 1) * m + i] = device_sample_params(
          ranking, 0, 0, static_cast<uint32_t>(static_cast<int>(im.tokens.size()) - 1 + d));
  }
  ranking_.compute(logits, m, depth, cfg, settings_);
  // The nodes of the shape down to each image's depth, shape order (parents first, level by
  // level), node u's id at rank shape_.rank[u] of head d - 1's row of image i, at
  // ((d - 1) m + i) K. On the device loop the ids stay there and every node is kept (a rank past
  // the ids with mass is a missing node, BackendVerifier::complete's); on the host a node whose
  // rank found no id is left out, and its subtree with it.
  const int32_t* ranked = nullptr;
  if (device_drafts_) {
    device_rows_ = ranking_.top_on_device(K);
    device_drafts_counted_.rounds++;
  } else {
    ranked = ranking_.top(K).data();
  }
  std::vector<int> node_of(shape_.nodes());
  for (int i = 0; i < m; ++i) {
    ImageState& im = *active[who[i]];
    const int deepest = std::min(max_depth[who[i]], depth);
    im.stats.draft_forwards++;
    DraftTree& tree = trees[who[i]];
    for (int u = 0; u < shape_.nodes(); ++u) {
      node_of[u] = -1;
      const int d = shape_.depth[u], p = shape_.parent[u];
      if (d > deepest) break;
      if (p >= 0 && node_of[p] < 0) continue;
      const int at = ((d - 1) * m + i) * K + shape_.rank[u];
      DraftNode node;  // q stays empty: a deterministic draft
      node.parent = p < 0 ? -1 : node_of[p];
      node.depth = d;
      if (ranked) {
        node.token = ranked[at];
        if (node.token < 0) continue;
      } else {
        node.token = kTokenOnDevice;
        node.token_row = at;
      }
      node_of[u] = static_cast<int>(tree.size());
      tree.push_back(std::move(node));
    }
  }
}

}  // namespace tessera::speculative
