// One step of n DiffLoss chains where the diffusion head's output is (issue 42, item 4): guided
// eps, the step's Gaussian, the summed log std, the next state with MAR's Philox noise, and the
// next step's head input, for every element at once (diffusion_math.h's formulas, shared with the
// host chains in decode/mar_sampler.cpp), so that a MAR step's 100 diffusion steps need no host
// round trip. The CPU backend loops over the elements (the host chains' values bit for bit); a
// CUDA backend runs sampling/cuda/diffusion_kernels.cu.
#pragma once

#include <cstdint>

#include "sampling/diffusion_math.h"
#include "tensor/backend.h"

namespace tessera {

// A chain's noise identity: its token's (image stream, position), as PhiloxMarNoise draws it.
struct DiffusionRowNoise {
  uint64_t image_index = 0;
  int32_t position = 0;
  int32_t pad = 0;
};

struct DiffusionStep {
  DiffusionStepCoefficients coefficients;  // step j's (GaussianDiffusion::coefficients)
  int j = 0;                               // the respaced step; 0: no noise (x = mean)
  int guided = 0;                          // 1: out holds [cond rows; uncond rows]
  float cfg = 1.0f, temperature = 1.0f;
  uint64_t seed = 0;
};

// out: F32 [(guided ? 2 : 1) * n, 2 d], the head's output (eps, then v, per row; eps guided with
// the unconditional half's); rows: U8 of n DiffusionRowNoise. x, mean, log_var: F32 [n, d] (x read
// and written); sum_log_std: U8 of n d doubles, += log_var / 2 when j >= 1; x_in: F32
// [(guided ? 2 : 1) * n, d], the next step's head input ([x; x] when guided), written.
// Asynchronous on a device backend.
void diffusion_step_rows(Backend& be, const Tensor& out, int n, int d, const DiffusionStep& step,
                         const Tensor& rows, Tensor& x, Tensor& mean, Tensor& log_var,
                         Tensor& sum_log_std, Tensor& x_in);

// Element e = r d + i of that step (the CPU loop and the device kernel run this).
TESSERA_HD inline void diffusion_step_element(const float* out, int n, int d,
                                              const DiffusionStep& s, const DiffusionRowNoise* rows,
                                              int64_t e, float* x, float* mean, float* log_var,
                                              double* sum_log_std, float* x_in) {
  const int64_t r = e / d, i = e % d;
  const float ec = out[(r * 2) * d + i];
  const float eps = s.guided ? diffusion_guided_eps(ec, out[((n + r) * 2) * d + i], s.cfg) : ec;
  const float v = out[(r * 2 + 1) * d + i];
  diffusion_gaussian(s.coefficients, x[e], eps, v, &mean[e], &log_var[e]);
  if (s.j >= 1) {
    sum_log_std[e] += 0.5 * log_var[e];
    const float noise =
        mar_normal(s.seed, rows[r].image_index, static_cast<uint32_t>(rows[r].position),
                   kMarStreamStep | (static_cast<uint32_t>(s.j) << 12), static_cast<int>(i));
    x[e] = diffusion_advance(mean[e], log_var[e], s.temperature, noise);
  } else {
    x[e] = mean[e];  // no noise at the last step: the token is the mean
  }
  x_in[e] = x[e];
  if (s.guided) x_in[static_cast<int64_t>(n) * d + e] = x[e];
}

}  // namespace tessera
