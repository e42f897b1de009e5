#include "models/eagle_drafter.h"

#include <algorithm>
#include <filesystem>

#include "models/llamagen.h"
#include "models/weights.h"
#include "tessera/error.h"

namespace tessera {

namespace {

struct EagleWorkspace final : ForwardWorkspace {
  int rows = 0, outputs = 0;
  Tensor x, h, qkv, att, gate_up, gate;  // [rows, ...]
  Tensor picked, logits;                 // [outputs, ...]
  int max_rows() const override { return rows; }
  int max_outputs() const override { return outputs; }
};

std::vector<Shape> workspace_shapes(const EagleConfig& c, int max_rows, int max_outputs) {
  const int64_t R = std::max(max_rows, 1), O = std::max(max_outputs, 1);
  const int64_t qkv = static_cast<int64_t>(c.n_head + 2 * c.n_kv_head) * c.head_dim();
  return {{R, c.dim},     {R, c.dim}, {R, qkv},         {R, c.dim}, {R, 2 * int64_t{c.ffn_dim}},
          {R, c.ffn_dim}, {O, c.dim}, {O, c.vocab_size}};
}

}  // namespace

EagleDrafterModel::EagleDrafterModel(const ModelConfig& mc, const AutoregressiveModel& target)
    : cfg_(mc.eagle), backend_(target.backend()), head_(target.output_head()) {
  const EagleConfig& c = cfg_;
  const ArModelInfo& t = target.info();
  auto fits = [&](bool ok, const std::string& what) {
    if (!ok)
      throw ParameterError("draft", "{draft} " + mc.dir + ": the EAGLE drafter's " + what +
                                        " (it was converted for another target)");
  };
  fits(c.dim == t.dim,
       "width " + std::to_string(c.dim) + " is not the target's " + std::to_string(t.dim));
  fits(c.vocab_size == t.vocab_size, "vocabulary " + std::to_string(c.vocab_size) +
                                         " is not the target's " + std::to_string(t.vocab_size));
  fits(c.grid * c.grid == t.n_tokens, "grid " + std::to_string(c.grid) + "x" +
                                          std::to_string(c.grid) + " is not the target's " +
                                          std::to_string(t.n_tokens) + " tokens");
  fits(c.prefix_len == t.prefix_len - 1, "prefix of " + std::to_string(c.prefix_len) +
                                             " rows is not the target's " +
                                             std::to_string(t.prefix_len) + " - 1");
  if (c.n_kv_head != c.n_head)
    throw ParameterError("draft", "{draft} " + mc.dir + ": EAGLE drafters with grouped KV heads (" +
                                      std::to_string(c.n_kv_head) + " for " +
                                      std::to_string(c.n_head) + " heads) are not supported yet");
  info_.n_layer = 1;
  info_.n_kv_head = c.n_kv_head;
  info_.head_dim = c.head_dim();
  info_.dim = c.dim;
  info_.vocab_size = c.vocab_size;
  info_.prefix_len = c.prefix_len;
  info_.n_tokens = t.n_tokens;
  info_.row_width = t.row_width;
  info_.feature_dim = t.dim;

  const std::string path = (std::filesystem::path(mc.dir) / c.file).string();
  WeightLoader w(path, parse_dtype(c.dtype), backend_, mc.check_weights);
  const int64_t D = c.dim, V = c.vocab_size, F = c.ffn_dim, hd = c.head_dim();
  embed_tokens_ = w.matrix("embed_tokens.weight", {V, D});
  // fc reads cat(embedding, feature): embedding first (LANTERN's cnets_llamagen).
  fc_embed_ = w.linear_columns("fc.weight", {D, 2 * D}, 0, D);
  fc_feature_ = w.linear_columns("fc.weight", {D, 2 * D}, D, D);
  fc_bias_ = w.f32("fc.bias", {D});
  const std::string p = "layers.0.";
  // q, k and v stacked into one weight (one kernel call), as LlamaGen's wqkv.
  wqkv_ = w.linear_stacked(
      {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"},
      {D, D});
  wo_ = w.linear(p + "self_attn.o_proj.weight", {D, c.n_head * hd});
  post_norm_ = w.f32(p + "post_attention_layernorm.weight", {D});
  w13_ = w.linear_stacked({p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}, {F, D});
  w2_ = w.linear(p + "mlp.down_proj.weight", {D, F});
  w.finish();
  const std::vector<float> rope =
      llamagen_rope_table(c.grid, static_cast<int>(hd), c.rope_base, c.prefix_len);
  rope_ = backend_.upload(rope.data(), DType::F32, {c.prefix_len + c.grid * c.grid, hd / 2, 2});
}

Tensor EagleDrafterModel::embed_conditions(std::span<const Condition* const>, bool,
                                           std::vector<uint8_t>&) const {
  throw Error("internal: an EAGLE drafter has no condition prefix of its own");
}

std::unique_ptr<ForwardWorkspace> EagleDrafterModel::make_workspace(int max_rows,
                                                                    int max_outputs) const {
  const std::vector<Shape> shapes = workspace_shapes(cfg_, max_rows, max_outputs);
  auto ws = std::make_unique<EagleWorkspace>();
  ws->rows = static_cast<int>(shapes[0][0]);
  ws->outputs = static_cast<int>(shapes[6][0]);
  Tensor* slots[] = {&ws->x,       &ws->h,    &ws->qkv,    &ws->att,
                     &ws->gate_up, &ws->gate, &ws->picked, &ws->logits};
  for (size_t i = 0; i < shapes.size(); ++i) *slots[i] = backend_.empty(DType::F32, shapes[i]);
  return ws;
}

int64_t EagleDrafterModel::workspace_bytes(int max_rows, int max_outputs) const {
  int64_t bytes = 0;
  for (const Shape& s : workspace_shapes(cfg_, max_rows, max_outputs))
    bytes += shape_numel(s) * static_cast<int64_t>(sizeof(float));
  return bytes;
}

ForwardOutputs EagleDrafterModel::forward(const ForwardInputs& in, KVCache& cache,
                                          ForwardWorkspace& workspace) const {
  const EagleConfig& c = cfg_;
  Backend& be = backend_;
  auto& ws = dynamic_cast<EagleWorkspace&>(workspace);
  const int64_t rows = in.rows(), n_out = in.output_rows.numel();
  const int hd = c.head_dim();
  check(rows <= ws.rows && n_out <= ws.outputs, "internal: forward batch exceeds the workspace");
  check(in.features && in.features->dim(0) == rows && in.features->dim(1) == c.dim &&
            in.tokens.numel() == rows && in.positions.numel() == rows,
        "internal: an EAGLE forward needs a feature and a token per row");
  Tensor x = ws.x.rows(0, rows), h = ws.h.rows(0, rows), qkv = ws.qkv.rows(0, rows);
  Tensor att = ws.att.rows(0, rows), gate_up = ws.gate_up.rows(0, rows);
  Tensor gate = ws.gate.rows(0, rows);
  // x = fc(cat(embed(token), feature)) = fc_e · embed + fc_f · feature + b
  be.get_rows(embed_tokens_, in.tokens, h);
  be.linear(h, fc_embed_, &fc_bias_, x);
  be.linear(*in.features, fc_feature_, nullptr, h);
  be.add(x, h, x);
  // x = x + Attention(x): no input norm (EAGLE's layer 0)
  be.linear(x, wqkv_, nullptr, qkv);
  be.rope(qkv, c.n_head + c.n_kv_head, hd, rope_, in.positions);
  be.kv_store(qkv, c.n_head, c.n_kv_head, hd, in.attn, cache.k(0), cache.v(0));
  be.attention(qkv, c.n_head, c.n_kv_head, hd, in.attn, cache.k(0), cache.v(0), att);
  be.linear(att, wo_, nullptr, h);
  be.add(x, h, x);
  // x = x + SwiGLU(RMSNorm(x))
  be.rms_norm(x, post_norm_, c.norm_eps, h);
  be.linear_swiglu(h, w13_, gate_up, gate);
  be.linear(gate, w2_, nullptr, h);
  be.add(x, h, x);

  ForwardOutputs out;
  Tensor picked = ws.picked.rows(0, n_out);
  be.get_rows(x, in.output_rows, picked);
  out.logits = ws.logits.rows(0, n_out);
  be.linear(picked, head_, nullptr, out.logits);  // the target's head, no final norm
  if (in.output_hidden) out.hidden = picked;      // f^: the next row's feature
  return out;
}

int64_t EagleDrafterModel::streamed_weight_bytes() const {
  int64_t bytes = static_cast<int64_t>(head_.nbytes());
  for (const Tensor* t : {&fc_embed_, &fc_feature_, &wqkv_, &wo_, &w13_, &w2_, &post_norm_})
    bytes += static_cast<int64_t>(t->nbytes());
  return bytes;
}

}  // namespace tessera
