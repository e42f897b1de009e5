// The target distribution of an image token from the model's logits: classifier-free guidance
// (with LlamaGen's guidance interval), then temperature, top-k and top-p (sampling/sampler.h).
#pragma once

#include <span>

#include "sampling/sampler.h"
#include "tessera/tessera.h"

namespace tessera {

// The sampler's parameters for the public SamplingOptions.
SamplingParams to_sampling_params(const SamplingOptions& s);

// Distribution of image token `token_index` from its conditional logits row and, when guided at
// that token, the unconditional row (uncond may be null when the unconditional half is not run).
void guided_distribution(const float* cond, const float* uncond, int vocab, const SamplingParams& p,
                         int token_index, std::span<float> probs);

}  // namespace tessera
