#include "decode/guidance.h"

#include <cmath>
#include <string>

#include "tessera/error.h"

namespace tessera {

SamplingOptions resolve_sampling(const SamplingOptions& in, const SamplingDefaults& d) {
  SamplingOptions s = in;
  if (s.cfg_scale == kFromModel) s.cfg_scale = d.cfg.value_or(4.0f);
  if (s.temperature == kFromModel) s.temperature = d.temperature.value_or(1.0f);
  if (s.top_k == kFromModelInt) s.top_k = d.top_k.value_or(2000);
  if (s.top_p == kFromModel) s.top_p = d.top_p.value_or(1.0f);
  return s;
}

SamplingParams to_sampling_params(const SamplingOptions& in) {
  // Settings left to the model that reach here unresolved take LlamaGen's defaults.
  const SamplingOptions s = resolve_sampling(in);
  // Non-finite settings would reach every probability (an infinite guidance scale turns the
  // logits into NaN and the sampler into garbage), so they are rejected here, once.
  check_param(std::isfinite(s.temperature) && s.temperature >= 0.0f, "temperature",
              "must be a finite number >= 0 (0: greedy)");
  check_param(s.top_k >= 0, "top_k", "must be >= 0 (0: off; values above the vocabulary keep all)");
  check_param(std::isfinite(s.top_p) && s.top_p > 0.0f && s.top_p <= 1.0f, "top_p",
              "must be in (0, 1] (1: off)");
  check_param(std::isfinite(s.cfg_scale) && s.cfg_scale >= 0.0f, "cfg",
              "must be a finite number >= 0 (<= 1: no guidance)");
  check_param(std::isfinite(s.cfg_interval) && s.cfg_interval >= -1.0f, "cfg_interval",
              "must be a finite number >= -1 (-1: guide every token)");
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
  try {
    target_distribution(c, u, p.cfg_scale, p, probs);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " at image token " + std::to_string(token_index));
  }
}

}  // namespace tessera
