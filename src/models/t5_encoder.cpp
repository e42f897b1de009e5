#include "models/t5_encoder.h"

#include <filesystem>

#include "models/t5_relative_position.h"
#include "models/weights.h"
#include "tessera/error.h"

namespace tessera {

T5Encoder::T5Encoder(const ModelConfig& mc, Backend& backend) : cfg_(mc.t5), backend_(backend) {
  const T5Config& c = cfg_;
  const std::string path = (std::filesystem::path(mc.dir) / c.file).string();
  WeightLoader w(path, parse_dtype(c.dtype), backend, mc.check_weights);
  const int64_t D = c.d_model, I = c.inner_dim(), F = c.d_ff;
  embeddings_ = w.matrix("shared.weight", {c.vocab_size, D});
  const std::string attn0 = "encoder.block.0.layer.0.SelfAttention.";
  const Tensor table = w.f32(attn0 + "relative_attention_bias.weight",
                             {c.relative_attention_num_buckets, c.num_heads});
  bias_table_.resize(static_cast<size_t>(table.numel()));
  backend.download(table, bias_table_.data());
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "encoder.block." + std::to_string(l) + ".layer.";
    Layer L;
    L.attention_norm = w.f32(p + "0.layer_norm.weight", {D});
    // q, k and v read the same input: one stacked weight, in the q;k;v block layout
    // Backend::self_attention reads.
    L.wqkv = w.linear_stacked({p + "0.SelfAttention.q.weight", p + "0.SelfAttention.k.weight",
                               p + "0.SelfAttention.v.weight"},
                              {I, D});
    L.wo = w.linear(p + "0.SelfAttention.o.weight", {D, I});
    L.ffn_norm = w.f32(p + "1.layer_norm.weight", {D});
    L.wi = w.linear_stacked(
        {p + "1.DenseReluDense.wi_0.weight", p + "1.DenseReluDense.wi_1.weight"}, {F, D});
    L.wo_ff = w.linear(p + "1.DenseReluDense.wo.weight", {D, F});
    layers_.push_back(std::move(L));
  }
  final_norm_ = w.f32("encoder.final_layer_norm.weight", {D});
  w.finish();
  const int64_t per_layer = 4 * I * D + 3 * F * D;
  weight_bytes_ =
      (c.num_layers * per_layer + int64_t{c.vocab_size} * D) * dtype_size(parse_dtype(c.dtype));
}

int64_t T5Encoder::weight_bytes() const {
  return weight_bytes_;
}

std::vector<float> T5Encoder::encode(std::span<const int32_t> ids, std::span<const uint8_t> valid,
                                     int batch) {
  const T5Config& c = cfg_;
  check(batch >= 1 && !ids.empty() && ids.size() % batch == 0 && valid.size() == ids.size(),
        "internal: T5Encoder::encode shapes");
  const int n = static_cast<int>(ids.size() / batch);
  const int64_t rows = static_cast<int64_t>(ids.size()), D = c.d_model, I = c.inner_dim(),
                F = c.d_ff;
  for (const int32_t id : ids)
    check(id >= 0 && id < c.vocab_size, "token id " + std::to_string(id) +
                                            " is outside the T5 vocabulary of " +
                                            std::to_string(c.vocab_size));
  Backend& b = backend_;
  const Tensor id_t = upload_ids(b, ids);
  const Tensor mask = b.upload(valid.data(), DType::U8, {batch, n});
  const std::vector<float> bias_host =
      t5_position_bias(bias_table_, c.num_heads, n, c.relative_attention_num_buckets,
                       c.relative_attention_max_distance);
  const Tensor bias = b.upload(bias_host.data(), DType::F32, {c.num_heads, n, n});
  Tensor h = b.empty(DType::F32, {rows, D}), x = b.empty(DType::F32, {rows, D});
  Tensor qkv = b.empty(DType::F32, {rows, 3 * I}), att = b.empty(DType::F32, {rows, I});
  Tensor gate_up = b.empty(DType::F32, {rows, 2 * F}), ff = b.empty(DType::F32, {rows, F});
  Tensor out = b.empty(DType::F32, {rows, D});
  b.get_rows(embeddings_, id_t, h);
  // T5 scales no score: 1/sqrt(d_kv) is folded into its initialisation (Mesh TensorFlow).
  const SelfAttentionExtras extras{1.0f, &bias, &mask};
  for (const Layer& L : layers_) {
    b.rms_norm(h, L.attention_norm, c.layer_norm_epsilon, x);
    b.linear(x, L.wqkv, nullptr, qkv);
    b.self_attention(qkv, batch, c.num_heads, c.d_kv, att, extras);
    b.linear(att, L.wo, nullptr, out);
    b.add(h, out, h);
    b.rms_norm(h, L.ffn_norm, c.layer_norm_epsilon, x);
    b.linear(x, L.wi, nullptr, gate_up);
    b.geglu_stacked(gate_up, ff);
    b.linear(ff, L.wo_ff, nullptr, out);
    b.add(h, out, h);
  }
  b.rms_norm(h, final_norm_, c.layer_norm_epsilon, x);
  return download_f32(b, x);
}

}  // namespace tessera
