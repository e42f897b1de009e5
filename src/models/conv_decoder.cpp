#include "models/conv_decoder.h"

#include <cmath>

#include "tessera/error.h"

namespace tessera {

ConvDecoder::Conv ConvDecoder::load_conv(WeightLoader& w, const std::string& p, int64_t out,
                                         int64_t in, int64_t k) {
  Conv c;
  c.w = w.f32(p + ".weight", {out, in, k, k});
  c.b = w.f32(p + ".bias", {out});
  c.pad = static_cast<int>(k / 2);
  return c;
}

ConvDecoder::ConvDecoder(const ConvDecoderLayout& layout, WeightLoader& w, Backend& backend)
    : layout_(layout), backend_(backend) {
  const ConvDecoderLayout& c = layout_;
  check(!c.ch_mult.empty(), w.path() + ": decoder ch_mult is empty");
  auto norm = [&](const std::string& p, int64_t ch) {
    check(ch % c.norm_groups == 0, w.path() + ": GroupNorm '" + p + "' has " + std::to_string(ch) +
                                       " channels, not divisible by " +
                                       std::to_string(c.norm_groups));
    return Norm{w.f32(p + ".weight", {ch}), w.f32(p + ".bias", {ch})};
  };
  auto make_res = [&](const std::string& p, int64_t in, int64_t out) {
    ResBlock r;
    r.norm1 = norm(p + ".norm1", in);
    r.conv1 = load_conv(w, p + ".conv1", out, in, 3);
    r.norm2 = norm(p + ".norm2", out);
    r.conv2 = load_conv(w, p + ".conv2", out, out, 3);
    r.has_shortcut = in != out;
    if (r.has_shortcut) r.nin_shortcut = load_conv(w, p + ".nin_shortcut", out, in, 1);
    return r;
  };
  auto make_attn = [&](const std::string& p, int64_t ch) {
    AttnBlock a;
    a.norm = norm(p + ".norm", ch);
    a.q = load_conv(w, p + ".q", ch, ch, 1);
    a.k = load_conv(w, p + ".k", ch, ch, 1);
    a.v = load_conv(w, p + ".v", ch, ch, 1);
    a.proj_out = load_conv(w, p + ".proj_out", ch, ch, 1);
    return a;
  };
  const int n_levels = static_cast<int>(c.ch_mult.size());
  int64_t block_in = static_cast<int64_t>(c.ch) * c.ch_mult.back();
  conv_in_ = load_conv(w, c.conv_in, block_in, c.z_channels, 3);
  mid_res0_ = make_res(c.mid_res0, block_in, block_in);
  mid_attn_ = make_attn(c.mid_attn, block_in);
  mid_res1_ = make_res(c.mid_res1, block_in, block_in);
  for (int b = 0; b < n_levels; ++b) {
    Level lv;
    const int64_t block_out = static_cast<int64_t>(c.ch) * c.ch_mult[n_levels - 1 - b];
    const bool attn = c.level_has_attention && c.level_has_attention(b);
    for (int j = 0; j <= c.num_res_blocks; ++j) {
      lv.res.push_back(make_res(c.res(b, j), block_in, block_out));
      block_in = block_out;
      if (attn) lv.attn.push_back(make_attn(c.attn(b, j), block_in));
    }
    lv.upsample = b != n_levels - 1;
    if (lv.upsample) lv.upsample_conv = load_conv(w, c.upsample_conv(b), block_in, block_in, 3);
    levels_.push_back(std::move(lv));
  }
  norm_out_ = norm(c.norm_out, block_in);
  conv_out_ = load_conv(w, c.conv_out, 3, block_in, 3);
}

Tensor ConvDecoder::conv(const Tensor& x, const Conv& c) const {
  const int64_t k = c.w.dim(2);
  Tensor y = backend_.empty(DType::F32, {x.dim(0), c.w.dim(0), x.dim(2) + 2 * c.pad - k + 1,
                                         x.dim(3) + 2 * c.pad - k + 1});
  backend_.conv2d(x, c.w, c.b, c.pad, y);
  return y;
}

Tensor ConvDecoder::resblock(const Tensor& x, const ResBlock& r) const {
  const ConvDecoderLayout& c = layout_;
  Tensor h = backend_.empty(DType::F32, x.shape);
  backend_.group_norm(x, r.norm1.gamma, r.norm1.beta, c.norm_groups, c.norm_eps, true, h);
  h = conv(h, r.conv1);
  backend_.group_norm(h, r.norm2.gamma, r.norm2.beta, c.norm_groups, c.norm_eps, true, h);
  h = conv(h, r.conv2);
  const Tensor skip = r.has_shortcut ? conv(x, r.nin_shortcut) : x;
  backend_.add(skip, h, h);
  return h;
}

Tensor ConvDecoder::attnblock(const Tensor& x, const AttnBlock& a) const {
  const ConvDecoderLayout& c = layout_;
  const int64_t B = x.dim(0), C = x.dim(1), HW = x.dim(2) * x.dim(3);
  Tensor h = backend_.empty(DType::F32, x.shape);
  backend_.group_norm(x, a.norm.gamma, a.norm.beta, c.norm_groups, c.norm_eps, false, h);
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

Tensor ConvDecoder::decode(const Tensor& z) const {
  check(z.ndim() == 4 && z.dim(1) == layout_.z_channels, "decoder input must be [n, " +
                                                             std::to_string(layout_.z_channels) +
                                                             ", h, w], got " + shape_str(z.shape));
  Tensor h = conv(z, conv_in_);
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
  backend_.group_norm(h, norm_out_.gamma, norm_out_.beta, layout_.norm_groups, layout_.norm_eps,
                      true, out);
  return conv(out, conv_out_);
}

}  // namespace tessera
