#include "models/diffusion_head.h"

#include <cmath>

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
    return Linear{w.linear(p + name + ".weight", {out, in}), w.f32(p + name + ".bias", {out})};
  };
  // adaLN_modulation.1 maps W -> k*W; its chunks are the row blocks of the weight, each packed
  // as a linear weight of its own.
  auto chunks = [&](const std::string& name, int k) {
    const Tensor all_w = w.matrix(p + name + ".weight", {k * W, W});
    const Tensor all_b = w.f32(p + name + ".bias", {k * W});
    std::vector<Linear> out;
    for (int i = 0; i < k; ++i)
      out.push_back({backend.pack_linear_weight(all_w.rows(i * W, W)), all_b.rows(i * W, W)});
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

DiffusionHead::Modulations DiffusionHead::modulations(const Tensor& cond_embedding,
                                                      std::span<const int> timesteps) const {
  const int64_t R = cond_embedding.dim(0), W = width_;
  const int64_t S = static_cast<int64_t>(timesteps.size());
  check(cond_embedding.dim(1) == W && S > 0, "internal: diffusion head modulation shapes");
  // sy = SiLU(time_embed(t) + cond_embed(z)) for every (timestep, row); every adaLN_modulation
  // starts with SiLU. The timestep is shared by the R rows of a step.
  Tensor sy = backend_.empty(DType::F32, {S * R, W});
  for (int64_t s = 0; s < S; ++s) {
    const std::vector<float> freq = timestep_sinusoid(timesteps[s], kFrequencyDim);
    Tensor temb = apply(backend_.upload(freq.data(), DType::F32, {1, kFrequencyDim}), time0_, W);
    backend_.silu(temb);
    temb = apply(temb, time2_, W);
    Tensor part = sy.rows(s * R, R);
    backend_.copy(cond_embedding, part);
    backend_.add_rows_broadcast(part, temb);
  }
  backend_.silu(sy);
  Modulations m;
  m.rows = R;
  m.steps = static_cast<int>(S);
  for (const Block& b : blocks_) {
    m.shift.push_back(apply(sy, b.shift, W));
    m.scale.push_back(apply(sy, b.scale, W));
    m.gate.push_back(apply(sy, b.gate, W));
  }
  m.final_shift = apply(sy, final_shift_, W);
  m.final_scale = apply(sy, final_scale_, W);
  return m;
}

Tensor DiffusionHead::forward(const Tensor& x, const Modulations& m, int step) const {
  const int64_t R = x.dim(0), W = width_;
  check(x.dim(1) == token_dim_ && R == m.rows && step >= 0 && step < m.steps,
        "internal: diffusion head input shapes");
  const int64_t at = step * R;
  Tensor h = apply(x, input_, W);
  Tensor u = backend_.empty(DType::F32, {R, W});
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    backend_.layer_norm(h, &b.ln_w, &b.ln_b, eps_, u);
    backend_.modulate(u, m.shift[i].rows(at, R), m.scale[i].rows(at, R), u);
    Tensor hidden = apply(u, b.mlp0, W);
    backend_.silu(hidden);
    hidden = apply(hidden, b.mlp2, W);
    backend_.add_gated(h, m.gate[i].rows(at, R), hidden);
  }
  backend_.layer_norm(h, nullptr, nullptr, eps_, u);  // norm_final has no affine
  backend_.modulate(u, m.final_shift.rows(at, R), m.final_scale.rows(at, R), u);
  return apply(u, final_linear_, 2 * token_dim_);
}

Tensor DiffusionHead::forward(const Tensor& x, int t, const Tensor& cond_embedding) const {
  check(cond_embedding.dim(0) == x.dim(0), "internal: diffusion head input shapes");
  const int ts[] = {t};
  return forward(x, modulations(cond_embedding, ts), 0);
}

std::vector<float> timestep_sinusoid(int t, int dim) {
  const int half = dim / 2;
  std::vector<float> out(dim, 0.0f);
  const float log_period = static_cast<float>(std::log(10000.0));
  for (int i = 0; i < half; ++i) {
    const float freq = std::exp(-log_period * static_cast<float>(i) / static_cast<float>(half));
    const float arg = static_cast<float>(t) * freq;
    out[i] = std::cos(arg);
    out[half + i] = std::sin(arg);
  }
  return out;
}

}  // namespace tessera
