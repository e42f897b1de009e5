// The convolutional image decoder shared by VQGAN (LlamaGen's VQ models) and LDM's AutoencoderKL
// (MAR's KL-16): conv_in, mid (ResnetBlock, AttnBlock, ResnetBlock), upsampling levels of
// ResnetBlocks (optionally each followed by an AttnBlock), GroupNorm, swish, conv_out. The two
// families differ only in tensor names and in where the up path has attention, so a model file
// supplies a ConvDecoderLayout and this class does the rest.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "models/weights.h"
#include "tensor/backend.h"
#include "tessera/config.h"

namespace tessera {

struct ConvDecoderLayout : ConvDecoderConfig {
  explicit ConvDecoderLayout(const ConvDecoderConfig& shape) : ConvDecoderConfig(shape) {}
  // Name prefixes. Level b counts from the lowest resolution (b = 0) upwards.
  std::string conv_in, norm_out, conv_out;
  std::string mid_res0, mid_attn, mid_res1;
  std::function<std::string(int b, int j)> res, attn;  // ResnetBlock / AttnBlock j of level b
  std::function<std::string(int b)> upsample_conv;     // the conv after level b's upsampling
  std::function<bool(int b)> level_has_attention;
};

class ConvDecoder {
 public:
  // Loads every decoder tensor of `layout` from `w` (the caller calls w.finish()).
  ConvDecoder(const ConvDecoderLayout& layout, WeightLoader& w, Backend& backend);

  // z [n, z_channels, h, w] -> [n, 3, h * 2^(levels-1), w * 2^(levels-1)] (nominal [-1, 1]).
  Tensor decode(const Tensor& z) const;
  int upsample_factor() const { return layout_.upsample_factor(); }

  struct Conv {
    Tensor w, b;
    int pad = 0;
  };
  // A stride-1 convolution with its stored padding (k / 2).
  Tensor conv(const Tensor& x, const Conv& c) const;
  static Conv load_conv(WeightLoader& w, const std::string& prefix, int64_t out, int64_t in,
                        int64_t k);

 private:
  struct Norm {
    Tensor gamma, beta;
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

  Tensor resblock(const Tensor& x, const ResBlock& r) const;
  Tensor attnblock(const Tensor& x, const AttnBlock& a) const;

  ConvDecoderLayout layout_;
  Backend& backend_;
  Conv conv_in_, conv_out_;
  ResBlock mid_res0_, mid_res1_;
  AttnBlock mid_attn_;
  std::vector<Level> levels_;
  Norm norm_out_;
};

}  // namespace tessera
