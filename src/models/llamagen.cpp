#include "models/llamagen.h"

#include <cmath>
#include <filesystem>

#include "models/weights.h"
#include "tessera/error.h"

namespace tessera {

std::vector<float> llamagen_rope_table(int grid, int head_dim, float base, int prefix_len) {
  // Per axis hd/4 frequencies f_k = base^(-2k/half), half = hd/2 (notes §1.4). Angle list of
  // token (r, c) = [r*f_0 .. r*f_{hd/4-1}, c*f_0 .. c*f_{hd/4-1}]; prefix rows stay zero.
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

LlamaGen::LlamaGen(const ModelConfig& mc, Backend& backend) : cfg_(mc.gpt), backend_(backend) {
  const GptConfig& c = cfg_;
  const std::string path = (std::filesystem::path(mc.dir) / c.file).string();
  WeightLoader w(path, parse_dtype(c.dtype), backend);
  const int64_t D = c.dim, V = c.vocab_size, F = c.ffn_dim, hd = c.head_dim();
  const int64_t qkv = (c.n_head + 2 * c.n_kv_head) * hd;
  tok_embeddings = w.matrix("tok_embeddings.weight", {V, D});
  if (c.is_c2i()) {
    class_table = w.matrix("cls_embedding.embedding_table.weight", {c.num_classes + 1, D});
  } else {
    cap_fc1 = w.matrix("cls_embedding.cap_proj.fc1.weight", {D, c.caption_dim});
    cap_fc2 = w.matrix("cls_embedding.cap_proj.fc2.weight", {D, D});
    const Tensor unc = w.f32("cls_embedding.uncond_embedding", {c.cls_token_num, c.caption_dim});
    uncond_caption_.resize(static_cast<size_t>(unc.numel()));
    backend.download(unc, uncond_caption_.data());
  }
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    Layer L;
    L.attention_norm = w.f32(p + "attention_norm.weight", {D});
    L.wqkv = w.matrix(p + "attention.wqkv.weight", {qkv, D});
    L.wo = w.matrix(p + "attention.wo.weight", {D, D});
    L.ffn_norm = w.f32(p + "ffn_norm.weight", {D});
    L.w1 = w.matrix(p + "feed_forward.w1.weight", {F, D});
    L.w3 = w.matrix(p + "feed_forward.w3.weight", {F, D});
    L.w2 = w.matrix(p + "feed_forward.w2.weight", {D, F});
    layers_.push_back(std::move(L));
  }
  norm = w.f32("norm.weight", {D});
  output = w.matrix("output.weight", {V, D});
  w.finish();
  const std::vector<float> rope =
      llamagen_rope_table(c.grid, static_cast<int>(hd), c.rope_base, c.cls_token_num);
  rope_ = backend.upload(rope.data(), DType::F32, {c.cls_token_num + c.grid * c.grid, hd / 2, 2});
}

int64_t LlamaGen::streamed_weight_bytes() const {
  int64_t bytes = static_cast<int64_t>(output.nbytes());
  for (const Layer& L : layers_)
    for (const Tensor* t : {&L.wqkv, &L.wo, &L.w1, &L.w2, &L.w3, &L.attention_norm, &L.ffn_norm})
      bytes += static_cast<int64_t>(t->nbytes());
  return bytes;
}

int LlamaGen::sequence_capacity(int extra) const {
  return cfg_.cls_token_num + cfg_.n_image_tokens() + extra;
}

KVCache LlamaGen::make_cache(int n_seq, int extra_capacity) const {
  return KVCache(backend_, cfg_.n_layer, n_seq, sequence_capacity(extra_capacity),
                 cfg_.n_kv_head, cfg_.head_dim());
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
  backend_.get_rows(class_table, ids, out);
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

Tensor LlamaGen::embed_tokens(std::span<const int32_t> ids) const {
  for (int32_t id : ids)
    check(id >= 0 && id < cfg_.vocab_size, "token " + std::to_string(id) + " out of range [0, " +
                                               std::to_string(cfg_.vocab_size) + ")");
  Tensor out = backend_.empty(DType::F32, {static_cast<int64_t>(ids.size()), cfg_.dim});
  backend_.get_rows(tok_embeddings, ids, out);
  return out;
}

Tensor LlamaGen::forward(const Tensor& x_in, ForwardParams& p, KVCache& cache) const {
  const GptConfig& c = cfg_;
  Backend& be = backend_;
  const int64_t n_seq = static_cast<int64_t>(p.attn.seq.size()), n_new = p.attn.n_new;
  const int64_t rows = n_seq * n_new, D = c.dim, hd = c.head_dim();
  const int64_t qkv_w = (c.n_head + 2 * c.n_kv_head) * hd;
  check(x_in.dim(0) == rows && x_in.dim(1) == D, "internal: forward input shape");
  check(static_cast<int64_t>(p.rope_pos.size()) == rows, "internal: forward rope_pos size");

  Tensor x = be.empty(DType::F32, {rows, D});
  be.copy(x_in, x);
  Tensor h = be.empty(DType::F32, {rows, D});
  Tensor qkv = be.empty(DType::F32, {rows, qkv_w});
  Tensor att = be.empty(DType::F32, {rows, D});
  Tensor gate = be.empty(DType::F32, {rows, c.ffn_dim});
  Tensor up = be.empty(DType::F32, {rows, c.ffn_dim});
  for (int l = 0; l < c.n_layer; ++l) {
    const Layer& L = layers_[l];
    // h = x + Attention(RMSNorm(x))
    be.rms_norm(x, L.attention_norm, c.norm_eps, h);
    be.linear(h, L.wqkv, nullptr, qkv);
    be.rope(qkv, c.n_head + c.n_kv_head, static_cast<int>(hd), rope_, p.rope_pos);  // q and k
    be.kv_store(qkv, c.n_head, c.n_kv_head, static_cast<int>(hd), p.attn, cache.k(l), cache.v(l));
    be.attention(qkv, c.n_head, c.n_kv_head, static_cast<int>(hd), p.attn, cache.k(l), cache.v(l),
                 att);
    be.linear(att, L.wo, nullptr, h);
    be.add(x, h, x);
    // out = h + SwiGLU(RMSNorm(h)) = h + w2(silu(w1 n) * w3 n)
    be.rms_norm(x, L.ffn_norm, c.norm_eps, h);
    be.linear(h, L.w1, nullptr, gate);
    be.linear(h, L.w3, nullptr, up);
    be.swiglu(gate, up, gate);
    be.linear(gate, L.w2, nullptr, h);
    be.add(x, h, x);
  }
  cache.commit(p.attn);

  // Final norm and head only for the rows whose logits are asked for.
  std::vector<int32_t> sel;
  for (int64_t r = 0; r < n_seq; ++r)
    for (int32_t j : p.logits_at) {
      check(j >= 0 && j < n_new, "internal: logits index out of range");
      sel.push_back(static_cast<int32_t>(r * n_new + j));
    }
  const int64_t n_out = static_cast<int64_t>(sel.size());
  Tensor picked = be.empty(DType::F32, {n_out, D});
  be.get_rows(x, sel, picked);
  Tensor normed = be.empty(DType::F32, {n_out, D});
  be.rms_norm(picked, norm, c.norm_eps, normed);
  Tensor logits = be.empty(DType::F32, {n_out, c.vocab_size});
  be.linear(normed, output, nullptr, logits);
  return logits;
}

}  // namespace tessera
