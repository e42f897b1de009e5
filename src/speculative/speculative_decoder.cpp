#include "speculative/speculative_decoder.h"

#include <algorithm>

#include "common/clock.h"
#include "decode/guidance.h"
#include "speculative/verify.h"
#include "tessera/error.h"

namespace tessera::speculative {

namespace {
int depth_cap(const LoopSettings& loop) {
  check(loop.rule && loop.drafter, "internal: speculative loop without rule or drafter");
  return std::max(0, loop.drafter->draft_depth(loop.draft_len));
}

SessionOptions target_session(const LoopSettings& loop, const SamplingParams& p, int max_images) {
  const int width = depth_cap(loop) + 1;  // root + draft nodes
  SessionOptions o;
  o.n_slots = max_images * (p.uses_cfg() ? 2 : 1);
  o.extra_capacity = width;
  o.max_new = width;
  o.max_outputs_per_seq = width;
  o.hidden_states = loop.drafter->wants_hidden_states();
  return o;
}
}  // namespace

SpeculativeDecoder::SpeculativeDecoder(const AutoregressiveModel& target, int max_images,
                                       const DecoderSettings& settings, const LoopSettings& loop,
                                       GenerateStats& stats)
    : Decoder(target, target_session(loop, settings.sampling, max_images), settings, stats),
      loop_(loop),
      depth_cap_(depth_cap(loop)),
      verify_params_(settings.sampling) {
  check(settings.max_tokens == 0 || settings.max_tokens == target.info().n_tokens,
        "internal: speculative decoding generates whole images");
  if (settings.sampling.temperature <= 0.0f) {
    verify_params_.temperature = 1.0f;
    if (!loop.rule->greedy_filtered()) {
      verify_params_.top_k = 0;
      verify_params_.top_p = 1.0f;
    }
  }
}

void SpeculativeDecoder::remove(int id) {
  loop_.drafter->release(image(id));
  Decoder::remove(id);
}

void SpeculativeDecoder::prefill(std::vector<ImageState*>& fresh) {
  Decoder::prefill(fresh);
  if (loop_.policy)
    for (ImageState* im : fresh) {
      if (static_cast<int>(acceptance_.size()) <= im->id) acceptance_.resize(im->id + 1);
      acceptance_[im->id] = loop_.policy->start();
    }
  const double t0 = now_s();
  const int64_t f0 = loop_.drafter->batched_forwards();
  loop_.drafter->start(fresh);
  stats_.draft_forward_passes += loop_.drafter->batched_forwards() - f0;
  stats_.draft_seconds += now_s() - t0;
}

void SpeculativeDecoder::round(std::vector<ImageState*>& active) {
  const bool greedy = settings_.sampling.temperature <= 0.0f;
  const int T = model_.info().prefix_len, N = model_.info().n_tokens;
  const int V = model_.info().vocab_size;
  max_depth_.clear();
  round_len_.clear();
  carried_.clear();
  for (ImageState* im : active) {
    const int left = N - static_cast<int>(im->tokens.size()) - 1;
    const bool drafting = loop_.max_rounds <= 0 || im->round < loop_.max_rounds;
    const int cap = drafting ? std::min(depth_cap_, left) : 0;
    round_len_.push_back(cap);
    // Auto: the choice reads only this image's past rounds, never this round's draws.
    const int depth = loop_.policy ? loop_.policy->choose(acceptance_[im->id], cap) : cap;
    max_depth_.push_back(depth);
    carried_.push_back(std::min(loop_.drafter->carried_drafts(*im), depth));
  }

  // Draft.
  double ts = now_s();
  const int64_t f0 = loop_.drafter->batched_forwards();
  loop_.drafter->propose(active, max_depth_, trees_);
  stats_.draft_forward_passes += loop_.drafter->batched_forwards() - f0;
  double te = now_s();
  stats_.draft_seconds += te - ts;
  const int m = static_cast<int>(active.size());
  int width = 0;  // draft nodes per image in this forward (shorter drafts are padded)
  for (int j = 0; j < m; ++j) {
    check(is_chain(trees_[j]) && static_cast<int>(trees_[j].size()) <= max_depth_[j],
          "internal: the target pass verifies chains of at most the requested depth");
    width = std::max(width, static_cast<int>(trees_[j].size()));
  }
  const int rows = width + 1, halves = cfg() ? 2 : 1;

  // One target forward over [root, draft..., padding] for both halves.
  StepBatch b;
  b.n_new = rows;
  b.slots.resize(static_cast<size_t>(halves) * m);
  b.tokens.assign(b.slots.size() * rows, 0);
  b.positions.assign(b.tokens.size(), 0);
  for (int h = 0; h < halves; ++h)
    for (int j = 0; j < m; ++j) {
      const ImageState& im = *active[j];
      b.slots[h * m + j] = h == 0 ? im.slot : im.uncond_slot;
      const int root = static_cast<int>(im.tokens.size()) - 1;
      for (int r = 0; r < rows; ++r) {
        const size_t row = static_cast<size_t>(h * m + j) * rows + r;
        const bool real = r == 0 || r <= static_cast<int>(trees_[j].size());
        b.tokens[row] = r == 0 ? im.tokens.back() : (real ? trees_[j][r - 1].token : 0);
        b.positions[row] = model_.token_position(real ? root + r : root);
      }
    }
  b.output_at.resize(rows);
  for (int r = 0; r < rows; ++r) b.output_at[r] = r;
  b.output_hidden = loop_.drafter->wants_hidden_states();
  const ForwardOutputs outputs = session_.forward(b);
  session_.read(outputs.logits, logits_);
  stats_.forward_passes++;
  ts = now_s();
  stats_.target_seconds += ts - te;

  // Verify every image.
  dists_.resize(static_cast<size_t>(rows) * V);
  for (int j = 0; j < m; ++j) {
    ImageState& im = *active[j];
    const DraftTree& tree = trees_[j];
    const int base = static_cast<int>(im.tokens.size());  // token index of row 0's prediction
    // Target distributions are computed when first asked for: a draft-model round rejected
    // early never needs the rows after the rejection.
    const int used = static_cast<int>(tree.size()) + 1;
    computed_.assign(used, 0);
    double dist_s = 0.0;
    TargetRound target;
    target.dist = [&](int r) {
      std::span<float> out(dists_.data() + static_cast<size_t>(r) * V, V);
      if (!computed_[r]) {
        const double td = now_s();
        guided_distribution(
            logits_.data() + (static_cast<size_t>(j) * rows + r) * V,
            cfg() ? logits_.data() + (static_cast<size_t>(m + j) * rows + r) * V : nullptr, V,
            verify_params_, base + r, out);
        computed_[r] = 1;
        dist_s += now_s() - td;
      }
      return std::span<const float>(out);
    };
    if (b.output_hidden) target.hidden = outputs.hidden.rows(static_cast<int64_t>(j) * rows, rows);
    VerifySettings vs;
    vs.rule = loop_.rule;
    vs.draft_len = std::max(1, round_len_[j]);
    vs.greedy = greedy;
    const double tr = now_s();
    const VerifyOutcome out = verify_draft(vs, tree, target.dist, im.rng, im.round, base, im.stats);
    stats_.rule_seconds += now_s() - tr - dist_s;
    for (size_t a = 0; a < out.accepted.size(); ++a) {
      im.stats.accepted_depth[base + a] = static_cast<uint8_t>(std::min<size_t>(a + 1, 255));
      im.tokens.push_back(tree[out.accepted[a]].token);
    }
    im.tokens.push_back(out.next_token);
    const int kept = static_cast<int>(out.accepted.size()) + 1;  // root + accepted drafts
    session_.remove(im.slot, T + base - 1 + kept);
    if (cfg()) session_.remove(im.uncond_slot, T + base - 1 + kept);
    loop_.drafter->finish_round(im, tree, out, target);
    if (loop_.policy)
      loop_.policy->observe(acceptance_[im.id], static_cast<int>(tree.size()), carried_[j],
                            kept - 1);
    if (im.stats.rounds_by_depth.size() <= tree.size())
      im.stats.rounds_by_depth.resize(tree.size() + 1, 0);
    im.stats.rounds_by_depth[tree.size()]++;
    im.stats.rounds++;
    im.stats.target_forwards++;
    im.stats.tokens = static_cast<int64_t>(im.tokens.size());
    im.round++;
    im.done = static_cast<int>(im.tokens.size()) >= N;
    if (settings_.on_tokens) settings_.on_tokens(kept);
  }
  stats_.verify_seconds += now_s() - ts;
}

std::vector<std::vector<int32_t>> generate_speculative(
    const AutoregressiveModel& target, const std::vector<const Condition*>& conds,
    const std::vector<uint64_t>& image_indices, const SamplingParams& params, uint64_t seed,
    const LoopSettings& loop, const std::function<void(int64_t)>& on_tokens, GenerateStats& stats) {
  DecoderSettings s;
  s.sampling = params;
  s.seed = seed;
  s.on_tokens = on_tokens;
  SpeculativeDecoder decoder(target, static_cast<int>(conds.size()), s, loop, stats);
  return generate_all(decoder, conds, image_indices, stats);
}

}  // namespace tessera::speculative
