#include "decode/guidance.h"

namespace tessera {

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

}  // namespace tessera
