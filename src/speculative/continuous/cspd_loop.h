// Continuous speculative decoding on MAR (Continuous SD (Wang et al., 2024)), with the control flow
// of the published code (MarkXCloud/CSpD, SpecDecodeRunner.run): the target runs the first
// `prefill` fraction of MAR steps; then the draft runs MAR steps and, every `draft_len` steps
// (windows aligned to multiples of draft_len, and at the last step), the target verifies all window
// tokens in ONE masked pass conditioned on the verified canvas, with the window's last guidance
// scale. Every model that generates a position uses that position's noise (trajectory alignment).
// Each window token is accepted or replaced on its own (cspd_acceptance.h decides per variant).
#pragma once

#include <functional>
#include <vector>

#include "decode/mar_sampler.h"
#include "tessera/mar.h"

namespace tessera {

std::vector<std::vector<float>> cspd_generate(
    const Mar& target, const Mar& draft, const GaussianDiffusion& diffusion, Backend& backend,
    const std::vector<int>& labels, const MarSamplingOptions& sampling,
    const ContinuousSpecOptions& spec, const MarNoise& noise,
    const std::function<void(int64_t)>& on_tokens, MarStats& stats);

// The respaced diffusion step cspd-exact tests at (spec.exact_test_step, or half way).
int cspd_exact_test_step(const ContinuousSpecOptions& spec, int diffusion_steps);

}  // namespace tessera
