// The ratio rules as plain data and TESSERA_HD math on scalars: f = min(1, ω_i p/q) with ω_i = 1
// (exact SD, COOL-SD (Li et al., 2026) Eq. 1), δ (UniformRSD, Eq. 7), δ exp(-ν i - μ) (COOL-SD,
// Eq. 10) or k (Amplify, GSD (So et al., 2025) §5), and f = min(1, (p + ε)/q) (Addition, GSD §5);
// resampled from [p - q]+ (Eq. 2) or G* = [p - q f]+ (Eq. 5). The CPU rules (exact_rule.cpp,
// relaxed_ratio_rules.cpp) compute with these functions, and a device kernel reads the same
// descriptor (AcceptanceRule::ratio) and calls the same functions, so both apply one formula.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/host_device.h"
#include "common/rounding.h"

namespace tessera::speculative {

struct RatioRule {
  enum class Kind : int32_t { Scale, Add };
  Kind kind = Kind::Scale;
  float scale = 1.0f;     // Scale: ω (1: exact SD; δ; k), or COOL-SD's δ when annealed
  float eps = 0.0f;       // Add: ε
  bool annealed = false;  // COOL-SD: ω_i = scale exp(-ν i - μ)
  float nu = -1.0f;       // annealed: ν (< 0: cool_sd_default_nu(L))
  bool optimal = false;   // resample from G* = [p - q f]+ instead of [p - q]+
  bool operator==(const RatioRule&) const = default;
};

// min(1, numerator / q): the ratio test every rule shares. q = 0 (a token a correct drafter never
// proposes) is treated as accept iff the numerator is positive.
TESSERA_HD inline double ratio_accept(double numerator, double q) {
  if (q <= 0.0) return numerator > 0.0 ? 1.0 : 0.0;
  const double r = numerator / q;
  return r < 1.0 ? r : 1.0;
}

// tessera's default ν for drafts of depth L: 2.8 / (L - 1), so that ω_1/ω_L = e^2.8 as with the
// paper's ν = 0.7 at L = 5 (COOL-SD §5; docs/methods.md, "Defaults per model and drafter"): a
// Jacobi window of 16 would otherwise take ω_1/ω_L = exp(0.7 x 15) ≈ 36000.
TESSERA_HD inline double cool_sd_default_nu(int L) {
  return L > 1 ? 2.8 / (L - 1) : 0.7;
}

// ω_i of COOL-SD for i in [1, L]: δ exp(-ν i - μ) with exp(μ) = (1/L) Σ_{j=1..L} exp(-ν j), so
// that the ω_i average to δ and decay with depth (Eq. 10; annealing, Prop. 2). ν < 0: the default.
// (The device's exp is within 1 ulp of the host's, not always equal to it.)
TESSERA_HD inline double cool_sd_omega(float delta, float nu, int i, int L) {
  L = L > 1 ? L : 1;
  i = i < 1 ? 1 : (i > L ? L : i);
  const double v = nu < 0.0f ? cool_sd_default_nu(L) : static_cast<double>(nu);
  double mean = 0.0;
  for (int j = 1; j <= L; ++j) mean += exp(-v * j);
  mean /= L;
  return static_cast<double>(delta) * exp(-v * i) / mean;
}

// ω at draft depth i of L (1 for Add, which does not scale).
TESSERA_HD inline double ratio_omega(const RatioRule& r, int i, int L) {
  if (r.kind == RatioRule::Kind::Add) return 1.0;
  return r.annealed ? cool_sd_omega(r.scale, r.nu, i, L) : static_cast<double>(r.scale);
}

// f for target probability p and draft probability q of the drafted token, with ω = ratio_omega.
TESSERA_HD inline double ratio_accept_probability(const RatioRule& r, double omega, float p,
                                                  float q) {
  const double num = r.kind == RatioRule::Kind::Add
                         ? static_cast<double>(p) + static_cast<double>(r.eps)
                         : mul_rn(omega, static_cast<double>(p));
  return ratio_accept(num, static_cast<double>(q));
}

// One entry of the resampling distribution (unnormalised) at a token y with p = p(y), q = q(y) (a
// one-hot draft: 1 at the drafted token, 0 elsewhere): [p - q]+, or [p - q f(y)]+ with optimal,
// where f(y) is the rule's acceptance had y been drafted (p itself where q = 0).
TESSERA_HD inline float ratio_residual(const RatioRule& r, double omega, float p, float q) {
  if (r.optimal) {
    if (q <= 0.0f) return p;
    const double f = ratio_accept_probability(r, omega, p, q);
    const double d = sub_rn(static_cast<double>(p), mul_rn(static_cast<double>(q), f));
    return static_cast<float>(d > 0.0 ? d : 0.0);
  }
  const double d = static_cast<double>(p) - static_cast<double>(q);
  return static_cast<float>(d > 0.0 ? d : 0.0);
}

}  // namespace tessera::speculative
