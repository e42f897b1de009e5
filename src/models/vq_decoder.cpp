#include "models/vq_decoder.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "models/weights.h"
#include "tessera/error.h"

namespace tessera {

namespace {

class VqLoader {
 public:
  VqLoader(WeightLoader& w, int groups) : w_(w), groups_(groups) {}
  auto norm(const std::string& p, int64_t c) {
    check(c % groups_ == 0, w_.path() + ": GroupNorm '" + p + "' has " + std::to_string(c) +
                                " channels, not divisible by " + std::to_string(groups_));
    return std::pair{w_.f32(p + ".weight", {c}), w_.f32(p + ".bias", {c})};
  }
  auto conv(const std::string& p, int64_t out, int64_t in, int64_t k) {
    return std::pair{w_.f32(p + ".weight", {out, in, k, k}), w_.f32(p + ".bias", {out})};
  }

 private:
  WeightLoader& w_;
  int groups_;
};

}  // namespace

VqDecoder::VqDecoder(const ModelConfig& mc, Backend& backend) : cfg_(mc.vq), backend_(backend) {
  check(mc.has_vq, "this model directory has no VQ decoder (no \"vq\" in config.json)");
  const VqConfig& c = cfg_;
  const std::string path = (std::filesystem::path(mc.dir) / c.file).string();
  WeightLoader w(path, parse_dtype(c.dtype), backend);
  VqLoader ld(w, c.norm_groups);
  auto set_norm = [&](Norm& n, const std::string& p, int64_t ch) {
    std::tie(n.gamma, n.beta) = ld.norm(p, ch);
  };
  auto set_conv = [&](Conv& cv, const std::string& p, int64_t out, int64_t in, int64_t k) {
    std::tie(cv.w, cv.b) = ld.conv(p, out, in, k);
    cv.pad = static_cast<int>(k / 2);
  };
  auto make_res = [&](const std::string& p, int64_t in, int64_t out) {
    ResBlock r;
    set_norm(r.norm1, p + ".norm1", in);
    set_conv(r.conv1, p + ".conv1", out, in, 3);
    set_norm(r.norm2, p + ".norm2", out);
    set_conv(r.conv2, p + ".conv2", out, out, 3);
    r.has_shortcut = in != out;
    if (r.has_shortcut) set_conv(r.nin_shortcut, p + ".nin_shortcut", out, in, 1);
    return r;
  };
  auto make_attn = [&](const std::string& p, int64_t ch) {
    AttnBlock a;
    set_norm(a.norm, p + ".norm", ch);
    set_conv(a.q, p + ".q", ch, ch, 1);
    set_conv(a.k, p + ".k", ch, ch, 1);
    set_conv(a.v, p + ".v", ch, ch, 1);
    set_conv(a.proj_out, p + ".proj_out", ch, ch, 1);
    return a;
  };

  // Normalised once into a private copy (the stored weights are not unit-norm; never write the
  // read-only mapping).
  const Tensor stored = w.f32("quantize.embedding.weight", {c.codebook_size, c.codebook_embed_dim});
  codebook_ = backend.empty(DType::F32, stored.shape);
  backend.copy(stored, codebook_);
  if (c.codebook_l2_norm) backend.l2_normalize_rows(codebook_, 1e-12f);
  set_conv(post_quant_conv_, "post_quant_conv", c.z_channels, c.codebook_embed_dim, 1);
  const int n_levels = static_cast<int>(c.ch_mult.size());
  int64_t block_in = static_cast<int64_t>(c.ch) * c.ch_mult.back();
  set_conv(conv_in_, "decoder.conv_in", block_in, c.z_channels, 3);
  mid_res0_ = make_res("decoder.mid.0", block_in, block_in);
  mid_attn_ = make_attn("decoder.mid.1", block_in);
  mid_res1_ = make_res("decoder.mid.2", block_in, block_in);
  for (int b = 0; b < n_levels; ++b) {
    Level lv;
    const std::string p = "decoder.conv_blocks." + std::to_string(b);
    const int64_t block_out = static_cast<int64_t>(c.ch) * c.ch_mult[n_levels - 1 - b];
    for (int j = 0; j <= c.num_res_blocks; ++j) {
      lv.res.push_back(make_res(p + ".res." + std::to_string(j), block_in, block_out));
      block_in = block_out;
      if (b == 0) lv.attn.push_back(make_attn(p + ".attn." + std::to_string(j), block_in));
    }
    lv.upsample = b != n_levels - 1;
    if (lv.upsample) set_conv(lv.upsample_conv, p + ".upsample.conv", block_in, block_in, 3);
    levels_.push_back(std::move(lv));
  }
  set_norm(norm_out_, "decoder.norm_out", block_in);
  set_conv(conv_out_, "decoder.conv_out", 3, block_in, 3);
  w.finish();
}

Tensor VqDecoder::conv(const Tensor& x, const Conv& c) const {
  const int64_t k = c.w.dim(2);
  Tensor y = backend_.empty(DType::F32, {x.dim(0), c.w.dim(0), x.dim(2) + 2 * c.pad - k + 1,
                                         x.dim(3) + 2 * c.pad - k + 1});
  backend_.conv2d(x, c.w, c.b, c.pad, y);
  return y;
}

Tensor VqDecoder::resblock(const Tensor& x, const ResBlock& r) const {
  Tensor h = backend_.empty(DType::F32, x.shape);
  backend_.group_norm(x, r.norm1.gamma, r.norm1.beta, cfg_.norm_groups, cfg_.norm_eps, true, h);
  h = conv(h, r.conv1);
  backend_.group_norm(h, r.norm2.gamma, r.norm2.beta, cfg_.norm_groups, cfg_.norm_eps, true, h);
  h = conv(h, r.conv2);
  const Tensor skip = r.has_shortcut ? conv(x, r.nin_shortcut) : x;
  backend_.add(skip, h, h);
  return h;
}

Tensor VqDecoder::attnblock(const Tensor& x, const AttnBlock& a) const {
  const int64_t B = x.dim(0), C = x.dim(1), HW = x.dim(2) * x.dim(3);
  Tensor h = backend_.empty(DType::F32, x.shape);
  backend_.group_norm(x, a.norm.gamma, a.norm.beta, cfg_.norm_groups, cfg_.norm_eps, false, h);
  const Tensor q = conv(h, a.q).view({B, C, HW});
  const Tensor k = conv(h, a.k).view({B, C, HW});
  const Tensor v = conv(h, a.v).view({B, C, HW});
  // w[i, j] = softmax_j(q_i . k_j / sqrt(C)); out[c, i] = sum_j v[c, j] w[i, j]
  Tensor w = backend_.empty(DType::F32, {B, HW, HW});
  backend_.batched_matmul(q, true, k, false, 1.0f / std::sqrt(static_cast<float>(C)), w);
  backend_.softmax_rows(w);
  Tensor o = backend_.empty(DType::F32, {B, C, HW});
  backend_.batched_matmul(v, false, w, true, 1.0f, o);
  Tensor out = conv(o.view(x.shape), a.proj_out);
  backend_.add(x, out, out);
  return out;
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
  backend_.get_rows(codebook_, tokens, z);
  Tensor zc = backend_.empty(DType::F32, {n, E, grid, grid});
  backend_.transpose_last2(z.view({n, HW, E}), zc);  // [n, HW, E] -> [n, E, H, W]
  Tensor h = conv(conv(zc, post_quant_conv_), conv_in_);
  h = resblock(h, mid_res0_);
  h = attnblock(h, mid_attn_);
  h = resblock(h, mid_res1_);
  for (const Level& lv : levels_) {
    for (size_t j = 0; j < lv.res.size(); ++j) {
      h = resblock(h, lv.res[j]);
      if (!lv.attn.empty()) h = attnblock(h, lv.attn[j]);
    }
    if (lv.upsample) {
      Tensor up = backend_.empty(DType::F32, {h.dim(0), h.dim(1), 2 * h.dim(2), 2 * h.dim(3)});
      backend_.upsample_nearest2x(h, up);
      h = conv(up, lv.upsample_conv);
    }
  }
  Tensor out = backend_.empty(DType::F32, h.shape);
  backend_.group_norm(h, norm_out_.gamma, norm_out_.beta, cfg_.norm_groups, cfg_.norm_eps, true,
                      out);
  return conv(out, conv_out_);
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
