#include "speculative/drafters/model_drafter.h"

#include <algorithm>
#include <numeric>

#include "decode/generator.h"
#include "tessera/error.h"

namespace tessera::speculative {

ModelDrafter::ModelDrafter(const LlamaGen& model, const SamplingParams& params, int max_depth)
    : model_(model), params_(params), max_depth_(max_depth) {}

void ModelDrafter::start(const std::vector<const Condition*>& conds,
                         std::vector<ImageState>& images) {
  n_ = static_cast<int>(conds.size());
  const bool cfg = params_.uses_cfg();
  const int R = cfg ? 2 * n_ : n_;
  cache_ = std::make_unique<KVCache>(model_.make_cache(R, max_depth_ + 2));
  prefill(model_, conds, cfg, *cache_);  // the prefix only; its logits are not needed
  forwards_++;
  for (auto& im : images) im.stats.draft_forwards++;
}

void ModelDrafter::propose(std::span<ImageState* const> active, std::span<const int> max_depth,
                           std::vector<DraftTree>& trees) {
  const GptConfig& c = model_.config();
  const int T = model_.prefix_len(), V = c.vocab_size;
  const bool cfg = params_.uses_cfg();
  trees.assign(active.size(), {});
  // Images that draft this round.
  std::vector<int> who;
  int depth = 0;
  for (size_t j = 0; j < active.size(); ++j)
    if (max_depth[j] > 0) {
      who.push_back(static_cast<int>(j));
      depth = std::max(depth, max_depth[j]);
    }
  if (who.empty()) return;
  const int m = static_cast<int>(who.size()), R = cfg ? 2 * m : m;
  std::vector<int32_t> seqs(R);
  for (int i = 0; i < m; ++i) {
    seqs[i] = active[who[i]]->slot;
    if (cfg) seqs[m + i] = n_ + active[who[i]]->slot;
  }
  // Catch-up: the cache holds at least the committed tokens but the last two (see docs); cut it
  // there and feed those two, so every image appends the same number of rows.
  int feed = 2;
  for (int j : who) feed = std::min(feed, static_cast<int>(active[j]->tokens.size()));
  for (int i = 0; i < m; ++i) {
    const ImageState& im = *active[who[i]];
    check(static_cast<int>(im.tokens.size()) >= feed, "internal: drafter catch-up");
    const int keep = T + static_cast<int>(im.tokens.size()) - feed;
    for (int h = 0; h < (cfg ? 2 : 1); ++h) {
      const int s = seqs[h * m + i];
      check(cache_->length(s) >= keep, "internal: draft cache behind");
      cache_->truncate(s, keep);
    }
  }
  std::vector<int32_t> ids(static_cast<size_t>(R) * feed);
  ForwardParams fp;
  fp.rope_pos.resize(ids.size());
  for (int h = 0; h < (cfg ? 2 : 1); ++h)
    for (int i = 0; i < m; ++i) {
      const ImageState& im = *active[who[i]];
      const int nt = static_cast<int>(im.tokens.size());
      for (int f = 0; f < feed; ++f) {
        const size_t row = static_cast<size_t>(h * m + i) * feed + f;
        ids[row] = im.tokens[nt - feed + f];
        fp.rope_pos[row] = model_.rope_row(nt - feed + f);
      }
    }
  std::vector<float> logits(static_cast<size_t>(R) * V);
  std::vector<int32_t> next(R);
  for (int step = 0; step < depth; ++step) {
    Tensor x = model_.embed_tokens(ids);
    fp.attn = cache_->plan_append(seqs, static_cast<int>(ids.size()) / R);
    fp.logits_at = {fp.attn.n_new - 1};
    Tensor l = model_.forward(x, fp, *cache_);
    forwards_++;
    model_.backend().download(l, logits.data());
    for (int i = 0; i < m; ++i) {
      ImageState& im = *active[who[i]];
      const int d = step + 1;  // depth of the node drawn now
      if (d > max_depth[who[i]]) {
        next[i] = 0;  // a filler row for an image whose draft is complete
        continue;
      }
      im.stats.draft_forwards++;
      const int t = static_cast<int>(im.tokens.size()) - 1 + d;  // token index of the node
      DraftNode node;
      node.parent = d - 2;
      node.depth = d;
      node.q.resize(V);
      guided_distribution(logits.data() + static_cast<size_t>(i) * V,
                          cfg ? logits.data() + static_cast<size_t>(m + i) * V : nullptr, V,
                          params_, t, node.q);
      node.token =
          params_.temperature <= 0.0f
              ? argmax(node.q)
              : sample_index(node.q, im.rng.uniform(t, stream_id(Stream::Draft, im.round)));
      next[i] = node.token;
      trees[who[i]].push_back(std::move(node));
    }
    if (step + 1 == depth) break;
    ids.assign(R, 0);
    for (int i = 0; i < m; ++i) {
      ids[i] = next[i];
      if (cfg) ids[m + i] = next[i];
    }
    fp.rope_pos.resize(R);
    for (int h = 0; h < (cfg ? 2 : 1); ++h)
      for (int i = 0; i < m; ++i) {
        const ImageState& im = *active[who[i]];
        const int t = static_cast<int>(im.tokens.size()) + step;  // index of the token fed now
        fp.rope_pos[h * m + i] = model_.rope_row(std::min(t, c.n_image_tokens() - 1));
      }
  }
}

}  // namespace tessera::speculative
