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

namespace tessera::speculative {

struct TypicalRuleData {
  float eps = 0.09f;   // ε: the threshold's cap
  float alpha = 0.3f;  // α: its entropy scale
};

// min(ε, α exp(-H(p))), H(p) = -Σ_y p(y) log(p(y) + 1e-5) (the code's 1e-5 inside the log), for a
// row of V probabilities.
TESSERA_HD inline double typical_threshold_row(const float* p, int V, float eps, float alpha) {
  double h = 0.0;
  for (int y = 0; y < V; ++y) {
    const double v = p[y];
    h = sub_rn(h, mul_rn(v, log(v + 1e-5)));
  }
  const double t = mul_rn(static_cast<double>(alpha), exp(-h));
  const double e = eps;
  return t < e ? t : e;
}

// f(x~): 1 iff p(x~) is above the threshold, else 0 (deterministic).
TESSERA_HD inline double typical_accept_probability(const TypicalRuleData& r, const float* p, int x,
                                                    int V) {
  return static_cast<double>(p[x]) > typical_threshold_row(p, V, r.eps, r.alpha) ? 1.0 : 0.0;
}

}  // namespace tessera::speculative
