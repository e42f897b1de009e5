// Vanilla autoregressive generation (LlamaGen's generate.py): prefill the condition prefix for the
// conditional and unconditional halves, then one token per forward, each drawn from the guided,
// filtered distribution with a counter-based RNG stream per image.
#pragma once

#include <functional>
#include <vector>

#include "models/llamagen.h"
#include "sampling/sampler.h"
#include "tessera/tessera.h"

namespace tessera {

// Prefix embeddings for conds (rows 0..n-1) and, with_uncond, the unconditional rows n..2n-1;
// hides padded caption slots in `cache` (the unconditional half reuses the conditional mask).
Tensor prefix_embeddings(const LlamaGen& model, const std::vector<const Condition*>& conds,
                         bool with_uncond, KVCache& cache);

// Runs the condition prefix of sequences 0..R-1 (conditional rows, then with_uncond the
// unconditional ones) into `cache`; returns the f32 logits of the last prefix position, [R, V].
Tensor prefill(const LlamaGen& model, const std::vector<const Condition*>& conds, bool with_uncond,
               KVCache& cache);

// The sampler's parameters for the public SamplingOptions.
SamplingParams to_sampling_params(const SamplingOptions& s);

// Distribution of image token `token_index` from its conditional logits row and, when guided at
// that token, the unconditional row (uncond may be null when the unconditional half is not run).
void guided_distribution(const float* cond, const float* uncond, int vocab, const SamplingParams& p,
                         int token_index, std::span<float> probs);

// Generates one token grid per condition, all in one batch (max_tokens > 0: only that many;
// the rest of the grid stays 0).
std::vector<std::vector<int32_t>> generate_batch(
    const LlamaGen& model, const std::vector<const Condition*>& conds,
    const std::vector<uint64_t>& image_indices, const SamplingParams& params, uint64_t seed,
    int max_tokens, const std::function<void()>& on_token, GenerateStats& stats);

// Logits without guidance for one sequence: [tokens.size() + 1, V].
std::vector<float> teacher_forced_logits(const LlamaGen& model, const Condition& cond,
                                         std::span<const int32_t> tokens);

}  // namespace tessera
