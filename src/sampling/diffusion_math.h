// One DiffLoss sampling step per element (LTH14/mar's diffusion/gaussian_diffusion.py p_sample:
// eps-prediction with the learned-range variance, Nichol & Dhariwal 2021 Eq. 15; classifier-free
// guidance on eps as models/diffloss.py forward_with_cfg), and MAR's Philox normals, as
// TESSERA_HD functions: the host chains (decode/mar_sampler.cpp) and the device step
// (sampling/diffusion_rows.h) compute with the same formulas and draw the same noise. Products and
// sums are rounded one by one (common/rounding.h), so a device differs from the CPU only where
// exp, log, sin and cos do (within an ulp).
#pragma once

#include <cmath>
#include <cstdint>

#include "common/host_device.h"
#include "common/rounding.h"
#include "sampling/philox.h"

namespace tessera {

// MAR's Philox streams (counter word 1; the token position is word 0, the image words 2-3).
inline constexpr uint32_t kMarStreamStart = 0x10000000u;    // | pair: x_T
inline constexpr uint32_t kMarStreamStep = 0x20000000u;     // | j << 12 | pair: eps_j
inline constexpr uint32_t kMarStreamOrder = 0x30000000u;    // uniform per Fisher-Yates swap
inline constexpr uint32_t kMarStreamUniform = 0x40000000u;  // | purpose << 20 | k
inline constexpr uint32_t kMarStreamNormal = 0x50000000u;   // | purpose << 20 | pair

// Box-Muller on two 53-bit uniforms of one Philox block: a pair of independent standard normals.
TESSERA_HD inline void mar_normal_pair(uint64_t seed, uint64_t image, uint32_t position,
                                       uint32_t stream, double* z0, double* z1) {
  const Philox4x32Block r = philox_draw(seed, image, position, stream);
  constexpr double k53 = 1.0 / 9007199254740992.0;
  const uint64_t a = ((static_cast<uint64_t>(r.v[0]) << 21) ^ (r.v[1] >> 11)) & ((1ull << 53) - 1);
  const uint64_t b = ((static_cast<uint64_t>(r.v[2]) << 21) ^ (r.v[3] >> 11)) & ((1ull << 53) - 1);
  const double u1 = (static_cast<double>(a) + 1.0) * k53;  // (0, 1]
  const double u2 = static_cast<double>(b) * k53;
  const double rad = sqrt(-2.0 * log(u1)), th = 2.0 * 3.14159265358979323846 * u2;
  *z0 = rad * cos(th);
  *z1 = rad * sin(th);
}

// Component i of a token's normal vector in `stream` (pair i / 2 of it).
TESSERA_HD inline float mar_normal(uint64_t seed, uint64_t image, uint32_t position,
                                   uint32_t stream, int i) {
  double z0 = 0.0, z1 = 0.0;
  mar_normal_pair(seed, image, position, stream | static_cast<uint32_t>(i / 2), &z0, &z1);
  return static_cast<float>(i % 2 ? z1 : z0);
}

// Step j's posterior coefficients in float32 (the reference's _extract_into_tensor(...).float()).
struct DiffusionStepCoefficients {
  float sqrt_recip_ac = 1.0f, sqrt_recipm1_ac = 0.0f;  // 1/sqrt(a_bar), sqrt(1/a_bar - 1)
  float coef1 = 0.0f, coef2 = 0.0f;                    // posterior mean coefficients
  float min_log = 0.0f, max_log = 0.0f;                // clipped posterior log var, log beta
};

// Guided eps: eu + cfg (ec - eu).
TESSERA_HD inline float diffusion_guided_eps(float ec, float eu, float cfg) {
  return add_rn(eu, mul_rn(cfg, sub_rn(ec, eu)));
}

// The Gaussian of step j at one element: x_0 = r x - rm1 eps (not clipped: clip_denoised=False),
// mean = c1 x_0 + c2 x, log var = frac max_log + (1 - frac) min_log with frac = (v + 1) / 2
// (LEARNED_RANGE; v not clamped).
TESSERA_HD inline void diffusion_gaussian(const DiffusionStepCoefficients& c, float x, float eps,
                                          float v, float* mean, float* log_var) {
  const float x0 = sub_rn(mul_rn(c.sqrt_recip_ac, x), mul_rn(c.sqrt_recipm1_ac, eps));
  *mean = add_rn(mul_rn(c.coef1, x0), mul_rn(c.coef2, x));
  const float frac = add_rn(v, 1.0f) / 2.0f;
  *log_var = add_rn(mul_rn(frac, c.max_log), mul_rn(sub_rn(1.0f, frac), c.min_log));
}

// The next state of a noisy step: mean + exp(log_var / 2) (temperature e).
TESSERA_HD inline float diffusion_advance(float mean, float log_var, float temperature, float e) {
  return add_rn(mean, mul_rn(expf(mul_rn(0.5f, log_var)), mul_rn(temperature, e)));
}

}  // namespace tessera
