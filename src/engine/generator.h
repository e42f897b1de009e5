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
