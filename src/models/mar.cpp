#include "models/mar.h"

#include <filesystem>
#include <string>

#include "models/weights.h"
#include "tessera/error.h"

namespace tessera {

Mar::Mar(const ModelConfig& mc, Backend& backend) : cfg_(mc.mar), backend_(backend) {
  check(mc.is_mar(), "internal: not a MAR model directory");
  const MarConfig& c = cfg_;
  const int64_t D = c.dim, L = c.seq_len(), S = L + c.buffer_size, d = c.token_dim();
  const int64_t F = c.mlp_dim();
  const std::string path = (std::filesystem::path(mc.dir) / c.file).string();
  WeightLoader w(path, parse_dtype(c.dtype), backend, mc.check_weights);

  // class_emb rows followed by fake_latent, so one row gather builds the buffer of any batch.
  const Tensor classes = w.f32("class_emb.weight", {c.num_classes, D});
  const Tensor fake = w.f32("fake_latent", {1, D});
  class_table_ = backend.empty(DType::F32, {c.num_classes + 1, D});
  Tensor head_rows = class_table_.rows(0, c.num_classes),
         tail_row = class_table_.rows(c.num_classes, 1);
  backend.copy(classes, head_rows);
  backend.copy(fake, tail_row);

  z_proj_w_ = w.linear("z_proj.weight", {D, d});
  z_proj_b_ = w.f32("z_proj.bias", {D});
  z_proj_ln_w_ = w.f32("z_proj_ln.weight", {D});
  z_proj_ln_b_ = w.f32("z_proj_ln.bias", {D});
  enc_pos_ = w.f32("encoder_pos_embed_learned", {1, S, D}).view({S, D});
  auto block = [&](const std::string& p) {
    Block b;
    b.norm1_w = w.f32(p + ".norm1.weight", {D});
    b.norm1_b = w.f32(p + ".norm1.bias", {D});
    b.qkv_w = w.linear(p + ".attn.qkv.weight", {3 * D, D});
    b.qkv_b = w.f32(p + ".attn.qkv.bias", {3 * D});
    b.proj_w = w.linear(p + ".attn.proj.weight", {D, D});
    b.proj_b = w.f32(p + ".attn.proj.bias", {D});
    b.norm2_w = w.f32(p + ".norm2.weight", {D});
    b.norm2_b = w.f32(p + ".norm2.bias", {D});
    b.fc1_w = w.linear(p + ".mlp.fc1.weight", {F, D});
    b.fc1_b = w.f32(p + ".mlp.fc1.bias", {F});
    b.fc2_w = w.linear(p + ".mlp.fc2.weight", {D, F});
    b.fc2_b = w.f32(p + ".mlp.fc2.bias", {D});
    return b;
  };
  for (int i = 0; i < c.encoder_depth; ++i)
    encoder_.push_back(block("encoder_blocks." + std::to_string(i)));
  enc_norm_w_ = w.f32("encoder_norm.weight", {D});
  enc_norm_b_ = w.f32("encoder_norm.bias", {D});
  dec_embed_w_ = w.linear("decoder_embed.weight", {D, D});
  dec_embed_b_ = w.f32("decoder_embed.bias", {D});
  mask_token_ = w.f32("mask_token", {1, 1, D}).view({1, D});
  dec_pos_ = w.f32("decoder_pos_embed_learned", {1, S, D}).view({S, D});
  for (int i = 0; i < c.decoder_depth; ++i)
    decoder_.push_back(block("decoder_blocks." + std::to_string(i)));
  dec_norm_w_ = w.f32("decoder_norm.weight", {D});
  dec_norm_b_ = w.f32("decoder_norm.bias", {D});
  diff_pos_ = w.f32("diffusion_pos_embed_learned", {1, L, D}).view({L, D});
  head_ = std::make_unique<DiffusionHead>(c, w, backend);
  w.finish();
  parameter_bytes_ = static_cast<int64_t>(std::filesystem::file_size(path));
}

Tensor Mar::linear(const Tensor& x, const Tensor& w, const Tensor& b) const {
  Tensor y = backend_.empty(DType::F32, {x.dim(0), w.dim(0)});
  backend_.linear(x, w, &b, y);
  return y;
}

// timm Block (pre-norm): x += proj(attn(norm1(x))); x += fc2(gelu(fc1(norm2(x)))).
void Mar::run_block(Tensor& x, int batch, const Block& b) const {
  const MarConfig& c = cfg_;
  Tensor h = backend_.empty(DType::F32, x.shape);
  backend_.layer_norm(x, &b.norm1_w, &b.norm1_b, c.norm_eps, h);
  const Tensor qkv = linear(h, b.qkv_w, b.qkv_b);
  backend_.self_attention(qkv, batch, c.n_head, c.head_dim(), h, {});
  const Tensor a = linear(h, b.proj_w, b.proj_b);
  backend_.add(x, a, x);
  backend_.layer_norm(x, &b.norm2_w, &b.norm2_b, c.norm_eps, h);
  Tensor m = linear(h, b.fc1_w, b.fc1_b);
  backend_.gelu_erf(m);
  const Tensor o = linear(m, b.fc2_w, b.fc2_b);
  backend_.add(x, o, x);
}

Tensor Mar::forward(std::span<const float> tokens, std::span<const uint8_t> unknown,
                    std::span<const int32_t> labels,
                    const std::vector<std::vector<int32_t>>& predict) const {
  const MarConfig& c = cfg_;
  const int B = static_cast<int>(labels.size());
  const int64_t D = c.dim, L = c.seq_len(), nb = c.buffer_size, S = L + nb, d = c.token_dim();
  check(B > 0 && static_cast<int64_t>(tokens.size()) == B * L * d &&
            static_cast<int64_t>(unknown.size()) == B * L && static_cast<int>(predict.size()) == B,
        "internal: MAR forward input sizes");
  int64_t known = -1;
  for (int b = 0; b < B; ++b) {
    int64_t k = 0;
    for (int64_t i = 0; i < L; ++i) k += unknown[b * L + i] ? 0 : 1;
    check(known < 0 || k == known,
          "internal: MAR forward needs the same number of known tokens in every batch row");
    known = k;
    check(labels[b] >= -1 && labels[b] < c.num_classes, "class " + std::to_string(labels[b]) +
                                                            " out of range [0, " +
                                                            std::to_string(c.num_classes) + ")");
  }

  // Rows of `table`: z_proj of every token, then each image's class (or fake_latent) embedding.
  Tensor table = backend_.empty(DType::F32, {B * L + B, D});
  {
    const Tensor x = backend_.upload(tokens.data(), DType::F32, {B * L, d});
    Tensor zp = table.rows(0, B * L);
    backend_.linear(x, z_proj_w_, &z_proj_b_, zp);
    std::vector<int32_t> cls(B);
    for (int b = 0; b < B; ++b) cls[b] = labels[b] < 0 ? c.num_classes : labels[b];
    Tensor ce = table.rows(B * L, B);
    backend_.get_rows(class_table_, upload_ids(backend_, cls), ce);
  }
  // [buffer (class embedding) x nb, tokens], + encoder positions, z_proj_ln over all rows.
  std::vector<int32_t> ids(static_cast<size_t>(B * S));
  for (int b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      ids[b * S + s] = static_cast<int32_t>(s < nb ? B * L + b : b * L + (s - nb));
  Tensor x = backend_.empty(DType::F32, {B * S, D});
  backend_.get_rows(table, upload_ids(backend_, ids), x);
  backend_.add_rows_broadcast(x, enc_pos_);
  backend_.layer_norm(x, &z_proj_ln_w_, &z_proj_ln_b_, c.norm_eps, x);

  // The encoder sees the buffer and the known tokens only (ascending position order).
  const int64_t E = nb + known;
  std::vector<int32_t> keep;
  keep.reserve(static_cast<size_t>(B * E));
  for (int b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      if (s < nb || !unknown[b * L + (s - nb)]) keep.push_back(static_cast<int32_t>(b * S + s));
  Tensor e = backend_.empty(DType::F32, {B * E, D});
  backend_.get_rows(x, upload_ids(backend_, keep), e);
  for (const Block& blk : encoder_) run_block(e, B, blk);
  backend_.layer_norm(e, &enc_norm_w_, &enc_norm_b_, c.norm_eps, e);

  // decoder_embed, then scatter back: masked rows take mask_token (the table's last row).
  Tensor dtable = backend_.empty(DType::F32, {B * E + 1, D});
  {
    Tensor de = dtable.rows(0, B * E), mt = dtable.rows(B * E, 1);
    backend_.linear(e, dec_embed_w_, &dec_embed_b_, de);
    backend_.copy(mask_token_, mt);
  }
  std::vector<int32_t> scatter(static_cast<size_t>(B * S), static_cast<int32_t>(B * E));
  for (size_t i = 0; i < keep.size(); ++i) scatter[keep[i]] = static_cast<int32_t>(i);
  Tensor y = backend_.empty(DType::F32, {B * S, D});
  backend_.get_rows(dtable, upload_ids(backend_, scatter), y);
  backend_.add_rows_broadcast(y, dec_pos_);
  for (const Block& blk : decoder_) run_block(y, B, blk);

  // decoder_norm (per row) on the requested positions only, then + diffusion positions.
  std::vector<int32_t> rows, pos;
  for (int b = 0; b < B; ++b)
    for (int32_t p : predict[b]) {
      check(p >= 0 && p < L, "internal: MAR predict position out of range");
      rows.push_back(static_cast<int32_t>(b * S + nb + p));
      pos.push_back(p);
    }
  Tensor z = backend_.empty(DType::F32, {static_cast<int64_t>(rows.size()), D});
  if (rows.empty()) return z;
  backend_.get_rows(y, upload_ids(backend_, rows), z);
  backend_.layer_norm(z, &dec_norm_w_, &dec_norm_b_, c.norm_eps, z);
  Tensor dp = backend_.empty(DType::F32, z.shape);
  backend_.get_rows(diff_pos_, upload_ids(backend_, pos), dp);
  backend_.add(z, dp, z);
  return z;
}

}  // namespace tessera
