// Medusa's typical acceptance (Cai et al., 2024, §2.3.1; FasterDecoding/Medusa utils.py
// get_typical_posterior_mask) as plain data and TESSERA_HD functions on a raw row: the CPU rule
// (typical_rule.cpp) and the device loop's walk (speculative/verify_rows.h) both call them.
// Products and differences are rounded one by one (common/rounding.h); a device differs from the
// CPU only where log and exp do (within an ulp).
#pragma once

#include <cmath>
#include <cstdint>

#include "common/host_device.h"
#include "common/rounding.h"
#include "speculative/walk_lanes.h"

namespace tessera::speculative {

struct TypicalRuleData {
  float eps = 0.09f;   // ε: the threshold's cap
  float alpha = 0.3f;  // α: its entropy scale
};

// min(ε, α exp(-H(p))), H(p) = -Σ_y p(y) log(p(y) + 1e-5) (the code's 1e-5 inside the log), for a
// row of V probabilities, its sum spread over `lanes` (walk_lanes.h); with SerialLanes in index
// order (the CPU rule's and the CPU walk's bits). The sum is -H: adding each term rounds as
// subtracting it from H would (rounding to nearest is symmetric).
template <class Lanes>
TESSERA_HD double typical_threshold_on(const Lanes& lanes, const float* p, int V, float eps,
                                       float alpha) {
  const double minus_h = lanes.sum_of(V, [&](int y) {
    const double v = p[y];
    return mul_rn(v, log(v + 1e-5));
  });
  const double t = mul_rn(static_cast<double>(alpha), exp(minus_h));
  const double e = eps;
  return t < e ? t : e;
}

TESSERA_HD inline double typical_threshold_row(const float* p, int V, float eps, float alpha) {
  return typical_threshold_on(SerialLanes{}, p, V, eps, alpha);
}

// f(x~) given p(x~) and the row's threshold: 1 iff p(x~) is above it, else 0 (deterministic).
TESSERA_HD inline double typical_accept_above(float px, double threshold) {
  return static_cast<double>(px) > threshold ? 1.0 : 0.0;
}

// f(x~) on a row of V probabilities.
TESSERA_HD inline double typical_accept_probability(const TypicalRuleData& r, const float* p, int x,
                                                    int V) {
  return typical_accept_above(p[x], typical_threshold_row(p, V, r.eps, r.alpha));
}

}  // namespace tessera::speculative
