// MAR's DiffLoss denoiser, SimpleMLPAdaLN (LTH14/mar's models/diffloss.py): the input
// projection of the noisy token, a timestep embedding plus a condition embedding of the MAE output
// z, AdaLN residual MLP blocks, and a final AdaLN layer producing [eps (d), v (d)].
#pragma once

#include <span>
#include <string>
#include <vector>

#include "models/weights.h"
#include "tensor/backend.h"
#include "tessera/config.h"

namespace tessera {

class DiffusionHead {
 public:
  DiffusionHead(const MarConfig& config, WeightLoader& w, Backend& backend);

  int width() const { return width_; }
  int token_dim() const { return token_dim_; }
  int depth() const { return static_cast<int>(blocks_.size()); }
  // cond_embed(z): [rows, D] -> [rows, W]. Constant along a chain, so computed once per chain.
  Tensor embed_condition(const Tensor& z) const;
  // The AdaLN modulations (shift, scale, gate of every block; shift, scale of the final layer)
  // depend on the embedded condition and the timestep, not on the chain state x_t. So they are
  // computed for many timesteps at once, one pass over the adaLN weights (60% of the head's
  // weights) for all of them instead of one per diffusion step. Rows [s*R, (s+1)*R) of each
  // tensor belong to timesteps[s], R = rows of the condition.
  struct Modulations {
    int64_t rows = 0;
    int steps = 0;
    std::vector<Tensor> shift, scale, gate;  // one [steps * R, W] per block
    Tensor final_shift, final_scale;
  };
  Modulations modulations(const Tensor& cond_embedding, std::span<const int> timesteps) const;
  // The net on x [R, d] at the timestep of step `step` of `m`: [R, 2d] = [eps, v].
  Tensor forward(const Tensor& x, const Modulations& m, int step) const;
  // The same for one original timestep t with embedded conditions [R, W].
  Tensor forward(const Tensor& x, int t, const Tensor& cond_embedding) const;

 private:
  struct Linear {
    Tensor w, b;
  };
  struct Block {
    Tensor ln_w, ln_b;
    Linear mlp0, mlp2;
    Linear shift, scale, gate;  // the three row blocks of adaLN_modulation.1 (chunk order)
  };
  Tensor apply(const Tensor& x, const Linear& l, int64_t out_features) const;

  Backend& backend_;
  int width_ = 0, token_dim_ = 0, cond_dim_ = 0;
  float eps_ = 1e-6f;
  Linear time0_, time2_, cond_, input_;
  std::vector<Block> blocks_;
  Linear final_shift_, final_scale_, final_linear_;
};

// MAR's timestep embedding input: [cos(t f_i), sin(t f_i)], f_i = exp(-ln(10000) i / half),
// computed in float32 as the reference.
std::vector<float> timestep_sinusoid(int t, int dim);

}  // namespace tessera
