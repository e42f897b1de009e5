#include "speculative/speculative_loop.h"

#include <algorithm>
#include <numeric>

#include "common/clock.h"
#include "decode/generator.h"
#include "speculative/verify.h"
#include "tessera/error.h"

namespace tessera::speculative {

std::vector<std::vector<int32_t>> generate_speculative(
    const LlamaGen& target, const std::vector<const Condition*>& conds,
    const std::vector<uint64_t>& image_indices, const SamplingParams& params, uint64_t seed,
    const LoopSettings& loop, const std::function<void(int64_t)>& on_tokens, GenerateStats& stats) {
  check(loop.rule && loop.drafter, "internal: speculative loop without rule or drafter");
  const GptConfig& c = target.config();
  Backend& be = target.backend();
  const int n = static_cast<int>(conds.size());
  const bool cfg = params.uses_cfg(), greedy = params.temperature <= 0.0f;
  const int R = cfg ? 2 * n : n, T = c.cls_token_num, N = c.n_image_tokens(), V = c.vocab_size;
  const int depth_cap = std::max(0, loop.drafter->draft_depth(loop.draft_len));
  // Greedy verification sees the untempered distribution (LANTERN's greedy rule needs it).
  SamplingParams verify_params = params;
  if (greedy) verify_params.temperature = 1.0f;

  const double t0 = now_s();
  const int64_t draft_forwards0 = loop.drafter->batched_forwards();
  KVCache cache = target.make_cache(R, depth_cap + 1);
  std::vector<ImageState> images(n);
  for (int i = 0; i < n; ++i) {
    images[i].slot = i;
    images[i].rng = CounterRng(seed, image_indices[i]);
    images[i].stats.accepted_depth.assign(N, 0);
  }

  // Prefill, and the first token exactly as vanilla sampling draws it.
  {
    std::vector<float> logits(static_cast<size_t>(R) * V), probs(V);
    be.download(prefill(target, conds, cfg, cache), logits.data());
    stats.forward_passes++;
    for (int i = 0; i < n; ++i) {
      guided_distribution(logits.data() + static_cast<size_t>(i) * V,
                          cfg ? logits.data() + static_cast<size_t>(n + i) * V : nullptr, V, params,
                          0, probs);
      images[i].tokens.push_back(greedy ? argmax(probs)
                                        : sample_index(probs, images[i].rng.uniform(0)));
      images[i].stats.tokens = 1;
      images[i].stats.target_forwards = 1;
      images[i].done = N == 1;
    }
  }
  const double t1 = now_s();
  stats.prefill_seconds += t1 - t0;
  stats.target_seconds += t1 - t0;
  if (on_tokens) on_tokens(n);
  loop.drafter->start(conds, images);
  stats.draft_seconds += now_s() - t1;

  std::vector<ImageState*> active;
  std::vector<int> max_depth;
  std::vector<DraftTree> trees;
  std::vector<float> logits, dists;
  std::vector<uint8_t> computed;
  for (;;) {
    active.clear();
    max_depth.clear();
    for (auto& im : images)
      if (!im.done) {
        active.push_back(&im);
        const int left = N - static_cast<int>(im.tokens.size()) - 1;
        const bool drafting = loop.max_rounds <= 0 || im.round < loop.max_rounds;
        max_depth.push_back(drafting ? std::min(depth_cap, left) : 0);
      }
    if (active.empty()) break;

    // Draft.
    double ts = now_s();
    loop.drafter->propose(active, max_depth, trees);
    double te = now_s();
    stats.draft_seconds += te - ts;
    const int m = static_cast<int>(active.size());
    int width = 0;  // draft nodes per image in this forward (shorter drafts are padded)
    for (int j = 0; j < m; ++j) {
      check(is_chain(trees[j]) && static_cast<int>(trees[j].size()) <= max_depth[j],
            "internal: the target pass verifies chains of at most the requested depth");
      width = std::max(width, static_cast<int>(trees[j].size()));
    }
    const int rows = width + 1, Rm = cfg ? 2 * m : m;

    // One target forward over [root, draft..., padding] for both halves.
    std::vector<int32_t> seqs(Rm), ids(static_cast<size_t>(Rm) * rows, 0);
    ForwardParams fp;
    fp.rope_pos.assign(ids.size(), 0);
    for (int h = 0; h < (cfg ? 2 : 1); ++h)
      for (int j = 0; j < m; ++j) {
        const ImageState& im = *active[j];
        seqs[h * m + j] = h * n + im.slot;
        const int root = static_cast<int>(im.tokens.size()) - 1;
        for (int r = 0; r < rows; ++r) {
          const size_t row = static_cast<size_t>(h * m + j) * rows + r;
          const bool real = r == 0 || r <= static_cast<int>(trees[j].size());
          ids[row] = r == 0 ? im.tokens.back() : (real ? trees[j][r - 1].token : 0);
          fp.rope_pos[row] = target.rope_row(real ? root + r : root);
        }
      }
    fp.attn = cache.plan_append(seqs, rows);
    fp.logits_at.resize(rows);
    std::iota(fp.logits_at.begin(), fp.logits_at.end(), 0);
    Tensor lg = target.forward(target.embed_tokens(ids), fp, cache);
    logits.resize(static_cast<size_t>(Rm) * rows * V);
    be.download(lg, logits.data());
    stats.forward_passes++;
    ts = now_s();
    stats.target_seconds += ts - te;

    // Verify every image.
    dists.resize(static_cast<size_t>(rows) * V);
    for (int j = 0; j < m; ++j) {
      ImageState& im = *active[j];
      const DraftTree& tree = trees[j];
      const int base = static_cast<int>(im.tokens.size());  // token index of row 0's prediction
      // Target distributions are computed when first asked for: a draft-model round rejected
      // early never needs the rows after the rejection.
      const int used = static_cast<int>(tree.size()) + 1;
      computed.assign(used, 0);
      double dist_s = 0.0;
      auto dist = [&](int r) {
        std::span<float> out(dists.data() + static_cast<size_t>(r) * V, V);
        if (!computed[r]) {
          const double td = now_s();
          guided_distribution(
              logits.data() + (static_cast<size_t>(j) * rows + r) * V,
              cfg ? logits.data() + (static_cast<size_t>(m + j) * rows + r) * V : nullptr, V,
              verify_params, base + r, out);
          computed[r] = 1;
          dist_s += now_s() - td;
        }
        return std::span<const float>(out);
      };
      VerifySettings vs;
      vs.rule = loop.rule;
      vs.draft_len = std::max(1, max_depth[j]);
      vs.greedy = greedy;
      const double tr = now_s();
      const VerifyOutcome out = verify_draft(vs, tree, dist, im.rng, im.round, base, im.stats);
      stats.rule_seconds += now_s() - tr - dist_s;
      for (size_t a = 0; a < out.accepted.size(); ++a) {
        im.stats.accepted_depth[base + a] = static_cast<uint8_t>(std::min<size_t>(a + 1, 255));
        im.tokens.push_back(tree[out.accepted[a]].token);
      }
      im.tokens.push_back(out.next_token);
      const int kept = static_cast<int>(out.accepted.size()) + 1;  // root + accepted drafts
      for (int h = 0; h < (cfg ? 2 : 1); ++h) cache.truncate(h * n + im.slot, T + base - 1 + kept);
      loop.drafter->finish_round(im, tree, out, dist);
      im.stats.rounds++;
      im.stats.target_forwards++;
      im.stats.tokens = static_cast<int64_t>(im.tokens.size());
      im.round++;
      im.done = static_cast<int>(im.tokens.size()) >= N;
      if (on_tokens) on_tokens(kept);
    }
    stats.verify_seconds += now_s() - ts;
  }

  std::vector<std::vector<int32_t>> out(n);
  for (int i = 0; i < n; ++i) {
    out[i] = std::move(images[i].tokens);
    stats.tokens += static_cast<int64_t>(out[i].size());
    stats.per_image.push_back(std::move(images[i].stats));
  }
  stats.images += n;
  stats.draft_forward_passes += loop.drafter->batched_forwards() - draft_forwards0;
  stats.seconds += now_s() - t0;
  return out;
}

}  // namespace tessera::speculative
