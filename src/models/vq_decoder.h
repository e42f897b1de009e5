// LlamaGen's VQ image decoder (VQGAN-style): L2-normalised codebook lookup, post-quant 1x1 conv,
// then the shared convolutional decoder (conv_decoder.h) with attention at the lowest-resolution
// level. Structure in docs/model_format.md; numerics as LlamaGen's
// tokenizer/tokenizer_image/vq_model.py (decode_code).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "models/conv_decoder.h"
#include "tensor/backend.h"
#include "tessera/config.h"

namespace tessera {

class VqDecoder {
 public:
  VqDecoder(const ModelConfig& config, Backend& backend);
  const VqConfig& config() const { return cfg_; }

  // Token grids [n, grid, grid] (raster order) -> decoder output [n, 3, H, W] (nominal [-1, 1]).
  Tensor decode(std::span<const int32_t> tokens, int n, int grid) const;

 private:
  VqConfig cfg_;
  Backend& backend_;
  Tensor codebook_;  // f32, rows L2-normalised once at load
  ConvDecoder::Conv post_quant_conv_;
  std::unique_ptr<ConvDecoder> decoder_;
};

// Pixel conversion of LlamaGen's sample scripts: trunc(clamp(127.5 x + 128, 0, 255)), NCHW f32 ->
// NHWC uint8.
std::vector<uint8_t> to_pixels(const std::vector<float>& nchw, int n, int height, int width);

}  // namespace tessera
