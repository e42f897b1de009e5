// LlamaGen GPT (Sun et al., 2024): a Llama decoder over VQ image tokens, conditioned by a class
// label (c2i) or T5 caption features (t2i) placed as prefix tokens. Names follow the official
// state dict (docs/model_format.md); numerics follow LlamaGen's autoregressive/models/gpt.py
// and generate.py.
#pragma once

#include <span>
#include <vector>

#include "models/autoregressive_model.h"
#include "models/kv_cache.h"
#include "tensor/backend.h"
#include "tessera/config.h"

namespace tessera {

class LlamaGen final : public AutoregressiveModel {
 public:
  LlamaGen(const ModelConfig& config, Backend& backend);

  const GptConfig& config() const { return cfg_; }

  // AutoregressiveModel
  const ArModelInfo& info() const override { return info_; }
  Backend& backend() const override { return backend_; }
  // Prefix rows use the all-zero RoPE rows 0..T-1; image token t uses row T + t.
  int32_t prefix_position(int i) const override { return i; }
  int32_t token_position(int t) const override { return cfg_.cls_token_num + t; }
  Tensor embed_conditions(std::span<const Condition* const> conds, bool with_uncond,
                          std::vector<uint8_t>& hidden_keys) const override;
  std::unique_ptr<ForwardWorkspace> make_workspace(int max_rows, int max_outputs) const override;
  int64_t workspace_bytes(int max_rows, int max_outputs) const override;
  ForwardOutputs forward(const ForwardInputs& in, KVCache& cache,
                         ForwardWorkspace& workspace) const override;
  int64_t streamed_weight_bytes() const override;
  const Tensor& output_head() const override { return output; }
  // Weights multiplied per row in a forward (the matrices and the head): 2 flops each.
  int64_t streamed_weight_params() const;

  // Prefix embeddings, [ids.size() * T, D]; id == num_classes is the null (unconditional) class.
  Tensor embed_classes(std::span<const int32_t> ids) const;
  // t2i prefix embeddings from caption features [n, T, caption_dim] (host, f32). Rows flagged in
  // `use_uncond` take the learned unconditional caption instead.
  Tensor embed_captions(std::span<const float> features, std::span<const uint8_t> use_uncond) const;

 private:
  struct Layer {
    Tensor attention_norm, wqkv, wo, ffn_norm, w13, w2;  // w13: w1 and w3 stacked [2F, D]
  };
  GptConfig cfg_;
  ArModelInfo info_;
  Backend& backend_;
  Tensor tok_embeddings, class_table, cap_fc1, cap_fc2, norm, output;
  std::vector<float> uncond_caption_;  // [T, caption_dim]: an input to the caption MLP (host)
  std::vector<Layer> layers_;
  Tensor rope_;  // [T + N, hd/2, 2] (cos, sin); the T prefix rows are all zero
};

// The rotary table exactly as LlamaGen's precompute_freqs_cis_2d (host, [T + N, hd/2, 2]).
std::vector<float> llamagen_rope_table(int grid, int head_dim, float base, int prefix_len);

}  // namespace tessera
