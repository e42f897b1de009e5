// The EAGLE drafter (Li et al., 2024, "EAGLE: Speculative Sampling Requires Rethinking Feature
// Uncertainty", §3.1; LANTERN's LlamaGen variant, notes relaxed_sd.md §4.1) as an autoregressive
// model over (feature, token) pairs: row i reads the target's feature f_i and the token x_{i+1}
// that follows it, and predicts the next feature
//   h = fc_e · embed(x_{i+1}) + fc_f · f_i + b    (fc over [embedding, feature], split in two)
//   h = h + Attention(h)                           (EAGLE's layer 0 has no input norm)
//   f^_{i+1} = h + SwiGLU(RMSNorm(h))
// whose logits are the target's own LM head applied to f^ (no final norm, no head of its own).
// Its rotary table is LlamaGen's 2D one with a prefix one row shorter than the target's: row k is
// the pair of the target's position k, i.e. the position of the token it embeds.
//
// The drafter is bound to its target at load (the LM head is the target's tensor, the width and
// vocabulary must match). forward() reads ForwardInputs::features; its hidden output is f^.
#pragma once

#include <vector>

#include "models/autoregressive_model.h"
#include "tessera/config.h"

namespace tessera {

class EagleDrafterModel final : public AutoregressiveModel {
 public:
  // Throws a ParameterError naming the drafter directory when it does not fit `target`.
  EagleDrafterModel(const ModelConfig& config, const AutoregressiveModel& target);

  const EagleConfig& config() const { return cfg_; }
  // Which target hidden state the drafter reads.
  HiddenState feature() const {
    return cfg_.post_norm ? HiddenState::PostNorm : HiddenState::PreNorm;
  }
  int32_t prefix_token() const { return cfg_.prefix_token; }

  const ArModelInfo& info() const override { return info_; }
  Backend& backend() const override { return backend_; }
  int32_t prefix_position(int i) const override { return i; }
  int32_t token_position(int t) const override { return cfg_.prefix_len + t; }
  // The drafter has no condition embedding: its prefix rows pair the target's prefix features
  // with prefix_token().
  Tensor embed_conditions(std::span<const Condition* const>, bool,
                          std::vector<uint8_t>&) const override;
  std::unique_ptr<ForwardWorkspace> make_workspace(int max_rows, int max_outputs) const override;
  int64_t workspace_bytes(int max_rows, int max_outputs) const override;
  ForwardOutputs forward(const ForwardInputs& in, KVCache& cache,
                         ForwardWorkspace& workspace) const override;
  int64_t streamed_weight_bytes() const override;
  const Tensor& output_head() const override { return head_; }

 private:
  EagleConfig cfg_;
  ArModelInfo info_;
  Backend& backend_;
  Tensor head_;  // the target's
  Tensor embed_tokens_, fc_embed_, fc_feature_, fc_bias_;
  Tensor wqkv_, wo_, post_norm_, w13_, w2_;
  Tensor rope_;
};

}  // namespace tessera
