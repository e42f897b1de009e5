#include "sampling/gaussian_diffusion.h"

#include <cmath>

#include "tessera/error.h"

namespace tessera {

namespace {

std::vector<double> base_betas(int T, const std::string& schedule) {
  std::vector<double> betas(T);
  if (schedule == "cosine") {
    // IDDPM betas_for_alpha_bar with alpha_bar(t) = cos^2((t + 0.008) / 1.008 * pi / 2), max 0.999.
    auto alpha_bar = [](double t) {
      const double c = std::cos((t + 0.008) / 1.008 * M_PI / 2.0);
      return c * c;
    };
    for (int i = 0; i < T; ++i)
      betas[i] = std::min(
          1.0 - alpha_bar(static_cast<double>(i + 1) / T) / alpha_bar(static_cast<double>(i) / T),
          0.999);
  } else if (schedule == "linear") {
    // IDDPM's linear schedule, scaled to T steps (np.linspace in float64).
    const double scale = 1000.0 / T, b0 = scale * 0.0001, b1 = scale * 0.02;
    for (int i = 0; i < T; ++i)
      betas[i] = T == 1 ? b0 : b0 + (b1 - b0) * static_cast<double>(i) / (T - 1);
  } else {
    throw Error("unknown noise schedule \"" + schedule + "\" (cosine or linear)");
  }
  return betas;
}

}  // namespace

GaussianDiffusion::GaussianDiffusion(int T, int S, const std::string& schedule) {
  check(T > 0 && S > 0 && S <= T, "diffusion: need 0 < sampling steps <= training steps");
  const std::vector<double> base = base_betas(T, schedule);
  std::vector<double> base_ac(T);
  double ac = 1.0;
  for (int i = 0; i < T; ++i) base_ac[i] = (ac *= 1.0 - base[i]);

  // space_timesteps(T, "S"): round(k * (T-1)/(S-1)) accumulated by repeated addition, round
  // half to even as Python's round().
  std::vector<char> keep(T, 0);
  const double stride = S > 1 ? static_cast<double>(T - 1) / (S - 1) : 0.0;
  double cur = 0.0;
  for (int k = 0; k < S; ++k) {
    keep[static_cast<int>(std::nearbyint(cur))] = 1;
    cur += stride;
  }
  double last = 1.0;
  for (int i = 0; i < T; ++i)
    if (keep[i]) {
      betas_.push_back(1.0 - base_ac[i] / last);
      last = base_ac[i];
      timestep_map_.push_back(i);
    }
  check(steps() == S, "diffusion: respacing produced " + std::to_string(steps()) + " steps, not " +
                          std::to_string(S));

  // GaussianDiffusion.__init__ on the respaced betas.
  const int n = steps();
  alphas_cumprod_.resize(n);
  ac = 1.0;
  for (int j = 0; j < n; ++j) alphas_cumprod_[j] = (ac *= 1.0 - betas_[j]);
  std::vector<double> post_var(n);
  coef1_.resize(n);
  coef2_.resize(n);
  sqrt_recip_ac_.resize(n);
  sqrt_recipm1_ac_.resize(n);
  log_betas_.resize(n);
  for (int j = 0; j < n; ++j) {
    const double a = alphas_cumprod_[j], a_prev = j ? alphas_cumprod_[j - 1] : 1.0;
    post_var[j] = betas_[j] * (1.0 - a_prev) / (1.0 - a);
    coef1_[j] = betas_[j] * std::sqrt(a_prev) / (1.0 - a);
    coef2_[j] = (1.0 - a_prev) * std::sqrt(1.0 - betas_[j]) / (1.0 - a);
    sqrt_recip_ac_[j] = std::sqrt(1.0 / a);
    sqrt_recipm1_ac_[j] = std::sqrt(1.0 / a - 1.0);
    log_betas_[j] = std::log(betas_[j]);
  }
  // The posterior variance is 0 at j = 0; the clipped log uses j = 1's value there.
  post_log_var_.resize(n);
  for (int j = 0; j < n; ++j)
    post_log_var_[j] = std::log(n > 1 && j == 0 ? post_var[1] : post_var[j]);
}

DiffusionStepCoefficients GaussianDiffusion::coefficients(int j) const {
  DiffusionStepCoefficients c;
  c.sqrt_recip_ac = static_cast<float>(sqrt_recip_ac_[j]);
  c.sqrt_recipm1_ac = static_cast<float>(sqrt_recipm1_ac_[j]);
  c.coef1 = static_cast<float>(coef1_[j]);
  c.coef2 = static_cast<float>(coef2_[j]);
  c.min_log = static_cast<float>(post_log_var_[j]);
  c.max_log = static_cast<float>(log_betas_[j]);
  return c;
}

void GaussianDiffusion::mean_log_variance(int j, std::span<const float> x,
                                          std::span<const float> eps, std::span<const float> v,
                                          std::span<float> mean, std::span<float> log_var) const {
  const DiffusionStepCoefficients c = coefficients(j);
  for (size_t i = 0; i < x.size(); ++i)
    diffusion_gaussian(c, x[i], eps[i], v[i], &mean[i], &log_var[i]);
}

}  // namespace tessera
