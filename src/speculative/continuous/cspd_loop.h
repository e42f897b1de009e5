// Continuous speculative decoding on MAR (Continuous SD (Wang et al., 2024)), with the control flow
// of the published code (MarkXCloud/CSpD, SpecDecodeRunner.run): the target runs the first
// `prefill` fraction of MAR steps; then the draft runs MAR steps and, every `draft_len` steps
// (windows aligned to multiples of draft_len, and at the last step), the target verifies all window
// tokens in ONE masked pass conditioned on the verified canvas, with the window's last guidance
// scale. Every model that generates a position uses that position's noise (trajectory alignment).
// Each window token is accepted or replaced on its own (cspd_acceptance.h decides per variant).
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "decode/mar_sampler.h"
#include "speculative/continuous/cspd_acceptance.h"
#include "tessera/mar.h"

namespace tessera {

// One verified window token as the verification saw it (CspdSettings::on_decision): the
// test-step Gaussians of both models (std with temperature), the draft's value there, and the
// decided value (the draft's, or a residual sample; for Exact the target then finishes its chain
// from it). Spans are valid during the call only.
struct CspdTokenTrace {
  int image = 0, position = 0;
  cspd::DiagGaussian target, draft;
  std::span<const float> draft_value, decided;
  bool accepted = false, fallback = false;
  int resample_tries = 0;
};

// A continuous method resolved from ContinuousSpecOptions (speculative::make_cspd_settings).
struct CspdSettings {
  cspd::Variant variant = cspd::Variant::Paper;
  int draft_len = 8;                // gamma: MAR steps per draft window
  float prefill = 0.05f;            // fraction of the MAR steps run by the target first
  double inner_temperature = 42.0;  // Reference only
  int test_step = -1;               // Exact: respaced diffusion step tested; -1: half way
  int max_resample_tries = 100;     // Paper / Reference only (Exact's residual has no cap)
  // Optional observer of every verified token (tests check exactness through it).
  std::function<void(const CspdTokenTrace&)> on_decision;
};

std::vector<std::vector<float>> cspd_generate(
    const Mar& target, const Mar& draft, const GaussianDiffusion& diffusion, Backend& backend,
    const std::vector<int>& labels, const MarSamplingOptions& sampling, const CspdSettings& spec,
    const MarNoise& noise, const std::function<void(int64_t)>& on_tokens, MarStats& stats);

// The respaced diffusion step cspd-exact tests at (spec.test_step, or half way); a
// ParameterError naming cspd.test_step when it is not in [1, diffusion_steps - 1].
int cspd_exact_test_step(const CspdSettings& spec, int diffusion_steps);

}  // namespace tessera
