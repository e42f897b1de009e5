// The Gaussian diffusion that MAR's DiffLoss samples with: IDDPM betas (cosine or linear) over T
// training steps, respaced to S sampling steps, learned-range variance, no noise at the last
// step, temperature scaling only the noise (LTH14/mar's diffusion/: gaussian_diffusion.py p_sample,
// respace.py). Tables are built in float64 and used in float32, as the reference's
// _extract_into_tensor(...).float().
#pragma once

#include <span>
#include <string>
#include <vector>

#include "sampling/diffusion_math.h"

namespace tessera {

class GaussianDiffusion {
 public:
  // IDDPM's space_timesteps(T, str(S)) respacing of the named base schedule.
  GaussianDiffusion(int train_steps, int sampling_steps, const std::string& schedule);

  int steps() const { return static_cast<int>(timestep_map_.size()); }
  // The network's timestep input for respaced step j (the original index, not j).
  int timestep(int j) const { return timestep_map_[j]; }

  // Step j's coefficients in float32, as every step's arithmetic uses them (diffusion_math.h).
  DiffusionStepCoefficients coefficients(int j) const;
  // Step j's Gaussian p(x_{j-1} | x_j) from the network output: eps [rows, d] and the variance
  // interpolation v [rows, d] (learned range). Writes mean and log variance (no temperature).
  void mean_log_variance(int j, std::span<const float> x, std::span<const float> eps,
                         std::span<const float> v, std::span<float> mean,
                         std::span<float> log_var) const;

  // Tables, float64, indexed by respaced step (tests compare them with the reference).
  const std::vector<int>& timestep_map() const { return timestep_map_; }
  const std::vector<double>& betas() const { return betas_; }
  const std::vector<double>& alphas_cumprod() const { return alphas_cumprod_; }
  const std::vector<double>& posterior_log_variance_clipped() const { return post_log_var_; }
  const std::vector<double>& posterior_mean_coef1() const { return coef1_; }
  const std::vector<double>& posterior_mean_coef2() const { return coef2_; }

 private:
  std::vector<int> timestep_map_;
  std::vector<double> betas_, alphas_cumprod_, post_log_var_, coef1_, coef2_;
  std::vector<double> sqrt_recip_ac_, sqrt_recipm1_ac_, log_betas_;
};

}  // namespace tessera
