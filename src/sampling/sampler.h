// Next-token distribution of LlamaGen's sampler (autoregressive/models/generate.py: the CFG of
// prefill/decode_one_token, then sample()), in order: classifier-free guidance
// uncond + (cond - uncond) * scale, temperature, top-k (ties at the threshold kept), top-p (HF
// semantics: the first token crossing the threshold is kept), softmax. Temperature 0 means
// greedy: the distribution is one-hot on the argmax. Speculative decoding verifies against
// exactly this distribution, so it is computed explicitly rather than fused into sampling.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sampling/sampling_rules.h"

namespace tessera {

struct SamplingParams {
  float cfg_scale = 1.0f;      // <= 1: no guidance (the unconditional half is not run)
  float cfg_interval = -1.0f;  // > -1: guidance only while the decode-loop index i <= interval
  float temperature = 1.0f;    // 0 = greedy
  int top_k = 0;               // 0 = off
  float top_p = 1.0f;          // 1 = off

  bool uses_cfg() const { return cfg_scale > 1.0f; }
  bool greedy() const { return temperature <= 0.0f; }
  // Guides and is greedy as `o` does: what a batch's images must share (its unconditional slots,
  // its drafters' trees), while the values may be each image's own.
  bool same_shape(const SamplingParams& o) const {
    return uses_cfg() == o.uses_cfg() && greedy() == o.greedy();
  }
  // Whether image token t (0-based) is guided (sampling_rules.h's guided_at, shared with the
  // device sampler).
  bool guided(int token_index) const {
    return guided_at(uses_cfg(), cfg_interval, static_cast<uint32_t>(token_index));
  }
};

// The distribution drafters rank candidates by (static trees' children, EAGLE-2's expansions,
// Medusa's heads): the sampling distribution itself, or at temperature 1 when greedy, since a
// one-hot has no ranks beyond 0 (its argmax is the greedy token: EAGLE-1's top-k).
inline SamplingParams ranking_params(SamplingParams p) {
  if (p.greedy()) p.temperature = 1.0f;
  return p;
}

// Writes the target distribution over the vocabulary into probs. uncond may be empty (no guidance).
void target_distribution(std::span<const float> cond, std::span<const float> uncond, float scale,
                         const SamplingParams& p, std::span<float> probs);

// Applies top-k then top-p in place to logits (removed entries become -inf).
void filter_top_k_top_p(std::span<float> logits, int top_k, float top_p);

// Inverse-CDF draw: the first index whose cumulative probability exceeds u * total. u in [0, 1).
int sample_index(std::span<const float> probs, double u);
int argmax(std::span<const float> values);  // first maximal index
// Scales weights in place to sum to 1 (summed in double, in index order: the speculative walk and
// the drafters that predict its residuals must agree bit for bit); returns false, leaving them
// untouched, when their mass is zero.
bool normalise(std::span<float> weights);

}  // namespace tessera
