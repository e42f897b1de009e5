// Continuous speculative decoding (Continuous SD (Wang et al., 2024)): per-token acceptance and
// residual sampling in log space. See cspd_acceptance.h for the variants and the random-number
// order.
#include "speculative/continuous/cspd_acceptance.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numbers>
#include <string>

#include "tessera/error.h"

namespace tessera::cspd {
namespace {

// Validation builds its message only on failure: these run for every token in the engine.
[[noreturn]] void fail(const std::string& msg) {
  throw Error("cspd: " + msg);
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string at(const std::string& what, size_t i) {
  return what + "[" + std::to_string(i) + "]";
}

[[noreturn]] void fail_size(size_t got, size_t d, const std::string& what) {
  fail(what + " has " + std::to_string(got) + " values, expected " + std::to_string(d));
}

void check_values(std::span<const float> v, size_t d, const char* what) {
  if (v.size() != d) fail_size(v.size(), d, what);
  for (size_t i = 0; i < d; ++i)
    if (!std::isfinite(v[i])) fail(at(what, i) + " is not finite");
}

void check_gaussian(const DiagGaussian& g, size_t d, const char* what) {
  if (g.mean.size() != d) fail_size(g.mean.size(), d, std::string(what) + ".mean");
  if (g.std.size() != d) fail_size(g.std.size(), d, std::string(what) + ".std");
  for (size_t i = 0; i < d; ++i) {
    if (!std::isfinite(g.mean[i])) fail(at(std::string(what) + ".mean", i) + " is not finite");
    if (!std::isfinite(g.std[i])) fail(at(std::string(what) + ".std", i) + " is not finite");
    if (!(g.std[i] > 0.0f))
      fail(at(std::string(what) + ".std", i) + " = " + num(g.std[i]) + " must be > 0");
  }
}

// Validates both records for token dimension d; the variance sums only where the variant uses them.
void check_records(Variant v, const ChainRecord& p, const ChainRecord& q, size_t d) {
  if (d == 0) fail("empty token (target mean has 0 values)");
  check_gaussian(p.last, d, "target.last");
  check_gaussian(q.last, d, "draft.last");
  if (v == Variant::Exact) return;
  for (const auto& [r, name] : {std::pair{&p, "target"}, std::pair{&q, "draft"}}) {
    const std::span<const double> sums = r->sum_log_std;
    if (sums.size() != d) fail_size(sums.size(), d, std::string(name) + ".sum_log_std");
    for (size_t i = 0; i < d; ++i)
      if (!std::isfinite(sums[i]))
        fail(at(std::string(name) + ".sum_log_std", i) + " is not finite");
  }
}

void check_inner_temperature(double t) {
  if (!(std::isfinite(t) && t > 0.0)) fail("inner_temperature = " + num(t) + " must be > 0");
}

void check_max_tries(int max_tries) {
  if (max_tries < 1) fail("max_tries = " + std::to_string(max_tries) + " must be >= 1");
}

void check_random(const TokenRandom& rng) {
  if (!rng.uniform || !rng.normal) fail("TokenRandom needs both uniform and normal");
}

// log N(x; mean, diag(std^2)), double accumulation; inputs already validated.
double log_density_unchecked(std::span<const float> x, const DiagGaussian& g) {
  const double half_log_2pi = 0.5 * std::log(2.0 * std::numbers::pi);
  double acc = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double s = g.std[i];
    const double z = (static_cast<double>(x[i]) - static_cast<double>(g.mean[i])) / s;
    acc -= 0.5 * z * z + std::log(s) + half_log_2pi;
  }
  return acc;
}

double checked_normal(TokenRandom& rng) {
  const double n = rng.normal();
  if (!std::isfinite(n)) fail("TokenRandom.normal returned a non-finite value");
  return n;
}

// l(y) = log N_q(y) - log N_p(y), per dimension (1/2)(z_p - z_q)(z_p + z_q) + log(s_p / s_q): the
// one function of y that both Exact's acceptance test (log r = -l) and its residual sampler use.
double log_q_over_p(std::span<const float> y, const DiagGaussian& p, const DiagGaussian& q) {
  double acc = 0.0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double sp = p.std[i], sq = q.std[i], yi = y[i];
    const double zp = (yi - static_cast<double>(p.mean[i])) / sp;
    const double zq = (yi - static_cast<double>(q.mean[i])) / sq;
    acc += 0.5 * (zp - zq) * (zp + zq) + std::log1p((sp - sq) / sq);
  }
  return acc;
}

// log Sigma of Continuous SD Eq. 4: sum over dims and noisy steps of log sigma_q - log sigma_p.
double log_sigma_paper(const ChainRecord& p, const ChainRecord& q) {
  double acc = 0.0;
  for (size_t i = 0; i < p.sum_log_std.size(); ++i) acc += q.sum_log_std[i] - p.sum_log_std[i];
  return acc;
}

double log_ratio_unchecked(Variant v, std::span<const float> x, const ChainRecord& p,
                           const ChainRecord& q, double inner_temperature) {
  switch (v) {
    case Variant::Paper:
      // Continuous SD Eq. 5 (Appendix A.1, Eq. 18-20): the aligned intermediate transitions leave
      // only Sigma times the last-step density ratio.
      return log_sigma_paper(p, q) + log_density_unchecked(x, p.last) -
             log_density_unchecked(x, q.last);
    case Variant::Reference: {
      // CSpD's judge_accept: fixed_term = prod sigma_p/sigma_q (the inverse of Eq. 4's Sigma);
      // normalisers prod s_q / prod s_p; T_in only in the exponents (not in the paper).
      double acc = -log_sigma_paper(p, q);
      for (size_t i = 0; i < x.size(); ++i) {
        const double sp = p.last.std[i], sq = q.last.std[i], xi = x[i];
        const double zp = (xi - static_cast<double>(p.last.mean[i])) / (sp * inner_temperature);
        const double zq = (xi - static_cast<double>(q.last.mean[i])) / (sq * inner_temperature);
        acc += std::log(sq) - std::log(sp) - 0.5 * zp * zp + 0.5 * zq * zq;
      }
      return acc;
    }
    case Variant::Exact:
      // tessera's exact variant: standard speculative sampling on the single test-step transition.
      return -log_q_over_p(x, p.last, q.last);
  }
  throw Error("cspd: unknown variant");
}

// The tilted proposal of Exact's residual sampler (ExactResidualPlan in the header). theta
// minimises the bound B(theta) = K(theta) M(theta), M(theta) = E_phi[e^(-theta l)] (closed form
// for a separable quadratic l), so the per-try acceptance tau / B is as high as this family
// allows. log B is convex (log K and the cumulant generating function log M both are), so its
// minimiser is the root of the increasing derivative, found by bisection. The value of theta only
// affects the cost, never the distribution: any theta in [0, theta_max) gives an exact sampler.
ExactResidualPlan plan_exact_residual(const DiagGaussian& p, const DiagGaussian& q) {
  const size_t d = p.mean.size();
  std::vector<double> a(d), b(d), c(d);
  double l_min = 0.0, theta_max = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < d; ++i) {
    const double sp = p.std[i], sq = q.std[i];
    const double rho = sp / sq;
    const double delta = (static_cast<double>(p.mean[i]) - static_cast<double>(q.mean[i])) / sq;
    a[i] = 0.5 * (sq - sp) * (sq + sp) / (sq * sq);  // (1 - rho^2)/2 without cancellation
    b[i] = -rho * delta;
    c[i] = std::log1p((sp - sq) / sq) - 0.5 * delta * delta;
    if (a[i] < 0.0) theta_max = std::min(theta_max, -0.5 / a[i]);
    // min over z of a z^2 + b z + c (-inf when the quadratic is unbounded below)
    if (a[i] > 0.0)
      l_min += c[i] - b[i] * b[i] / (4.0 * a[i]);
    else if (a[i] == 0.0 && b[i] == 0.0)
      l_min += c[i];
    else
      l_min = -std::numeric_limits<double>::infinity();
  }
  ExactResidualPlan plan;
  plan.empty = l_min >= 0.0;
  // log K(theta) = log max_{l<0} (1 - e^l) e^(theta l) = theta log theta - (1 + theta) log(1 +
  // theta).
  auto log_k = [](double t) { return t == 0.0 ? 0.0 : -std::log1p(t) - t * std::log1p(1.0 / t); };
  auto log_m = [&](double t) {
    double acc = 0.0;
    for (size_t i = 0; i < d; ++i) {
      const double lam = 1.0 + 2.0 * t * a[i];
      acc += -t * c[i] - 0.5 * std::log(lam) + t * t * b[i] * b[i] / (2.0 * lam);
    }
    return acc;
  };
  // d/dtheta log B: log(theta / (1 + theta)) + E_tilted[-l]; -inf at 0+, increasing.
  auto slope = [&](double t) {
    double acc = -std::log1p(1.0 / t);
    for (size_t i = 0; i < d; ++i) {
      const double lam = 1.0 + 2.0 * t * a[i];
      if (!(lam > 0.0)) return std::numeric_limits<double>::infinity();
      acc += -c[i] - a[i] / lam + t * b[i] * b[i] * (1.0 + t * a[i]) / (lam * lam);
    }
    return acc;
  };
  double theta = 0.0;
  if (!plan.empty) {
    double lo = 0.0, hi = theta_max;
    if (!std::isfinite(hi)) {  // bracket the root by doubling (it exists when l_min < 0)
      hi = 1.0;
      while (slope(hi) < 0.0 && hi < 1e300) lo = hi, hi *= 2.0;
    }
    for (int it = 0; it < 200 && lo < hi; ++it) {
      const double mid = 0.5 * (lo + hi);
      if (mid <= lo || mid >= hi) break;
      (slope(mid) < 0.0 ? lo : hi) = mid;
    }
    theta = lo;  // left of the root: strictly inside [0, theta_max)
  }
  double log_bound = log_k(theta) + log_m(theta);
  if (!(log_bound <= 0.0)) theta = 0.0, log_bound = 0.0;  // never worse than Eq. 10's proposal
  plan.theta = theta;
  plan.log_k = log_k(theta);
  plan.log_bound = log_bound;
  plan.mean.resize(d);
  plan.sd.resize(d);
  for (size_t i = 0; i < d; ++i) {
    const double lam = 1.0 + 2.0 * theta * a[i];
    plan.mean[i] = -theta * b[i] / lam;
    plan.sd[i] = 1.0 / std::sqrt(lam);
  }
  return plan;
}

// Plain accept-reject with proposal p.last (Paper and Reference): Continuous SD §3.3, Eq. 10-11.
// Lossy after max_tries: the token is mu_p and *fallback is set (counted in MarStats::fallbacks).
std::vector<float> sample_residual_capped(Variant v, const ChainRecord& p, const ChainRecord& q,
                                          int max_tries, TokenRandom& rng, int* tries,
                                          bool* fallback) {
  const size_t d = p.last.mean.size();
  const double log_c = residual_log_bound(v, p, q);
  std::vector<float> y(d);
  for (int t = 1; t <= max_tries; ++t) {
    // Proposal y ~ p.last by reparameterisation (Continuous SD §3.3: the proposal is the target
    // distribution).
    for (size_t i = 0; i < d; ++i)
      y[i] = static_cast<float>(static_cast<double>(p.last.mean[i]) +
                                static_cast<double>(p.last.std[i]) * checked_normal(rng));
    // Continuous SD Eq. 10-11 with M = 1/Z: alpha = max(0, c p(y) - q(y)) / (c p(y))
    // = max(0, 1 - exp(log q(y) - log c - log p(y))); -expm1 keeps small alphas accurate.
    const double log_t =
        log_density_unchecked(y, q.last) - log_c - log_density_unchecked(y, p.last);
    const double alpha = log_t >= 0.0 ? 0.0 : -std::expm1(log_t);
    if (rng.uniform() < alpha) {
      if (tries) *tries = t;
      if (fallback) *fallback = false;
      return y;
    }
  }
  // Give up: the target's mean (the token target-only MAR would emit at j=0), never zeros.
  if (tries) *tries = max_tries;
  if (fallback) *fallback = true;
  return {p.last.mean.begin(), p.last.mean.end()};
}

// Variant::Exact: an exact sampler of norm(max(0, N_p - N_q)) with no cap (docs/methods.md,
// `cspd-exact`). In p's whitened coordinates z = (y - mu_p) / s_p the residual is
// phi(z) max(0, 1 - e^l(z)) / tau with l = log N_q - log N_p separable (ExactResidualPlan). The
// proposal is phi tilted by e^(-theta l), again a diagonal Gaussian, and a try is accepted with
// probability (1 - e^l) e^(theta l) / K(theta) <= 1 (l < 0); the accepted z has density
// proportional to phi max(0, 1 - e^l), whatever theta is. theta = 0 is Continuous SD's Eq. 10.
std::vector<float> sample_residual_exact(const ChainRecord& p, const ChainRecord& q,
                                         TokenRandom& rng, int* tries) {
  const size_t d = p.last.mean.size();
  const ExactResidualPlan plan = plan_exact_residual(p.last, q.last);
  std::vector<float> y(d);
  for (int t = 1;; ++t) {
    for (size_t i = 0; i < d; ++i) {
      const double z = plan.mean[i] + plan.sd[i] * checked_normal(rng);
      y[i] = static_cast<float>(static_cast<double>(p.last.mean[i]) +
                                static_cast<double>(p.last.std[i]) * z);
    }
    const double u = rng.uniform();
    // TV = 0 (N_p <= N_q everywhere, so N_p == N_q up to rounding): no residual exists and any
    // draw from N_p keeps the output N_p; decide() reaches this only through rounding.
    if (plan.empty) {
      if (tries) *tries = t;
      return y;
    }
    const double l = log_q_over_p(y, p.last, q.last);  // at the returned (float) value
    if (l < 0.0) {
      const double log_accept =
          std::min(0.0, std::log(-std::expm1(l)) + plan.theta * l - plan.log_k);
      if (u < std::exp(log_accept)) {
        if (tries) *tries = t;
        return y;
      }
    }
  }
}

}  // namespace

double log_density(std::span<const float> x, const DiagGaussian& g) {
  check_values(x, g.mean.size(), "x");
  check_gaussian(g, x.size(), "gaussian");
  return log_density_unchecked(x, g);
}

double log_ratio_paper(std::span<const float> x, const ChainRecord& p, const ChainRecord& q) {
  check_records(Variant::Paper, p, q, p.last.mean.size());
  check_values(x, p.last.mean.size(), "x");
  return log_ratio_unchecked(Variant::Paper, x, p, q, 1.0);
}

double log_ratio_reference(std::span<const float> x, const ChainRecord& p, const ChainRecord& q,
                           double inner_temperature) {
  check_records(Variant::Reference, p, q, p.last.mean.size());
  check_values(x, p.last.mean.size(), "x");
  check_inner_temperature(inner_temperature);
  return log_ratio_unchecked(Variant::Reference, x, p, q, inner_temperature);
}

double log_ratio_exact(std::span<const float> x, const ChainRecord& p, const ChainRecord& q) {
  check_records(Variant::Exact, p, q, p.last.mean.size());
  check_values(x, p.last.mean.size(), "x");
  return log_ratio_unchecked(Variant::Exact, x, p, q, 1.0);
}

double residual_log_bound(Variant v, const ChainRecord& p, const ChainRecord& q) {
  switch (v) {
    case Variant::Paper:
      return log_sigma_paper(p, q);  // Continuous SD Eq. 11: c = Sigma
    case Variant::Reference:
      return -log_sigma_paper(p, q);  // sample_distribution: N_q / fixed_term, fixed_term = 1/Sigma
    case Variant::Exact:
      return 0.0;  // plain residual, Continuous SD Eq. 10
  }
  throw Error("cspd: unknown variant");
}

ExactResidualPlan exact_residual_plan(const DiagGaussian& p, const DiagGaussian& q) {
  check_gaussian(p, p.mean.size(), "target");
  check_gaussian(q, p.mean.size(), "draft");
  if (p.mean.empty()) fail("empty token (target mean has 0 values)");
  return plan_exact_residual(p, q);
}

std::vector<float> sample_residual(Variant v, const ChainRecord& p, const ChainRecord& q,
                                   int max_tries, TokenRandom& rng, int* tries, bool* fallback) {
  check_records(v, p, q, p.last.mean.size());
  check_max_tries(max_tries);
  check_random(rng);
  if (v == Variant::Exact) {
    if (fallback) *fallback = false;
    return sample_residual_exact(p, q, rng, tries);
  }
  return sample_residual_capped(v, p, q, max_tries, rng, tries, fallback);
}

Decision decide(Variant v, std::span<const float> x, const ChainRecord& p, const ChainRecord& q,
                double inner_temperature, int max_tries, TokenRandom& rng) {
  check_records(v, p, q, p.last.mean.size());
  check_values(x, p.last.mean.size(), "x");
  if (v == Variant::Reference) check_inner_temperature(inner_temperature);
  check_max_tries(max_tries);
  check_random(rng);

  Decision out{false, {}, 0, false, log_ratio_unchecked(v, x, p, q, inner_temperature)};
  // Continuous SD §3.2 / Algorithm 1 (App. A.3): accept with probability min(1, r);
  // exp(min(0, log r)) never overflows.
  if (rng.uniform() < std::exp(std::min(0.0, out.log_ratio))) {
    out.accepted = true;
    out.token.assign(x.begin(), x.end());
    return out;
  }
  out.token = v == Variant::Exact ? sample_residual_exact(p, q, rng, &out.resample_tries)
                                  : sample_residual_capped(v, p, q, max_tries, rng,
                                                           &out.resample_tries, &out.fallback);
  return out;
}

}  // namespace tessera::cspd
