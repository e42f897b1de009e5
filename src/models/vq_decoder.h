// LlamaGen's VQ image decoder (VQGAN-style): L2-normalised codebook lookup, post-quant 1x1 conv,
// conv_in, mid (ResnetBlock, AttnBlock, ResnetBlock), upsampling levels, GroupNorm, swish,
// conv_out. Structure in docs/model_format.md; numerics in ../shared/notes/llamagen.md §4.
#pragma once

#include <span>
#include <vector>

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
  struct Norm {
    Tensor gamma, beta;
  };
  struct Conv {
    Tensor w, b;
    int pad = 0;
  };
  struct ResBlock {
    Norm norm1, norm2;
    Conv conv1, conv2, nin_shortcut;  // nin_shortcut only when in != out channels
    bool has_shortcut = false;
  };
  struct AttnBlock {
    Norm norm;
    Conv q, k, v, proj_out;
  };
  struct Level {
    std::vector<ResBlock> res;
    std::vector<AttnBlock> attn;  // empty or one per ResBlock
    bool upsample = false;
    Conv upsample_conv;
  };

  Tensor conv(const Tensor& x, const Conv& c) const;
  Tensor resblock(const Tensor& x, const ResBlock& r) const;
  Tensor attnblock(const Tensor& x, const AttnBlock& a) const;

  VqConfig cfg_;
  Backend& backend_;
  Tensor codebook_;  // f32, rows L2-normalised once at load
  Conv post_quant_conv_, conv_in_, conv_out_;
  ResBlock mid_res0_, mid_res1_;
  AttnBlock mid_attn_;
  std::vector<Level> levels_;
  Norm norm_out_;
};

// Pixel conversion of LlamaGen's sample scripts: trunc(clamp(127.5 x + 128, 0, 255)), NCHW f32 ->
// NHWC uint8.
std::vector<uint8_t> to_pixels(const std::vector<float>& nchw, int n, int height, int width);

}  // namespace tessera
