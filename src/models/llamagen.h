// LlamaGen GPT (Sun et al., 2024): a Llama decoder over VQ image tokens, conditioned by a class
// label (c2i) or T5 caption features (t2i) placed as prefix tokens. Names follow the official
// state dict (docs/model_format.md); numerics follow ../shared/notes/llamagen.md.
#pragma once

#include <span>
#include <vector>

#include "models/kv_cache.h"
#include "tensor/backend.h"
#include "tessera/config.h"

namespace tessera {

struct ForwardParams {
  AttentionBatch attn;             // sequences, their cached lengths, optional masks
  std::vector<int32_t> rope_pos;   // RoPE table row of every input row (prefix rows are zero)
  std::vector<int32_t> logits_at;  // token indices j in [0, n_new) that need logits, per sequence
};

class LlamaGen {
 public:
  LlamaGen(const ModelConfig& config, Backend& backend);

  const GptConfig& config() const { return cfg_; }
  Backend& backend() const { return backend_; }
  int prefix_len() const { return cfg_.cls_token_num; }
  // Cache slots needed for one sequence: prefix + image tokens + `extra` (draft tokens).
  int sequence_capacity(int extra = 0) const;
  KVCache make_cache(int n_seq, int extra_capacity = 0) const;

  // Prefix embeddings, [ids.size() * T, D]; id == num_classes is the null (unconditional) class.
  Tensor embed_classes(std::span<const int32_t> ids) const;
  // t2i prefix embeddings from caption features [n, T, caption_dim] (host, f32). Rows flagged in
  // `use_uncond` take the learned unconditional caption instead.
  Tensor embed_captions(std::span<const float> features, std::span<const uint8_t> use_uncond) const;
  // Image-token embeddings, [ids.size(), D].
  Tensor embed_tokens(std::span<const int32_t> ids) const;

  // Runs the transformer over x [n_seq*n_new, D] appended to the cache; returns f32 logits
  // [n_seq * logits_at.size(), V] (row r*|logits_at| + i is sequence r, token logits_at[i]).
  Tensor forward(const Tensor& x, ForwardParams& p, KVCache& cache) const;

  // Bytes of weights one decode step streams: every layer matrix and the output head.
  int64_t streamed_weight_bytes() const;

  // The RoPE row of image token t (raster order): T + t.
  int rope_row(int image_token) const { return cfg_.cls_token_num + image_token; }

 private:
  struct Layer {
    Tensor attention_norm, wqkv, wo, ffn_norm, w1, w2, w3;
  };
  GptConfig cfg_;
  Backend& backend_;
  Tensor tok_embeddings, class_table, cap_fc1, cap_fc2, norm, output;
  std::vector<float> uncond_caption_;  // [T, caption_dim]: an input to the caption MLP (host)
  std::vector<Layer> layers_;
  Tensor rope_;  // [T + N, hd/2, 2] (cos, sin); the T prefix rows are all zero
};

// The rotary table exactly as LlamaGen's precompute_freqs_cis_2d (host, [T + N, hd/2, 2]).
std::vector<float> llamagen_rope_table(int grid, int head_dim, float base, int prefix_len);

}  // namespace tessera
