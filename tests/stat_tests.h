// Statistical test helpers shared by the test suites: p-values of chi-square and
// Kolmogorov-Smirnov tests, and the power computation that sizes the goodness-of-fit tests.
//
// Power of Pearson's chi-square test against a departure of total variation ε. If the sampled
// distribution is p + d while the test expects p (over the test's cells), the statistic is
// asymptotically noncentral chi-square with df = cells - 1 and noncentrality
//   λ = n Σ_i d_i² / p_i  >=  n (Σ_i |d_i|)² / Σ_i p_i  =  4 n ε²        (Cauchy-Schwarz),
// so every departure with TV >= ε on the cells is rejected at level α with probability at least
//   power(n, df, ε, α) = P(χ²_df(4 n ε²) > c_α),   c_α = the upper-α quantile of χ²_df.
// Pooling cells (expected count < 5) can hide the part of a departure that moves mass between
// pooled cells; that part is at most the pooled cells' mass m, so the guarantee is stated for
// TV >= ε + m (the tests compute m and check the power at ε_cells = ε - m). Mass on sequences
// the target cannot produce is caught outright (any such sample fails).
// Example: df = 60, α = 1e-3: c_α = 99.6 and λ = 63.8 gives power 0.9, so ε = 0.01 needs
// n = 63.8 / (4 · 1e-4) = 159,500 samples (n = 12,000 guarantees power 0.9 only at ε = 0.037;
// at ε = 0.012 its guaranteed power is 0.008).
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

// Upper-α quantile of the central chi-square distribution: c with Q(df/2, c/2) = α.
inline double chi_square_critical(int df, double alpha) {
  double lo = 0.0, hi = df + 10.0 * std::sqrt(2.0 * df) + 100.0;
  while (gamma_q(df / 2.0, hi / 2.0) > alpha) hi *= 2.0;
  for (int it = 0; it < 200; ++it) {
    const double mid = 0.5 * (lo + hi);
    (gamma_q(df / 2.0, mid / 2.0) > alpha ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

// P(χ²_df(λ) > x) for the noncentral chi-square: the Poisson(λ/2) mixture of central tails,
// Σ_j e^{-λ/2} (λ/2)^j / j! Q(df/2 + j, x/2), summed outwards from the Poisson mode.
inline double noncentral_chi_square_sf(int df, double lambda, double x) {
  if (lambda <= 0.0) return gamma_q(df / 2.0, x / 2.0);
  const double h = lambda / 2.0;
  const int mode = static_cast<int>(h);
  auto weight = [h](int j) { return std::exp(-h + j * std::log(h) - std::lgamma(j + 1.0)); };
  double sum = 0.0;
  for (int j = mode; j >= 0; --j) {
    const double w = weight(j);
    sum += w * gamma_q(df / 2.0 + j, x / 2.0);
    if (w < 1e-16 && j < mode) break;
  }
  for (int j = mode + 1;; ++j) {
    const double w = weight(j);
    sum += w * gamma_q(df / 2.0 + j, x / 2.0);
    if (w < 1e-16) break;
  }
  return std::clamp(sum, 0.0, 1.0);
}

// Lower bound on the probability that a level-α Pearson test with df degrees of freedom and n
// samples rejects a distribution at total variation ε (over its cells) from the expected one.
inline double chi_square_power(double n, int df, double eps, double alpha) {
  return noncentral_chi_square_sf(df, 4.0 * n * eps * eps, chi_square_critical(df, alpha));
}

// The smallest n with chi_square_power(n, df, ε, α) >= power.
inline double samples_for_power(int df, double eps, double alpha, double power) {
  double lo = 1.0, hi = 1.0;
  while (chi_square_power(hi, df, eps, alpha) < power) hi *= 2.0;
  while (hi - lo > 1.0) {
    const double mid = std::floor(0.5 * (lo + hi));
    (chi_square_power(mid, df, eps, alpha) < power ? lo : hi) = mid;
  }
  return hi;
}

// The total variation ε at which the test has exactly the given power.
inline double detectable_tv(double n, int df, double alpha, double power) {
  double lo = 0.0, hi = 1.0;
  for (int it = 0; it < 100; ++it) {
    const double mid = 0.5 * (lo + hi);
    (chi_square_power(n, df, mid, alpha) < power ? lo : hi) = mid;
  }
  return hi;
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
