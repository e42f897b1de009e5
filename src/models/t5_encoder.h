// The encoder of T5 v1.1 / flan-T5 (Raffel et al., 2020, §2.1; v1.1: gated-GELU feed-forward,
// no dropout at inference), as HF transformers' T5EncoderModel computes it: token embeddings
// (no scaling, no absolute positions), then per layer
//   h += O · attention(RMSNorm(h)),  scores q·k (unscaled) + relative-position bias, padding
//                                     keys hidden (the bias of layer 0 is shared by all layers)
//   h += Wo · (gelu_tanh(Wi0 · RMSNorm(h)) * (Wi1 · RMSNorm(h)))
// and a final RMSNorm. RMSNorm is T5's layer norm: x / sqrt(mean(x^2) + eps) * w, no mean, no
// bias. Tensor names are HF's (docs/model_format.md).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tensor/backend.h"
#include "tessera/config.h"

namespace tessera {

class T5Encoder {
 public:
  // Reads DIR's t5.safetensors (config.dir) onto `backend`; a missing or mis-shaped tensor is an
  // error naming it.
  T5Encoder(const ModelConfig& config, Backend& backend);

  const T5Config& config() const { return cfg_; }
  int width() const { return cfg_.d_model; }

  // Final hidden states [batch, n, d_model] (f32, on the host) of ids [batch, n]; valid [batch, n]
  // marks real tokens (1) and padding (0), which no query sees as a key (HF's attention_mask).
  // Padding rows are computed as the reference computes them. Every row of a sequence depends on
  // that sequence alone.
  std::vector<float> encode(std::span<const int32_t> ids, std::span<const uint8_t> valid,
                            int batch);

  // Weight bytes, for the load report.
  int64_t weight_bytes() const;

 private:
  struct Layer {
    Tensor attention_norm, wqkv, wo, ffn_norm, wi, wo_ff;  // wqkv: q;k;v stacked, wi: wi_0;wi_1
  };
  T5Config cfg_;
  Backend& backend_;
  Tensor embeddings_, final_norm_;
  std::vector<float> bias_table_;  // [num_buckets, num_heads], on the host
  std::vector<Layer> layers_;
  int64_t weight_bytes_ = 0;
};

}  // namespace tessera
