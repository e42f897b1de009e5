#include "models/diffusion_head.h"

#include "sampling/gaussian_diffusion.h"
#include "tessera/error.h"

namespace tessera {

namespace {
constexpr int kFrequencyDim = 256;  // TimestepEmbedder's sinusoid width
}

DiffusionHead::DiffusionHead(const MarConfig& c, WeightLoader& w, Backend& backend)
    : backend_(backend),
      width_(c.diffloss_width),
      token_dim_(c.token_dim()),
      cond_dim_(c.dim),
      eps_(c.norm_eps) {
  const int64_t W = width_, d = token_dim_;
  const std::string p = "diffloss.net.";
  auto lin = [&](const std::string& name, int64_t out, int64_t in) {
    return Linear{w.matrix(p + name + ".weight", {out, in}), w.f32(p + name + ".bias", {out})};
  };
  // adaLN_modulation.1 maps W -> k*W; its chunks are the row blocks of the weight.
  auto chunks = [&](const std::string& name, int k) {
    const Linear all = lin(name, k * W, W);
    std::vector<Linear> out;
    for (int i = 0; i < k; ++i) out.push_back({all.w.rows(i * W, W), all.b.rows(i * W, W)});
    return out;
  };
  time0_ = lin("time_embed.mlp.0", W, kFrequencyDim);
  time2_ = lin("time_embed.mlp.2", W, W);
  cond_ = lin("cond_embed", W, cond_dim_);
  input_ = lin("input_proj", W, d);
  for (int j = 0; j < c.diffloss_depth; ++j) {
    const std::string b = "res_blocks." + std::to_string(j);
    Block blk;
    blk.ln_w = w.f32(p + b + ".in_ln.weight", {W});
    blk.ln_b = w.f32(p + b + ".in_ln.bias", {W});
    blk.mlp0 = lin(b + ".mlp.0", W, W);
    blk.mlp2 = lin(b + ".mlp.2", W, W);
    const auto m = chunks(b + ".adaLN_modulation.1", 3);  // shift, scale, gate
    blk.shift = m[0];
    blk.scale = m[1];
    blk.gate = m[2];
    blocks_.push_back(std::move(blk));
  }
  const auto f = chunks("final_layer.adaLN_modulation.1", 2);  // shift, scale
  final_shift_ = f[0];
  final_scale_ = f[1];
  final_linear_ = lin("final_layer.linear", 2 * d, W);
}

Tensor DiffusionHead::apply(const Tensor& x, const Linear& l, int64_t out_features) const {
  Tensor y = backend_.empty(DType::F32, {x.dim(0), out_features});
  backend_.linear(x, l.w, &l.b, y);
  return y;
}

Tensor DiffusionHead::embed_condition(const Tensor& z) const {
  check(z.dim(-1) == cond_dim_, "internal: diffusion condition width");
  return apply(z, cond_, width_);
}

Tensor DiffusionHead::forward(const Tensor& x, int t, const Tensor& cond_embedding) const {
  const int64_t rows = x.dim(0), W = width_;
  check(x.dim(1) == token_dim_ && cond_embedding.dim(0) == rows,
        "internal: diffusion head input shapes");
  // y = time_embed(t) + cond_embed(z); the timestep is shared by every row of a step.
  const std::vector<float> freq = timestep_sinusoid(t, kFrequencyDim);
  Tensor temb = apply(backend_.upload(freq.data(), DType::F32, {1, kFrequencyDim}), time0_, W);
  backend_.silu(temb);
  temb = apply(temb, time2_, W);
  Tensor sy = backend_.empty(DType::F32, {rows, W});
  backend_.copy(cond_embedding, sy);
  backend_.add_rows_broadcast(sy, temb);
  backend_.silu(sy);  // every adaLN_modulation starts with SiLU

  Tensor h = apply(x, input_, W);
  Tensor u = backend_.empty(DType::F32, {rows, W});
  for (const Block& b : blocks_) {
    const Tensor shift = apply(sy, b.shift, W), scale = apply(sy, b.scale, W);
    const Tensor gate = apply(sy, b.gate, W);
    backend_.layer_norm(h, &b.ln_w, &b.ln_b, eps_, u);
    backend_.modulate(u, shift, scale, u);
    Tensor m = apply(u, b.mlp0, W);
    backend_.silu(m);
    m = apply(m, b.mlp2, W);
    backend_.add_gated(h, gate, m);
  }
  const Tensor shift = apply(sy, final_shift_, W), scale = apply(sy, final_scale_, W);
  backend_.layer_norm(h, nullptr, nullptr, eps_, u);  // norm_final has no affine
  backend_.modulate(u, shift, scale, u);
  return apply(u, final_linear_, 2 * token_dim_);
}

}  // namespace tessera
