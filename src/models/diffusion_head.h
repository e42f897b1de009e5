// MAR's DiffLoss denoiser, SimpleMLPAdaLN (../shared/notes/continuous_sd.md §3.1): the input
// projection of the noisy token, a timestep embedding plus a condition embedding of the MAE output
// z, AdaLN residual MLP blocks, and a final AdaLN layer producing [eps (d), v (d)].
#pragma once

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
  // cond_embed(z): [rows, D] -> [rows, W]. Constant along a chain, so computed once per chain.
  Tensor embed_condition(const Tensor& z) const;
  // The net on x [rows, d] at original timestep t with embedded conditions [rows, W]:
  // [rows, 2d] = [eps, v].
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

}  // namespace tessera
