#include "speculative/drafters/model_drafter.h"

#include <algorithm>

#include "decode/guidance.h"
#include "tessera/error.h"

namespace tessera::speculative {

namespace {
SessionOptions draft_session(const SamplingParams& params, int max_depth, int max_images) {
  SessionOptions o;
  o.n_slots = max_images * (params.uses_cfg() ? 2 : 1);
  o.extra_capacity = max_depth + 2;
  o.max_new = 2;  // the catch-up feeds at most the last two committed tokens
  return o;
}
}  // namespace

ModelDrafter::ModelDrafter(const AutoregressiveModel& model, const SamplingParams& params,
                           int max_depth, int max_images)
    : model_(model),
      params_(params),
      session_(model, draft_session(params, max_depth, max_images)) {}

void ModelDrafter::start(std::span<ImageState* const> images) {
  const bool cfg = params_.uses_cfg();
  std::vector<const Condition*> conds;
  std::vector<int32_t> slots, uncond;
  for (ImageState* im : images) {
    Slots s;
    s.cond = session_.acquire_slot();
    if (cfg) s.uncond = session_.acquire_slot();
    slots_[im->id] = s;
    conds.push_back(&im->condition);
    slots.push_back(s.cond);
    uncond.push_back(s.uncond);
    im->stats.draft_forwards++;
  }
  if (cfg) slots.insert(slots.end(), uncond.begin(), uncond.end());
  session_.prefill(conds, cfg, slots);  // the prefix only; its logits are not needed
}

void ModelDrafter::release(const ImageState& image) {
  auto it = slots_.find(image.id);
  if (it == slots_.end()) return;
  session_.release_slot(it->second.cond);
  if (it->second.uncond >= 0) session_.release_slot(it->second.uncond);
  slots_.erase(it);
}

void ModelDrafter::propose(std::span<ImageState* const> active, std::span<const int> max_depth,
                           std::vector<DraftTree>& trees) {
  const ArModelInfo& info = model_.info();
  const int T = info.prefix_len, V = info.vocab_size;
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
  StepBatch b;
  b.slots.resize(R);
  for (int i = 0; i < m; ++i) {
    const Slots& s = slots_.at(active[who[i]]->id);
    b.slots[i] = s.cond;
    if (cfg) b.slots[m + i] = s.uncond;
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
      const int s = b.slots[h * m + i];
      check(session_.length(s) >= keep, "internal: draft cache behind");
      session_.remove(s, keep);
    }
  }
  b.n_new = feed;
  b.tokens.resize(static_cast<size_t>(R) * feed);
  b.positions.resize(b.tokens.size());
  for (int h = 0; h < (cfg ? 2 : 1); ++h)
    for (int i = 0; i < m; ++i) {
      const ImageState& im = *active[who[i]];
      const int nt = static_cast<int>(im.tokens.size());
      for (int f = 0; f < feed; ++f) {
        const size_t row = static_cast<size_t>(h * m + i) * feed + f;
        b.tokens[row] = im.tokens[nt - feed + f];
        b.positions[row] = model_.token_position(nt - feed + f);
      }
    }
  std::vector<int32_t> next(R);
  for (int step = 0; step < depth; ++step) {
    b.output_at = {b.n_new - 1};
    session_.read(session_.forward(b).logits, logits_);
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
      guided_distribution(logits_.data() + static_cast<size_t>(i) * V,
                          cfg ? logits_.data() + static_cast<size_t>(m + i) * V : nullptr, V,
                          params_, t, node.q);
      node.token =
          params_.temperature <= 0.0f
              ? argmax(node.q)
              : sample_index(node.q, im.rng.uniform(t, stream_id(Stream::Draft, im.round)));
      next[i] = node.token;
      trees[who[i]].push_back(std::move(node));
    }
    if (step + 1 == depth) break;
    b.n_new = 1;
    b.tokens.assign(R, 0);
    for (int i = 0; i < m; ++i) {
      b.tokens[i] = next[i];
      if (cfg) b.tokens[m + i] = next[i];
    }
    b.positions.resize(R);
    for (int h = 0; h < (cfg ? 2 : 1); ++h)
      for (int i = 0; i < m; ++i) {
        const ImageState& im = *active[who[i]];
        const int t = static_cast<int>(im.tokens.size()) + step;  // index of the token fed now
        b.positions[h * m + i] = model_.token_position(std::min(t, info.n_tokens - 1));
      }
  }
}

}  // namespace tessera::speculative
