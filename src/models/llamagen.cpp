#include "models/llamagen.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "models/weights.h"
#include "tessera/error.h"

namespace tessera {

std::vector<float> llamagen_rope_table(int grid, int head_dim, float base, int prefix_len) {
  // Per axis hd/4 frequencies f_k = base^(-2k/half), half = hd/2 (precompute_freqs_cis_2d in
  // LlamaGen's autoregressive/models/gpt.py). Angle list of token (r, c) =
  // [r*f_0 .. r*f_{hd/4-1}, c*f_0 .. c*f_{hd/4-1}]; prefix rows stay zero.
  const int half = head_dim / 2, quarter = half / 2;
  std::vector<float> freqs(quarter);
  for (int k = 0; k < quarter; ++k)
    freqs[k] = 1.0f / std::pow(base, static_cast<float>(2 * k) / static_cast<float>(half));
  std::vector<float> table(static_cast<size_t>(prefix_len + grid * grid) * half * 2, 0.0f);
  for (int t = 0; t < grid * grid; ++t) {
    const float r = static_cast<float>(t / grid), c = static_cast<float>(t % grid);
    float* row = table.data() + static_cast<size_t>(prefix_len + t) * half * 2;
    for (int p = 0; p < half; ++p) {
      const float angle = p < quarter ? r * freqs[p] : c * freqs[p - quarter];
      row[2 * p] = std::cos(angle);
      row[2 * p + 1] = std::sin(angle);
    }
  }
  return table;
}

namespace {

// LlamaGen's activations, reserved at the largest batch; a forward uses views of their first rows.
struct LlamaGenWorkspace final : ForwardWorkspace {
  int rows = 0, outputs = 0;
  Tensor x, h, qkv, att, gate_up, gate;  // [rows, ...]
  Tensor picked, normed, logits;         // [outputs, ...]
  int max_rows() const override { return rows; }
  int max_outputs() const override { return outputs; }
};

}  // namespace

LlamaGen::LlamaGen(const ModelConfig& mc, Backend& backend) : cfg_(mc.gpt), backend_(backend) {
  const GptConfig& c = cfg_;
  info_.n_layer = c.n_layer;
  info_.n_kv_head = c.n_kv_head;
  info_.head_dim = c.head_dim();
  info_.dim = c.dim;
  info_.vocab_size = c.vocab_size;
  info_.prefix_len = c.cls_token_num;
  info_.n_tokens = c.n_image_tokens();
  info_.row_width = c.grid;
  const std::string path = (std::filesystem::path(mc.dir) / c.file).string();
  WeightLoader w(path, parse_dtype(c.dtype), backend, mc.check_weights);
  const int64_t D = c.dim, V = c.vocab_size, F = c.ffn_dim, hd = c.head_dim();
  const int64_t qkv = (c.n_head + 2 * c.n_kv_head) * hd;
  tok_embeddings = w.matrix("tok_embeddings.weight", {V, D});
  if (c.is_c2i()) {
    class_table = w.matrix("cls_embedding.embedding_table.weight", {c.num_classes + 1, D});
  } else {
    cap_fc1 = w.linear("cls_embedding.cap_proj.fc1.weight", {D, c.caption_dim});
    cap_fc2 = w.linear("cls_embedding.cap_proj.fc2.weight", {D, D});
    const Tensor unc = w.f32("cls_embedding.uncond_embedding", {c.cls_token_num, c.caption_dim});
    uncond_caption_.resize(static_cast<size_t>(unc.numel()));
    backend.download(unc, uncond_caption_.data());
  }
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    Layer L;
    L.attention_norm = w.f32(p + "attention_norm.weight", {D});
    L.wqkv = w.linear(p + "attention.wqkv.weight", {qkv, D});
    L.wo = w.linear(p + "attention.wo.weight", {D, D});
    L.ffn_norm = w.f32(p + "ffn_norm.weight", {D});
    // w1 and w3 read the same input: one stacked weight, one kernel call with SwiGLU fused in
    // (Backend::linear_swiglu: on the CPU one parallel region per FFN instead of three).
    L.w13 = w.linear_stacked({p + "feed_forward.w1.weight", p + "feed_forward.w3.weight"}, {F, D});
    L.w2 = w.linear(p + "feed_forward.w2.weight", {D, F});
    layers_.push_back(std::move(L));
  }
  norm = w.f32("norm.weight", {D});
  output = w.linear("output.weight", {V, D});
  w.finish();
  const std::vector<float> rope =
      llamagen_rope_table(c.grid, static_cast<int>(hd), c.rope_base, c.cls_token_num);
  rope_ = backend.upload(rope.data(), DType::F32, {c.cls_token_num + c.grid * c.grid, hd / 2, 2});
}

int64_t LlamaGen::streamed_weight_bytes() const {
  int64_t bytes = static_cast<int64_t>(output.nbytes());
  for (const Layer& L : layers_)
    for (const Tensor* t : {&L.wqkv, &L.wo, &L.w13, &L.w2, &L.attention_norm, &L.ffn_norm})
      bytes += static_cast<int64_t>(t->nbytes());
  return bytes;
}

int64_t LlamaGen::streamed_weight_params() const {
  int64_t n = output.numel();
  for (const Layer& L : layers_)
    for (const Tensor* t : {&L.wqkv, &L.wo, &L.w13, &L.w2}) n += t->numel();
  return n;
}

Tensor LlamaGen::embed_classes(std::span<const int32_t> ids) const {
  check(cfg_.is_c2i(), "this model is text-conditional (t2i): give a caption, not a class");
  for (int32_t id : ids)
    check(id >= 0 && id <= cfg_.num_classes, "class " + std::to_string(id) + " out of range [0, " +
                                                 std::to_string(cfg_.num_classes) + ")");
  // T = 1 for every released c2i model; the label embedding is repeated if T > 1 is configured
  // (LlamaGen slices [:, :T] of a single row, so only T = 1 is meaningful).
  check(cfg_.cls_token_num == 1, "c2i models with cls_token_num != 1 are not supported");
  Tensor out = backend_.empty(DType::F32, {static_cast<int64_t>(ids.size()), cfg_.dim});
  backend_.get_rows(class_table, upload_ids(backend_, ids), out);
  return out;
}

Tensor LlamaGen::embed_captions(std::span<const float> features,
                                std::span<const uint8_t> use_uncond) const {
  check(!cfg_.is_c2i(), "this model is class-conditional (c2i): give a class, not a caption");
  const int64_t T = cfg_.cls_token_num, C = cfg_.caption_dim, n = use_uncond.size();
  check(static_cast<int64_t>(features.size()) == n * T * C, "internal: caption feature size");
  std::vector<float> host(features.begin(), features.end());
  for (int64_t i = 0; i < n; ++i)
    if (use_uncond[i])
      std::copy(uncond_caption_.begin(), uncond_caption_.end(), host.begin() + i * T * C);
  Tensor x = backend_.upload(host.data(), DType::F32, {n * T, C});
  Tensor h = backend_.empty(DType::F32, {n * T, cfg_.dim});
  backend_.linear(x, cap_fc1, nullptr, h);
  backend_.gelu_tanh(h);
  Tensor out = backend_.empty(DType::F32, {n * T, cfg_.dim});
  backend_.linear(h, cap_fc2, nullptr, out);
  return out;
}

Tensor LlamaGen::embed_conditions(std::span<const Condition* const> conds, bool with_uncond,
                                  std::vector<uint8_t>& hidden_keys) const {
  const GptConfig& c = cfg_;
  const int n = static_cast<int>(conds.size()), R = with_uncond ? 2 * n : n;
  const int T = c.cls_token_num;
  hidden_keys.assign(static_cast<size_t>(R) * T, 0);
  for (int i = 0; i < n; ++i)
    check(conds[i]->kind != Condition::Kind::Prompt,
          "internal: a typed prompt reached the model unencoded (Pipeline::text_condition)");
  if (c.is_c2i()) {
    std::vector<int32_t> ids(R, c.num_classes);  // null class for unconditional rows
    for (int i = 0; i < n; ++i) {
      if (conds[i]->kind == Condition::Kind::Caption)
        throw Error(
            "this model is class-conditional (c2i): condition it on a class label, not a caption");
      if (conds[i]->kind == Condition::Kind::Class) {
        check(conds[i]->class_id >= 0 && conds[i]->class_id < c.num_classes,
              "class " + std::to_string(conds[i]->class_id) + " out of range [0, " +
                  std::to_string(c.num_classes) + ")");
        ids[i] = conds[i]->class_id;
      }
    }
    return embed_classes(ids);
  }
  const size_t per = static_cast<size_t>(T) * c.caption_dim;
  std::vector<float> features(static_cast<size_t>(R) * per, 0.0f);
  std::vector<uint8_t> use_uncond(R, 1);
  for (int i = 0; i < n; ++i) {
    const Condition& cd = *conds[i];
    if (cd.kind == Condition::Kind::Class)
      throw Error(
          "this model is text-conditional (t2i): condition it on a caption, not a class label");
    if (cd.kind != Condition::Kind::Caption) continue;
    check(cd.caption.size() == per && cd.caption_mask.size() == static_cast<size_t>(T),
          "caption features must be [" + std::to_string(T) + ", " + std::to_string(c.caption_dim) +
              "]");
    use_uncond[i] = 0;
    for (int t = 0; t < T; ++t) {
      const float m = cd.caption_mask[t] ? 1.0f : 0.0f;  // c = emb * mask (LlamaGen)
      for (int d = 0; d < c.caption_dim; ++d)
        features[i * per + static_cast<size_t>(t) * c.caption_dim + d] =
            cd.caption[static_cast<size_t>(t) * c.caption_dim + d] * m;
      if (!cd.caption_mask[t]) {
        hidden_keys[static_cast<size_t>(i) * T + t] = 1;
        if (with_uncond) hidden_keys[static_cast<size_t>(n + i) * T + t] = 1;  // reuses the mask
      }
    }
  }
  return embed_captions(features, use_uncond);
}

namespace {
// The workspace's f32 tensors, in LlamaGenWorkspace's order: x, h, qkv, att, gate_up, gate ([rows,
// .]) and picked, normed, logits ([outputs, .]). One list serves allocation and the memory
// estimate.
std::vector<Shape> workspace_shapes(const GptConfig& c, int max_rows, int max_outputs) {
  const int64_t R = std::max(max_rows, 1), O = std::max(max_outputs, 1);
  const int64_t qkv = static_cast<int64_t>(c.n_head + 2 * c.n_kv_head) * c.head_dim();
  return {{R, c.dim},     {R, c.dim}, {R, qkv},   {R, c.dim},       {R, 2 * int64_t{c.ffn_dim}},
          {R, c.ffn_dim}, {O, c.dim}, {O, c.dim}, {O, c.vocab_size}};
}
}  // namespace

std::unique_ptr<ForwardWorkspace> LlamaGen::make_workspace(int max_rows, int max_outputs) const {
  const std::vector<Shape> shapes = workspace_shapes(cfg_, max_rows, max_outputs);
  auto ws = std::make_unique<LlamaGenWorkspace>();
  ws->rows = static_cast<int>(shapes[0][0]);
  ws->outputs = static_cast<int>(shapes[6][0]);
  Tensor* slots[] = {&ws->x,    &ws->h,      &ws->qkv,    &ws->att,   &ws->gate_up,
                     &ws->gate, &ws->picked, &ws->normed, &ws->logits};
  for (size_t i = 0; i < shapes.size(); ++i) *slots[i] = backend_.empty(DType::F32, shapes[i]);
  return ws;
}

int64_t LlamaGen::workspace_bytes(int max_rows, int max_outputs) const {
  int64_t bytes = 0;
  for (const Shape& s : workspace_shapes(cfg_, max_rows, max_outputs))
    bytes += shape_numel(s) * static_cast<int64_t>(sizeof(float));
  return bytes;
}

ForwardOutputs LlamaGen::forward(const ForwardInputs& in, KVCache& cache,
                                 ForwardWorkspace& workspace) const {
  const GptConfig& c = cfg_;
  Backend& be = backend_;
  auto& ws = dynamic_cast<LlamaGenWorkspace&>(workspace);
  const int64_t rows = in.rows(), n_out = in.output_rows.numel();
  const int hd = c.head_dim();
  check(rows <= ws.rows && n_out <= ws.outputs, "internal: forward batch exceeds the workspace");
  check(in.positions.numel() == rows, "internal: forward positions size");

  Tensor x = ws.x.rows(0, rows), h = ws.h.rows(0, rows), qkv = ws.qkv.rows(0, rows);
  Tensor att = ws.att.rows(0, rows), gate_up = ws.gate_up.rows(0, rows);
  Tensor gate = ws.gate.rows(0, rows);
  if (in.embeddings) {
    check(in.embeddings->dim(0) == rows && in.embeddings->dim(1) == c.dim,
          "internal: forward embeddings shape");
    be.copy(*in.embeddings, x);
  } else {
    check(in.tokens.numel() == rows, "internal: forward tokens size");
    be.get_rows(tok_embeddings, in.tokens, x);
  }
  for (int l = 0; l < c.n_layer; ++l) {
    const Layer& L = layers_[l];
    // h = x + Attention(RMSNorm(x))
    be.rms_norm(x, L.attention_norm, c.norm_eps, h);
    be.linear(h, L.wqkv, nullptr, qkv);
    be.rope(qkv, c.n_head + c.n_kv_head, hd, rope_, in.positions);  // q and k
    be.kv_store(qkv, c.n_head, c.n_kv_head, hd, in.attn, cache.k(l), cache.v(l));
    be.attention(qkv, c.n_head, c.n_kv_head, hd, in.attn, cache.k(l), cache.v(l), att);
    be.linear(att, L.wo, nullptr, h);
    be.add(x, h, x);
    // out = h + SwiGLU(RMSNorm(h)) = h + w2(silu(w1 n) * w3 n)
    be.rms_norm(x, L.ffn_norm, c.norm_eps, h);
    be.linear_swiglu(h, L.w13, gate_up, gate);  // w13 = [w1; w3]
    be.linear(gate, L.w2, nullptr, h);
    be.add(x, h, x);
  }

  // Final norm and head only for the rows whose outputs are asked for.
  ForwardOutputs out;
  Tensor picked = ws.picked.rows(0, n_out), normed = ws.normed.rows(0, n_out);
  be.get_rows(x, in.output_rows, picked);
  be.rms_norm(picked, norm, c.norm_eps, normed);
  out.logits = ws.logits.rows(0, n_out);
  be.linear(normed, output, nullptr, out.logits);
  if (in.output_hidden) out.hidden = in.hidden_after_norm ? normed : picked;
  return out;
}

}  // namespace tessera
