// Continuous speculative decoding (CSpD: Continuous SD (Wang et al., 2024)) for MAR's
// diffusion-head tokens: the model-independent per-token math of three variants, all in log space
// with double accumulation (under MAR's cosine 100-step schedule a product of 16 per-dimension
// sigmas of ~0.006 underflows, and the variance-product factor can reach e^±81).
//
// Conventions (Continuous SD §3.1): q is the DRAFT model, p the TARGET model; the draft value x ~ q
// is accepted with probability min(1, r(x)), otherwise a token is drawn from the residual by
// accept-reject: Paper and Reference with the target's test-step Gaussian as proposal (Eq. 10-11)
// and a cap of max_tries (lossy); Exact with a tilted Gaussian proposal and no cap (exact).
//
// - Variant::Paper: Continuous SD §3.2-3.3, Eq. 4-5 and Eq. 11, r = Sigma * p(x|x1^p) / q(x|x1^q)
//   with Sigma = prod_t sqrt|Sigma_t^q| / sqrt|Sigma_t^p| (the draft/target std product over the
//   noisy steps). Not lossless unless Sigma == 1 (output density in docs/methods.md, `cspd`).
// - Variant::Reference: what MarkXCloud/CSpD computes (spec_decode/spec_decode_runner.py,
//   DistributionProcessor.judge_accept and sample_distribution): the inverted factor
//   prod sigma_p/sigma_q and an inner temperature in the acceptance exponent only. Not lossless.
// - Variant::Exact: plain speculative sampling on one Gaussian transition (tessera's own variant,
//   docs/methods.md `cspd-exact`): r = N_p(x)/N_q(x), residual norm(max(0, N_p - N_q)) sampled
//   exactly (ExactResidualPlan). Lossless given the shared upstream noise.
//
// Random numbers are consumed in a fixed order so a counter-based stream gives reproducible
// tokens: decide() draws one uniform for the test; each residual try draws d normals (one per
// dimension, in order) and then one uniform, whether or not the try can succeed.
#pragma once

#include <functional>
#include <span>
#include <vector>

namespace tessera::cspd {

// A diagonal Gaussian over one d-dim token: N(mean, diag(std^2)). std already includes MAR's
// temperature.
struct DiagGaussian {
  std::span<const float> mean;
  std::span<const float> std;
};

// Full normalised log pdf: -d/2 log(2 pi) - sum_i log std_i - 1/2 sum_i ((x_i - mean_i)/std_i)^2,
// accumulated in double. Throws tessera::Error on size mismatch, non-finite values or std <= 0.
double log_density(std::span<const float> x, const DiagGaussian& g);

// Randomness supplied by the caller (counter-based streams in the engine; deterministic per token).
struct TokenRandom {
  std::function<double()> uniform;  // U[0,1)
  std::function<double()> normal;   // N(0,1)
};

enum class Variant { Paper, Reference, Exact };

// What the draft and target chains recorded for one token (per model, one guided chain; as
// CSpD's DistributionManager in diffusion/diffusion_utils.py).
struct ChainRecord {
  // The test-step Gaussian: for Paper/Reference the last step j=0 (mean mu_0, std
  // sigma_0*temperature); for Exact the transition at the test step t*.
  DiagGaussian last;
  // [d] sum over the noisy steps j=1..J-1 of log sigma_j (no temperature). Paper/Reference only;
  // may be empty for Exact (ignored there).
  std::span<const double> sum_log_std;
};

struct Decision {
  bool accepted;             // the draft value x was kept (token == x)
  std::vector<float> token;  // x, a residual sample, or mu_p after a fallback
  int resample_tries;        // residual proposals drawn (0 when accepted)
  bool fallback;             // Paper/Reference gave up after max_tries: token == mu_p (never Exact)
  double log_ratio;          // log r(x) of the variant (may be > 0; acceptance uses min(0, .))
};

// Paper (Continuous SD Eq. 4-5): log r = log Sigma + log p(x|x1^p) - log q(x|x1^q),
// log Sigma = sum_d (sum_log_std_q - sum_log_std_p).
double log_ratio_paper(std::span<const float> x, const ChainRecord& p, const ChainRecord& q);

// Reference code (CSpD's judge_accept): log r = sum_d (L_p - L_q) + sum_d log s_q - sum_d log s_p
//   - 1/2 ||(x - mu_p)/(s_p T_in)||^2 + 1/2 ||(x - mu_q)/(s_q T_in)||^2,
// with L = sum_log_std, s = last.std and T_in = inner_temperature (> 0; the code uses 42).
double log_ratio_reference(std::span<const float> x, const ChainRecord& p, const ChainRecord& q,
                           double inner_temperature);

// Exact (docs/methods.md `cspd-exact`): log N_p(x) - log N_q(x) on the test-step transition only
// (no variance-product factor).
double log_ratio_exact(std::span<const float> x, const ChainRecord& p, const ChainRecord& q);

// log of the accept-reject constant c of the residual q(y) / (c p(y)) for a variant:
// Paper log Sigma = sum_d (L_q - L_p); Reference sum_d (L_p - L_q) (the code's inverted factor,
// CSpD's sample_distribution); Exact 0.
double residual_log_bound(Variant v, const ChainRecord& p, const ChainRecord& q);

// Exact's residual sampler (docs/methods.md `cspd-exact`). In the target's whitened coordinates
// z = (y - mu_p) / s_p,
//   l(z) = log N_q(y) - log N_p(y) = sum_i a_i z_i^2 + b_i z_i + c_i,
//   a = (1 - rho^2) / 2, b = -rho delta, c = log rho - delta^2 / 2,
//   rho = s_p / s_q, delta = (mu_p - mu_q) / s_q (per dimension),
// and the residual is phi(z) max(0, 1 - e^l) / tau, tau = TV(N_p, N_q). The proposal is phi(z)
// e^(-theta l(z)) normalised, the diagonal Gaussian N(mean, diag(sd^2)) below, and a try is
// accepted with probability (1 - e^l) e^(theta l) / K(theta), K = max_{l<0} (1 - e^l) e^(theta l).
// The per-try acceptance is tau / B, B = e^log_bound >= tau; theta minimises B (theta = 0 is
// Continuous SD Eq. 10, B = 1). Expected tries: B / tau per residual call (at most 1 / tau) and
// B <= 1 per decide() call (a rejection has probability tau).
struct ExactResidualPlan {
  double theta = 0.0;      // tilt in [0, theta_max); theta_max = min over a_i < 0 of -1/(2 a_i)
  double log_k = 0.0;      // log K(theta)
  double log_bound = 0.0;  // log B(theta) = log K(theta) + log E_phi[e^(-theta l)] <= 0
  bool empty = false;      // min_z l >= 0: N_p <= N_q everywhere (equal up to rounding)
  std::vector<double> mean, sd;  // the proposal in z, per dimension
};
ExactResidualPlan exact_residual_plan(const DiagGaussian& p, const DiagGaussian& q);

// Residual sampling by accept-reject (Continuous SD §3.3, Eq. 7-11); y is rounded to float and
// the returned value is the tested value. tries and fallback may be null.
// - Paper / Reference: proposal p.last, y = mu_p + s_p * normal(); alpha = max(0, 1 - q(y) /
//   (c p(y))) in log space; accept y when uniform() < alpha. The accepted y has density
//   proportional to max(0, c p - q). After max_tries (>= 1) failures: *fallback = true and the
//   token is mu_p. (The published code's sample_distribution returns a zero latent vector here;
//   we never do.)
// - Exact: the tilted proposal of ExactResidualPlan, y = mu_p + s_p * (mean + sd * normal()), with
//   no cap: max_tries is ignored and *fallback is always false. If the residual is empty (TV = 0)
//   the first proposal is returned (a draw from p; decide() gets here only by rounding).
std::vector<float> sample_residual(Variant v, const ChainRecord& p, const ChainRecord& q,
                                   int max_tries, TokenRandom& rng, int* tries, bool* fallback);

// One token: test the draft value x (accept iff uniform() < exp(min(0, log_ratio))), else
// resample from the residual of the same variant. inner_temperature is used (and validated) by
// Variant::Reference only; note that, as in the published code, it does not enter the residual.
// max_tries is validated for every variant but used by Paper and Reference only.
Decision decide(Variant v, std::span<const float> x, const ChainRecord& p, const ChainRecord& q,
                double inner_temperature, int max_tries, TokenRandom& rng);

}  // namespace tessera::cspd
