// Statistical test helpers shared by the test suites: p-values of chi-square and
// Kolmogorov-Smirnov tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace tessera::test_stats {

// Regularised upper incomplete gamma Q(a, x) (series for x < a + 1, Lentz continued fraction
// otherwise): the chi-square p-value is Q(df / 2, stat / 2).
inline double gamma_q(double a, double x) {
  if (x <= 0.0) return 1.0;
  const double lg = std::lgamma(a);
  if (x < a + 1.0) {
    double sum = 1.0 / a, term = sum;
    for (int n = 1; n < 1000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (std::fabs(term) < std::fabs(sum) * 1e-15) break;
    }
    return 1.0 - sum * std::exp(-x + a * std::log(x) - lg);
  }
  double b = x + 1.0 - a, c = 1e300, d = 1.0 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::fabs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (std::fabs(c) < 1e-300) c = 1e-300;
    d = 1.0 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1.0) < 1e-15) break;
  }
  return std::exp(-x + a * std::log(x) - lg) * h;
}

// Kolmogorov distribution tail Q(lambda) = 2 sum_k (-1)^(k-1) exp(-2 k^2 lambda^2).
inline double kolmogorov_q(double lambda) {
  if (lambda < 0.2) return 1.0;
  double sum = 0.0, sign = 1.0;
  for (int k = 1; k <= 200; ++k) {
    const double term = sign * std::exp(-2.0 * k * k * lambda * lambda);
    sum += term;
    if (std::fabs(term) < 1e-300 || std::fabs(term) < 1e-17 * std::fabs(sum)) break;
    sign = -sign;
  }
  return std::clamp(2.0 * sum, 0.0, 1.0);
}

// Two-sample KS statistic sup |F_a - F_b| over the pooled sample.
inline double ks_two_sample_statistic(std::vector<double> a, std::vector<double> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  size_t i = 0, j = 0;
  double D = 0.0;
  while (i < a.size() && j < b.size()) {
    const double x = std::min(a[i], b[j]);
    while (i < a.size() && a[i] <= x) ++i;
    while (j < b.size() && b[j] <= x) ++j;
    D = std::max(D,
                 std::fabs(static_cast<double>(i) / a.size() - static_cast<double>(j) / b.size()));
  }
  return D;
}

// Asymptotic two-sample KS p-value with the effective-n correction (Numerical Recipes).
inline double ks_two_sample_pvalue(double D, double n1, double n2) {
  const double ne = n1 * n2 / (n1 + n2);
  return kolmogorov_q((std::sqrt(ne) + 0.12 + 0.11 / std::sqrt(ne)) * D);
}

}  // namespace tessera::test_stats
