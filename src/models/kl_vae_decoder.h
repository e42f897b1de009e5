// MAR's KL-16 tokenizer decoder: LDM's AutoencoderKL decoder (post_quant_conv, then the shared
// convolutional decoder of conv_decoder.h under LDM's tensor names). Tokens are MAR latents
// (posterior sample * scale) in raster order, unpatchified to [n, C, h, w] and divided by the
// scale before decoding (LTH14/mar: models/vae.py, engine_mar.py's vae.decode(tokens / 0.2325)).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "models/conv_decoder.h"
#include "tensor/backend.h"
#include "tessera/config.h"

namespace tessera {

class KlVaeDecoder {
 public:
  KlVaeDecoder(const ModelConfig& config, Backend& backend);

  // tokens [n, seq_len, token_dim] (MAR's scaled latents) -> [n, 3, H, W] (nominal [-1, 1]).
  Tensor decode(std::span<const float> tokens, int n) const;
  int image_size() const { return side_ * patch_ * decoder_->upsample_factor(); }

 private:
  VaeConfig cfg_;
  Backend& backend_;
  int side_ = 0, patch_ = 1;  // token grid side and MAR patch size
  ConvDecoder::Conv post_quant_conv_;
  std::unique_ptr<ConvDecoder> decoder_;
};

// MAR's pixel conversion: round(clip((x + 1) / 2, 0, 1) * 255), NCHW f32 -> NHWC uint8 (round
// half to even, as numpy's np.round).
std::vector<uint8_t> to_pixels_mar(const std::vector<float>& nchw, int n, int height, int width);

}  // namespace tessera
