// The exactness statistics of continuous speculative decoding's verified tokens (Continuous SD
// (Wang et al., 2024); cspd-exact's claim in docs/methods.md): each decided value standardised by
// the target's test-step Gaussian, z = (x - mu_p) / s_p, must be i.i.d. N(0, 1). A one-sample KS
// test of the pooled z against Phi, and a Pearson chi-square of ||z||^2 per token against
// chi^2_D in 14 bins cut at its quantiles with fine tails. Used by tests/test_cspd_loop.cpp (the
// CPU) and tests/test_backend_compare_cspd.cpp (each backend under test).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "speculative/continuous/cspd_loop.h"
#include "stat_tests.h"

namespace tessera::cspd_test {

// What the verification saw for one token (copied out of CspdTokenTrace).
struct Token {
  int image, position;
  std::vector<float> mp, sp, mq, sq, x, decided;
  bool accepted;
};

// A CspdSettings::on_decision that appends every verified token to `out`.
inline std::function<void(const CspdTokenTrace&)> record_into(std::vector<Token>& out) {
  return [&out](const CspdTokenTrace& t) {
    auto vec = [](std::span<const float> s) { return std::vector<float>(s.begin(), s.end()); };
    out.push_back({t.image, t.position, vec(t.target.mean), vec(t.target.std), vec(t.draft.mean),
                   vec(t.draft.std), vec(t.draft_value), vec(t.decided), t.accepted});
  };
}

// The CDF of chi^2 with `dims` degrees of freedom.
inline double chi2_cdf(int dims, double s) {
  return 1.0 - test_stats::gamma_q(dims / 2.0, s / 2.0);
}

struct Fit {
  double stat = 0.0, p_value = 1.0;
};

// One-sample KS against Phi (asymptotic Kolmogorov distribution, Stephens' correction).
inline Fit ks_normal(std::vector<double> z) {
  std::sort(z.begin(), z.end());
  const double n = static_cast<double>(z.size());
  double d = 0.0;
  for (size_t i = 0; i < z.size(); ++i) {
    const double f = 0.5 * std::erfc(-z[i] / std::sqrt(2.0));
    d = std::max({d, f - static_cast<double>(i) / n, static_cast<double>(i + 1) / n - f});
  }
  const double sn = std::sqrt(n);
  return {d, test_stats::kolmogorov_q((sn + 0.12 + 0.11 / sn) * d)};
}

// Pearson chi-square of ||z||^2 against chi^2_dims, bins cut at these CDF values.
inline Fit chi2_radius(const std::vector<double>& r2, int dims) {
  static const double cuts[] = {0.001, 0.01, 0.05, 0.1,  0.2,  0.35, 0.5,
                                0.65,  0.8,  0.9,  0.95, 0.99, 0.999};
  constexpr int bins = 14;
  std::vector<double> count(bins, 0.0);
  for (double s : r2) {
    const double u = chi2_cdf(dims, s);
    count[std::upper_bound(std::begin(cuts), std::end(cuts), u) - std::begin(cuts)] += 1.0;
  }
  const double n = static_cast<double>(r2.size());
  Fit f;
  double prev = 0.0;
  for (int b = 0; b < bins; ++b) {
    const double hi = b + 1 < bins ? cuts[b] : 1.0, e = (hi - prev) * n;
    prev = hi;
    f.stat += (count[b] - e) * (count[b] - e) / e;
  }
  f.p_value = test_stats::gamma_q((bins - 1) / 2.0, f.stat / 2.0);
  return f;
}

struct Exactness {
  Fit ks, chi2;
  double min_p() const { return std::min(ks.p_value, chi2.p_value); }
};

// The statistics of values xs[i] (one per token) against the target's test-step Gaussians.
inline Exactness exactness(const std::vector<Token>& tokens,
                           const std::function<const std::vector<float>&(size_t)>& value) {
  std::vector<double> z, r2;
  const int dims = tokens.empty() ? 0 : static_cast<int>(tokens[0].mp.size());
  for (size_t k = 0; k < tokens.size(); ++k) {
    const Token& t = tokens[k];
    const std::vector<float>& x = value(k);
    double acc = 0.0;
    for (int i = 0; i < dims; ++i) {
      const double zi = (static_cast<double>(x[i]) - t.mp[i]) / t.sp[i];
      z.push_back(zi);
      acc += zi * zi;
    }
    r2.push_back(acc);
  }
  return {ks_normal(std::move(z)), chi2_radius(r2, dims)};
}

inline std::string describe(const Exactness& e) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "KS(z) D %.4f p %.3g, chi2(|z|^2) %.1f p %.3g", e.ks.stat,
                e.ks.p_value, e.chi2.stat, e.chi2.p_value);
  return buf;
}

}  // namespace tessera::cspd_test
