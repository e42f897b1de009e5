// tessera public API for continuous-token models (options and statistics of
// Pipeline::generate_latents): MAR (masked autoregressive generation with a
// diffusion head per token and a KL VAE decoder), and continuous speculative decoding on it
// (Continuous SD, Wang et al., 2024; docs/methods.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/config.h"
#include "tessera/error.h"
#include "tessera/tessera.h"

namespace tessera {

struct MarSamplingOptions {
  int num_iter = 64;       // MAR steps (--steps); 256 = one token per step; 0: min(64, seq_len)
  float cfg_scale = 1.0f;  // 1: no guidance (no unconditional branch)
  std::string cfg_schedule = "linear";  // linear (MAR's default) | constant
  float temperature = 1.0f;             // scales the diffusion noise of every noisy step
  // Where the diffusion chains step: on runs each MAR step's diffusion steps where the head's
  // outputs are (the state read back once per step; Philox noise only); off steps them on the
  // host, reading every diffusion step's outputs back; auto: on for a GPU, off on the CPU.
  DeviceLoop device_loop = DeviceLoop::Auto;
};

// Continuous speculative decoding: a draft MAR (same VAE) drafts `draft_len` MAR steps, the target
// verifies them in one pass. Variants (docs/methods.md; tessera/methods.h lists their parameters:
// prefill, inner_temperature, cspd.test_step, max_resample_tries):
//   cspd            Continuous SD Eq. 4-11 as written
//   cspd-reference  what the published code computes (inverted variance factor, inner temperature)
//   cspd-exact      exact speculative sampling on one diffusion transition, finished by the target
struct ContinuousSpecOptions {
  std::string method = "vanilla";  // vanilla | cspd | cspd-reference | cspd-exact
  std::string draft_model;         // draft MAR directory (required by the cspd methods)
  int draft_len = 8;               // gamma: MAR steps per draft window
  MethodParams params;             // the method's parameters, by name; unset: defaults
};

struct MarGenerateOptions {
  MarSamplingOptions sampling;
  ContinuousSpecOptions spec;
  uint64_t seed = 0;
  int batch = 1;                   // images generated together
  uint64_t first_image_index = 0;  // image i of the call uses random stream first_image_index + i
  // Called after every MAR step with (tokens done, tokens total) over the whole call.
  std::function<void(int64_t, int64_t)> progress;
  // As GenerateOptions::cancel: when set, no further batch starts; the finished images return.
  const std::atomic<bool>* cancel = nullptr;
  // As GenerateOptions::on_image: (index among the labels, its latents) as each image finishes.
  std::function<void(size_t, const std::vector<float>&)> on_image;
};

struct MarStats {
  int64_t images = 0, tokens = 0;
  int steps = 0;                      // MAR steps per image (the resolved --steps)
  int64_t target_forwards = 0;        // batched target MAE passes (prefill steps + verifications)
  int64_t draft_forwards = 0;         // batched draft MAE passes
  int64_t drafted = 0, accepted = 0;  // draft tokens verified / accepted
  int64_t resample_tries = 0, fallbacks = 0;
  int64_t head_rows_target = 0, head_rows_draft = 0;  // diffusion-net row evaluations
  int64_t device_steps = 0;  // MAR passes (target and draft) whose chains the device loop stepped
  double seconds = 0.0;
  // Wall time split: target transformer, target diffusion head, draft (transformer + head),
  // verification (acceptance tests and residual sampling).
  double target_transformer_seconds = 0.0, target_head_seconds = 0.0;
  double draft_seconds = 0.0, verify_seconds = 0.0;
  // Per image, per token position: 1 if the token is a verified draft, 2 if a rejected draft was
  // replaced, 0 if the target generated it (prefill or vanilla).
  std::vector<std::vector<uint8_t>> token_origin;

  double acceptance_rate() const {
    return drafted > 0 ? static_cast<double>(accepted) / drafted : 0.0;
  }
};

}  // namespace tessera
