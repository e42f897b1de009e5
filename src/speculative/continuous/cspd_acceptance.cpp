// Continuous speculative decoding (Continuous SD (Wang et al., 2024)): per-token acceptance and
// residual sampling in log space. See cspd_acceptance.h for the variants and the random-number
// order.
#include "speculative/continuous/cspd_acceptance.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
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
      return log_density_unchecked(x, p.last) - log_density_unchecked(x, q.last);
  }
  throw Error("cspd: unknown variant");
}

std::vector<float> sample_residual_unchecked(Variant v, const ChainRecord& p, const ChainRecord& q,
                                             int max_tries, TokenRandom& rng, int* tries,
                                             bool* fallback) {
  const size_t d = p.last.mean.size();
  const double log_c = residual_log_bound(v, p, q);
  std::vector<float> y(d);
  for (int t = 1; t <= max_tries; ++t) {
    // Proposal y ~ p.last by reparameterisation (Continuous SD §3.3: the proposal is the target
    // distribution).
    for (size_t i = 0; i < d; ++i) {
      const double n = rng.normal();
      if (!std::isfinite(n)) fail("TokenRandom.normal returned a non-finite value");
      y[i] = static_cast<float>(static_cast<double>(p.last.mean[i]) +
                                static_cast<double>(p.last.std[i]) * n);
    }
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

std::vector<float> sample_residual(Variant v, const ChainRecord& p, const ChainRecord& q,
                                   int max_tries, TokenRandom& rng, int* tries, bool* fallback) {
  check_records(v, p, q, p.last.mean.size());
  check_max_tries(max_tries);
  check_random(rng);
  return sample_residual_unchecked(v, p, q, max_tries, rng, tries, fallback);
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
  out.token =
      sample_residual_unchecked(v, p, q, max_tries, rng, &out.resample_tries, &out.fallback);
  return out;
}

}  // namespace tessera::cspd
