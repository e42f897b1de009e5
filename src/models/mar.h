// MAR (Li et al. 2024, "Autoregressive Image Generation without Vector Quantization"): an MAE-style
// encoder/decoder with bidirectional attention over buffer (class) rows and the known tokens,
// whose per-position output z conditions the DiffLoss head (diffusion_head.h) that samples each
// continuous token. Architecture and names: LTH14/mar's models/mar.py.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "models/diffusion_head.h"
#include "tensor/backend.h"
#include "tessera/config.h"

namespace tessera {

class Mar {
 public:
  Mar(const ModelConfig& config, Backend& backend);
  const MarConfig& config() const { return cfg_; }
  const DiffusionHead& head() const { return *head_; }

  // The MAE forward (forward_mae_encoder/_decoder of MAR's models/mar.py) on B canvases: tokens
  // [B, L, d] (unknown positions ignored), unknown [B, L] (1 = masked; every row must know the
  // same number of tokens), labels [B] (a class id, or -1 for the unconditional fake_latent).
  // Returns z [sum_b |predict[b]|, D]: the rows of the requested positions, image by image in the
  // order given.
  Tensor forward(std::span<const float> tokens, std::span<const uint8_t> unknown,
                 std::span<const int32_t> labels,
                 const std::vector<std::vector<int32_t>>& predict) const;

  int64_t parameter_bytes() const { return parameter_bytes_; }

 private:
  struct Block {
    Tensor norm1_w, norm1_b, norm2_w, norm2_b;
    Tensor qkv_w, qkv_b, proj_w, proj_b, fc1_w, fc1_b, fc2_w, fc2_b;
  };
  Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) const;
  void run_block(Tensor& x, int batch, const Block& blk) const;

  MarConfig cfg_;
  Backend& backend_;
  Tensor class_table_;  // [num_classes + 1, D] f32: class_emb rows, then fake_latent
  Tensor z_proj_w_, z_proj_b_, z_proj_ln_w_, z_proj_ln_b_;
  Tensor enc_pos_, dec_pos_, diff_pos_;  // [L + buffer, D], [L + buffer, D], [L, D] (f32)
  std::vector<Block> encoder_, decoder_;
  Tensor enc_norm_w_, enc_norm_b_, dec_embed_w_, dec_embed_b_, mask_token_;
  Tensor dec_norm_w_, dec_norm_b_;
  std::unique_ptr<DiffusionHead> head_;
  int64_t parameter_bytes_ = 0;
};

}  // namespace tessera
