#include "decode/generator.h"

#include <numeric>

#include "common/clock.h"
#include "sampling/rng.h"
#include "tessera/error.h"

namespace tessera {

Tensor prefix_embeddings(const LlamaGen& model, const std::vector<const Condition*>& conds,
                         bool with_uncond, KVCache& cache) {
  const GptConfig& c = model.config();
  const int n = static_cast<int>(conds.size()), R = with_uncond ? 2 * n : n;
  const int T = c.cls_token_num;
  if (c.is_c2i()) {
    std::vector<int32_t> ids(R, c.num_classes);  // null class for unconditional rows
    for (int i = 0; i < n; ++i) {
      if (conds[i]->kind == Condition::Kind::Caption)
        throw Error("this model is class-conditional (c2i): use --class, not --caption");
      if (conds[i]->kind == Condition::Kind::Class) {
        check(conds[i]->class_id >= 0 && conds[i]->class_id < c.num_classes,
              "class " + std::to_string(conds[i]->class_id) + " out of range [0, " +
                  std::to_string(c.num_classes) + ")");
        ids[i] = conds[i]->class_id;
      }
    }
    return model.embed_classes(ids);
  }
  const size_t per = static_cast<size_t>(T) * c.caption_dim;
  std::vector<float> features(static_cast<size_t>(R) * per, 0.0f);
  std::vector<uint8_t> use_uncond(R, 1);
  for (int i = 0; i < n; ++i) {
    const Condition& cd = *conds[i];
    if (cd.kind == Condition::Kind::Class)
      throw Error("this model is text-conditional (t2i): use --caption, not --class");
    if (cd.kind != Condition::Kind::Caption) continue;
    check(cd.caption.size() == per && cd.caption_mask.size() == static_cast<size_t>(T),
          "caption features must be [" + std::to_string(T) + ", " + std::to_string(c.caption_dim) +
              "]");
    use_uncond[i] = 0;
    for (int t = 0; t < T; ++t) {
      const float m = cd.caption_mask[t] ? 1.0f : 0.0f;  // c = emb * mask (LlamaGen)
      for (int d = 0; d < c.caption_dim; ++d)
        features[i * per + static_cast<size_t>(t) * c.caption_dim + d] =
            cd.caption[static_cast<size_t>(t) * c.caption_dim + d] * m;
      if (!cd.caption_mask[t]) {
        cache.set_key_visible(i, t, false);
        if (with_uncond) cache.set_key_visible(n + i, t, false);  // uncond reuses the cond mask
      }
    }
  }
  return model.embed_captions(features, use_uncond);
}

Tensor prefill(const LlamaGen& model, const std::vector<const Condition*>& conds, bool with_uncond,
               KVCache& cache) {
  const int R = static_cast<int>(conds.size()) * (with_uncond ? 2 : 1), T = model.prefix_len();
  std::vector<int32_t> seqs(R);
  std::iota(seqs.begin(), seqs.end(), 0);
  ForwardParams fp;
  Tensor x = prefix_embeddings(model, conds, with_uncond, cache);
  fp.attn = cache.plan_append(seqs, T);
  fp.rope_pos.resize(static_cast<size_t>(R) * T);
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) fp.rope_pos[static_cast<size_t>(r) * T + t] = t;  // zero rows
  fp.logits_at = {T - 1};
  return model.forward(x, fp, cache);
}

SamplingParams to_sampling_params(const SamplingOptions& s) {
  SamplingParams p;
  p.cfg_scale = s.cfg_scale;
  p.cfg_interval = s.cfg_interval;
  p.temperature = s.temperature;
  p.top_k = s.top_k;
  p.top_p = s.top_p;
  return p;
}

void guided_distribution(const float* cond, const float* uncond, int vocab, const SamplingParams& p,
                         int token_index, std::span<float> probs) {
  std::span<const float> c(cond, static_cast<size_t>(vocab)), u;
  if (uncond && p.guided(token_index)) u = {uncond, static_cast<size_t>(vocab)};
  target_distribution(c, u, p.cfg_scale, p, probs);
}

std::vector<std::vector<int32_t>> generate_batch(
    const LlamaGen& model, const std::vector<const Condition*>& conds,
    const std::vector<uint64_t>& image_indices, const SamplingParams& params, uint64_t seed,
    int max_tokens, const std::function<void()>& on_token, GenerateStats& stats) {
  const GptConfig& c = model.config();
  Backend& be = model.backend();
  const int n = static_cast<int>(conds.size());
  const bool cfg = params.uses_cfg();
  const int R = cfg ? 2 * n : n, N = c.n_image_tokens(), V = c.vocab_size;
  const double t0 = now_s();
  KVCache cache = model.make_cache(R);
  std::vector<int32_t> seqs(R);
  std::iota(seqs.begin(), seqs.end(), 0);
  Tensor logits_dev = prefill(model, conds, cfg, cache);
  ForwardParams fp;
  Tensor x;
  stats.forward_passes++;
  stats.prefill_seconds += now_s() - t0;

  std::vector<float> logits(static_cast<size_t>(R) * V), probs(V);
  std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(N, 0));
  std::vector<int32_t> next(R);
  const int steps = max_tokens > 0 ? std::min(max_tokens, N) : N;
  for (int t = 0; t < steps; ++t) {
    be.download(logits_dev, logits.data());
    for (int i = 0; i < n; ++i) {
      guided_distribution(logits.data() + static_cast<size_t>(i) * V,
                          cfg ? logits.data() + static_cast<size_t>(n + i) * V : nullptr, V, params,
                          t, probs);
      const int tok = params.temperature <= 0.0f
                          ? argmax(probs)
                          : sample_index(probs, CounterRng(seed, image_indices[i]).uniform(t));
      out[i][t] = tok;
      next[i] = tok;
      if (cfg) next[n + i] = tok;  // the sampled token is fed to both halves
    }
    stats.tokens += n;
    if (on_token) on_token();
    if (t == steps - 1) break;
    x = model.embed_tokens(next);
    fp.attn = cache.plan_append(seqs, 1);
    fp.rope_pos.assign(R, model.rope_row(t));
    fp.logits_at = {0};
    logits_dev = model.forward(x, fp, cache);
    stats.forward_passes++;
  }
  for (int i = 0; i < n; ++i) {
    ImageStats is;
    is.tokens = steps;
    is.rounds = steps - 1;
    is.target_forwards = steps;
    is.accepted_depth.assign(N, 0);
    stats.per_image.push_back(std::move(is));
  }
  stats.images += n;
  const double t1 = now_s();
  stats.seconds += t1 - t0;
  stats.target_seconds += t1 - t0;
  return out;
}

std::vector<float> teacher_forced_logits(const LlamaGen& model, const Condition& cond,
                                         std::span<const int32_t> tokens) {
  const GptConfig& c = model.config();
  Backend& be = model.backend();
  const int T = c.cls_token_num, V = c.vocab_size;
  const int L = static_cast<int>(tokens.size());
  check(L <= c.n_image_tokens() - 1, "forward: at most " + std::to_string(c.n_image_tokens() - 1) +
                                         " tokens (grid " + std::to_string(c.grid) + "x" +
                                         std::to_string(c.grid) + "), got " + std::to_string(L));
  KVCache cache = model.make_cache(1);
  const std::vector<int32_t> seq = {0};
  std::vector<const Condition*> conds = {&cond};
  ForwardParams fp;
  Tensor x = prefix_embeddings(model, conds, false, cache);
  fp.attn = cache.plan_append(seq, T);
  fp.rope_pos.resize(T);
  std::iota(fp.rope_pos.begin(), fp.rope_pos.end(), 0);
  fp.logits_at = {T - 1};
  std::vector<float> out(static_cast<size_t>(L + 1) * V);
  be.download(model.forward(x, fp, cache), out.data());
  if (L == 0) return out;
  x = model.embed_tokens(tokens);
  fp.attn = cache.plan_append(seq, L);
  fp.rope_pos.resize(L);
  fp.logits_at.resize(L);
  for (int j = 0; j < L; ++j) {
    fp.rope_pos[j] = model.rope_row(j);
    fp.logits_at[j] = j;
  }
  be.download(model.forward(x, fp, cache), out.data() + V);
  return out;
}

}  // namespace tessera
