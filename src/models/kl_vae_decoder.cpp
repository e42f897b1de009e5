#include "models/kl_vae_decoder.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "models/weights.h"
#include "tessera/error.h"

namespace tessera {

KlVaeDecoder::KlVaeDecoder(const ModelConfig& mc, Backend& backend)
    : cfg_(mc.vae), backend_(backend), side_(mc.mar.seq_side()), patch_(mc.mar.patch_size) {
  check(mc.has_vae, "this model directory has no VAE decoder (no \"vae\" in config.json)");
  const VaeConfig& c = cfg_;
  const std::string path = (std::filesystem::path(mc.dir) / c.file).string();
  WeightLoader w(path, parse_dtype(c.dtype), backend, mc.check_weights);
  post_quant_conv_ = ConvDecoder::load_conv(w, "post_quant_conv", c.z_channels, c.embed_dim, 1);

  // LDM names: decoder.up.{i} with i = 0 at the full resolution, so level b (counted from the
  // lowest resolution) is up.{levels-1-b}; attention where LDM's curr_res is listed.
  const int levels = static_cast<int>(c.ch_mult.size());
  const int latent_side = side_ * patch_;
  ConvDecoderLayout L(c);
  L.conv_in = "decoder.conv_in";
  L.mid_res0 = "decoder.mid.block_1";
  L.mid_attn = "decoder.mid.attn_1";
  L.mid_res1 = "decoder.mid.block_2";
  auto up = [levels](int b) { return "decoder.up." + std::to_string(levels - 1 - b); };
  L.res = [up](int b, int j) { return up(b) + ".block." + std::to_string(j); };
  L.attn = [up](int b, int j) { return up(b) + ".attn." + std::to_string(j); };
  L.upsample_conv = [up](int b) { return up(b) + ".upsample.conv"; };
  const std::vector<int> attn_res = c.attn_resolutions;
  L.level_has_attention = [attn_res, latent_side](int b) {
    return std::find(attn_res.begin(), attn_res.end(), latent_side << b) != attn_res.end();
  };
  L.norm_out = "decoder.norm_out";
  L.conv_out = "decoder.conv_out";
  decoder_ = std::make_unique<ConvDecoder>(L, w, backend);
  w.finish();
}

Tensor KlVaeDecoder::decode(std::span<const float> tokens, int n) const {
  const int C = cfg_.embed_dim, p = patch_, h = side_;
  const int64_t token_dim = static_cast<int64_t>(C) * p * p;
  const int64_t per_image = static_cast<int64_t>(h) * h * token_dim;
  check(static_cast<int64_t>(tokens.size()) == n * per_image,
        "VAE decode: expected " + std::to_string(n * per_image) + " latent values, got " +
            std::to_string(tokens.size()));
  // Unpatchify [n, (h w), (c p q)] -> [n, c, (h p), (w q)] and undo the latent scale.
  const int side = h * p;
  std::vector<float> z(static_cast<size_t>(n) * C * side * side);
  const float inv_scale = 1.0f / cfg_.scale;
  for (int b = 0; b < n; ++b)
    for (int i = 0; i < h; ++i)
      for (int j = 0; j < h; ++j)
        for (int c = 0; c < C; ++c)
          for (int pi = 0; pi < p; ++pi)
            for (int pj = 0; pj < p; ++pj) {
              const float v = tokens[static_cast<size_t>(b * per_image + (i * h + j) * token_dim +
                                                         (c * p + pi) * p + pj)];
              check(std::isfinite(v), "VAE decode: non-finite latent value");
              z[((static_cast<size_t>(b) * C + c) * side + i * p + pi) * side + j * p + pj] =
                  v * inv_scale;
            }
  const Tensor zt = backend_.upload(z.data(), DType::F32, {n, C, side, side});
  return decoder_->decode(decoder_->conv(zt, post_quant_conv_));
}

std::vector<uint8_t> to_pixels_mar(const std::vector<float>& nchw, int n, int height, int width) {
  std::vector<uint8_t> px(static_cast<size_t>(n) * height * width * 3);
  const size_t plane = static_cast<size_t>(height) * width;
  for (int b = 0; b < n; ++b)
    for (size_t i = 0; i < plane; ++i)
      for (int ch = 0; ch < 3; ++ch) {
        const float x = nchw[(static_cast<size_t>(b) * 3 + ch) * plane + i];
        const float v = std::clamp((x + 1.0f) / 2.0f, 0.0f, 1.0f) * 255.0f;
        px[(static_cast<size_t>(b) * plane + i) * 3 + ch] =
            static_cast<uint8_t>(std::nearbyint(v));  // round half to even (default FE mode)
      }
  return px;
}

}  // namespace tessera
