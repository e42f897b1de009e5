// MAR sampling (MAR.sample_tokens in LTH14/mar's models/mar.py, DiffLoss in models/diffloss.py):
// a random order per image, the MaskGIT cosine schedule of tokens per step, classifier-free
// guidance with the linear or constant schedule, and per token a guided diffusion chain of the
// DiffLoss head. The noise of a token depends only on (seed, image, position, diffusion step), so
// every model that generates a position shares its denoising trajectory (the trajectory alignment
// of Continuous SD (Wang et al., 2024) §3.2) and results do not depend on batch composition.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "models/mar.h"
#include "sampling/diffusion_rows.h"
#include "sampling/gaussian_diffusion.h"
#include "tessera/mar.h"

namespace tessera {

// The randomness of a MAR generation. The default draws from Philox streams; tests inject arrays.
class MarNoise {
 public:
  virtual ~MarNoise() = default;
  virtual std::vector<int32_t> order(int image, int seq_len) const = 0;         // a permutation
  virtual void start(int image, int position, std::span<float> out) const = 0;  // x_T
  virtual void step(int image, int position, int j, std::span<float> out) const = 0;  // eps_j
  // Uniforms and normals for verification (acceptance tests, residual sampling), by purpose.
  virtual double uniform(int image, int position, uint32_t purpose, uint32_t k) const = 0;
  virtual double normal(int image, int position, uint32_t purpose, uint32_t k) const = 0;
};

class PhiloxMarNoise final : public MarNoise {
 public:
  PhiloxMarNoise(uint64_t seed, std::vector<uint64_t> image_indices)
      : seed_(seed), images_(std::move(image_indices)) {}
  std::vector<int32_t> order(int image, int seq_len) const override;
  void start(int image, int position, std::span<float> out) const override;
  void step(int image, int position, int j, std::span<float> out) const override;
  double uniform(int image, int position, uint32_t purpose, uint32_t k) const override;
  double normal(int image, int position, uint32_t purpose, uint32_t k) const override;
  uint64_t seed() const { return seed_; }
  uint64_t image_index(int image) const { return images_.at(image); }

 private:
  void normals(int image, int position, uint32_t stream, std::span<float> out) const;
  uint64_t seed_;
  std::vector<uint64_t> images_;
};

// Tokens that stay masked after each step (MaskGIT cosine, clamped to [1, remaining - 1]);
// entry s is the reference's mask_len after step s (the last step predicts all that remain).
std::vector<int> mask_lengths(int seq_len, int num_iter);
// The guidance scale of step s given the mask length after it (linear: 1 + (cfg-1)(L-len)/L).
float cfg_at_step(const MarSamplingOptions& s, int seq_len, int mask_len_after);

// N guided diffusion chains of one DiffLoss head, advanced step by step (CFG as MAR's
// models/diffloss.py forward_with_cfg: the net runs on [x; x] with [cond; uncond] conditions; eps
// is guided, v comes from the conditional half).
class DiffusionChains {
 public:
  // z_cond / z_uncond: MAE outputs [N, D] (z_uncond undefined when not guided).
  DiffusionChains(const DiffusionHead& head, const GaussianDiffusion& diffusion, Backend& backend,
                  const Tensor& z_cond, const Tensor* z_uncond, float cfg, float temperature);
  int rows() const { return n_; }
  int dim() const { return d_; }
  std::vector<float>& x() { return x_; }  // current state [N, d]
  // Evaluates step j's Gaussian from the current state into mean() / log_var() (no update).
  void gaussian(int j);
  const std::vector<float>& mean() const { return mean_; }
  const std::vector<float>& log_var() const { return log_var_; }
  // x = mean + [j != 0] * exp(log_var / 2) * temperature * eps_j, eps(row, out) supplying eps_j.
  void advance(int j, const std::function<void(int row, std::span<float>)>& eps);
  // Steps from..to (descending, inclusive): gaussian + advance, accumulating sum_log_std() over
  // the noisy steps (j >= 1) run.
  void run(int from, int to, const std::function<void(int row, int j, std::span<float>)>& eps);
  const std::vector<double>& sum_log_std() const { return sum_log_std_; }  // [N, d], no temperature
  float temperature() const { return temperature_; }
  int64_t net_rows() const { return net_rows_; }
  // The device loop (issue 42, item 4): from now on run() steps the chains where the head's
  // outputs are (diffusion_step_rows), drawing each row's noise from MAR's Philox streams (seed,
  // rows[r]) as PhiloxMarNoise::step does, whatever eps run() is given; the state goes up at
  // run()'s start and comes back at its end, so the host accessors and gaussian()/advance() see
  // it as before.
  void use_device(uint64_t seed, std::vector<DiffusionRowNoise> rows);
  bool on_device() const { return device_; }

 private:
  const DiffusionHead& head_;
  const GaussianDiffusion& diffusion_;
  Backend& backend_;
  int n_ = 0, d_ = 0;
  bool guided_ = false;
  float cfg_ = 1.0f, temperature_ = 1.0f;
  Tensor cond_;  // embedded conditions [N or 2N, W]
  // AdaLN modulations of steps mod_hi_ down to mod_lo_ (DiffusionHead::modulations).
  DiffusionHead::Modulations mod_;
  int mod_hi_ = -1, mod_lo_ = 0;
  void prepare_modulations(int from, int to);
  bool has_modulations(int j) const { return j <= mod_hi_ && j >= mod_lo_; }
  std::vector<float> x_, mean_, log_var_;
  std::vector<double> sum_log_std_;
  int64_t net_rows_ = 0;
  bool device_ = false;
  uint64_t seed_ = 0;
  std::vector<DiffusionRowNoise> noise_rows_;
  void run_on_device(int from, int to);
};

// The canvas of a batch of images being generated by MAR.
struct MarCanvas {
  int images = 0, seq_len = 0, token_dim = 0;
  std::vector<int> labels;
  std::vector<std::vector<int32_t>> orders;
  std::vector<float> tokens;     // [images, L, d]
  std::vector<uint8_t> unknown;  // [images, L], 1 = not generated yet
  int masked() const;            // unknown count of one image (equal across images)
  // Positions that step s predicts (order[mask_len_after:mask_len_before], or all remaining).
  std::vector<std::vector<int32_t>> step_positions(int mask_len_after, bool last) const;
  // Writes token x (token_dim values) at (image, position) and marks it known.
  void write(int image, int position, const float* x);
};

// One MAR step of `model` on the canvas: the MAE forward (doubled for guidance) on `visible`
// (the canvas whose unknown flags the model sees; normally the canvas itself), and the diffusion
// chains of the predicted positions. Returns the chains after `stop_step` (0: complete tokens).
struct MarStepResult {
  std::unique_ptr<DiffusionChains> chains;
  std::vector<std::pair<int, int>> rows;  // (image, position) of each chain row
  double transformer_seconds = 0.0, head_seconds = 0.0;
  // Row r's noise at diffusion step j (the shared trajectory of its position).
  void step_noise(const MarNoise& noise, int row, int j, std::span<float> out) const {
    noise.step(rows[row].first, rows[row].second, j, out);
  }
};
MarStepResult mar_step(const Mar& model, const GaussianDiffusion& diffusion, Backend& backend,
                       const MarCanvas& visible, const std::vector<std::vector<int32_t>>& predict,
                       float cfg, float temperature, const MarNoise& noise, int stop_step = 0,
                       DeviceLoop where = DeviceLoop::Auto);

// One complete MAR step of the target alone: writes the predicted tokens into the canvas and
// counts the pass in stats. Returns the number of tokens written.
int64_t mar_target_step(const Mar& model, const GaussianDiffusion& diffusion, Backend& backend,
                        MarCanvas& canvas, const std::vector<std::vector<int32_t>>& predict,
                        float cfg, float temperature, const MarNoise& noise, MarStats& stats,
                        DeviceLoop where = DeviceLoop::Auto);

// MAR.sample_tokens for every label with the target alone.
std::vector<std::vector<float>> mar_generate(const Mar& model, const GaussianDiffusion& diffusion,
                                             Backend& backend, const std::vector<int>& labels,
                                             const MarSamplingOptions& sampling,
                                             const MarNoise& noise,
                                             const std::function<void(int64_t)>& on_tokens,
                                             MarStats& stats);

MarCanvas new_canvas(const MarConfig& c, const std::vector<int>& labels, const MarNoise& noise);

}  // namespace tessera
