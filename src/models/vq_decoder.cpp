#include "models/vq_decoder.h"

#include <algorithm>
#include <filesystem>

#include "models/weights.h"
#include "tessera/error.h"

namespace tessera {

VqDecoder::VqDecoder(const ModelConfig& mc, Backend& backend) : cfg_(mc.vq), backend_(backend) {
  check(mc.has_vq, "this model directory has no VQ decoder (no \"vq\" in config.json)");
  const VqConfig& c = cfg_;
  const std::string path = (std::filesystem::path(mc.dir) / c.file).string();
  WeightLoader w(path, parse_dtype(c.dtype), backend, mc.check_weights);

  // Normalised once into a private copy (the stored weights are not unit-norm; never write the
  // read-only mapping).
  const Tensor stored = w.f32("quantize.embedding.weight", {c.codebook_size, c.codebook_embed_dim});
  codebook_ = backend.empty(DType::F32, stored.shape);
  backend.copy(stored, codebook_);
  if (c.codebook_l2_norm) backend.l2_normalize_rows(codebook_, 1e-12f);
  post_quant_conv_ =
      ConvDecoder::load_conv(w, "post_quant_conv", c.z_channels, c.codebook_embed_dim, 1);

  // LlamaGen names: decoder.conv_blocks.{b} counts from the lowest resolution; attention only
  // there (ch_mult[-1] level).
  ConvDecoderLayout L(c);
  L.conv_in = "decoder.conv_in";
  L.mid_res0 = "decoder.mid.0";
  L.mid_attn = "decoder.mid.1";
  L.mid_res1 = "decoder.mid.2";
  L.res = [](int b, int j) {
    return "decoder.conv_blocks." + std::to_string(b) + ".res." + std::to_string(j);
  };
  L.attn = [](int b, int j) {
    return "decoder.conv_blocks." + std::to_string(b) + ".attn." + std::to_string(j);
  };
  L.upsample_conv = [](int b) {
    return "decoder.conv_blocks." + std::to_string(b) + ".upsample.conv";
  };
  L.level_has_attention = [](int b) { return b == 0; };
  L.norm_out = "decoder.norm_out";
  L.conv_out = "decoder.conv_out";
  decoder_ = std::make_unique<ConvDecoder>(L, w, backend);
  w.finish();
}

Tensor VqDecoder::decode(std::span<const int32_t> tokens, int n, int grid) const {
  const int64_t HW = static_cast<int64_t>(grid) * grid, E = cfg_.codebook_embed_dim;
  check(static_cast<int64_t>(tokens.size()) == n * HW,
        "decode: expected " + std::to_string(n * HW) + " tokens, got " +
            std::to_string(tokens.size()));
  for (int32_t t : tokens)
    check(t >= 0 && t < cfg_.codebook_size, "token " + std::to_string(t) + " out of range [0, " +
                                                std::to_string(cfg_.codebook_size) + ")");
  Tensor z = backend_.empty(DType::F32, {n * HW, E});
  backend_.get_rows(codebook_, upload_ids(backend_, tokens), z);
  Tensor zc = backend_.empty(DType::F32, {n, E, grid, grid});
  backend_.transpose_last2(z.view({n, HW, E}), zc);  // [n, HW, E] -> [n, E, H, W]
  return decoder_->decode(decoder_->conv(zc, post_quant_conv_));
}

std::vector<uint8_t> to_pixels(const std::vector<float>& nchw, int n, int height, int width) {
  std::vector<uint8_t> px(static_cast<size_t>(n) * height * width * 3);
  const size_t plane = static_cast<size_t>(height) * width;
  for (int b = 0; b < n; ++b)
    for (size_t i = 0; i < plane; ++i)
      for (int ch = 0; ch < 3; ++ch) {
        const float v = nchw[(static_cast<size_t>(b) * 3 + ch) * plane + i] * 127.5f + 128.0f;
        px[(static_cast<size_t>(b) * plane + i) * 3 + ch] =
            static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));  // truncation toward zero
      }
  return px;
}

}  // namespace tessera
