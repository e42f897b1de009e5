// The interface every autoregressive (next-token) model implements: LlamaGen now; Chameleon,
// T5-conditioned LlamaGen and the discrete parts of other families later. The decode loops, the
// speculative loop and the drafters see only this interface, never a model class.
//
// A model is weights only: read-only after loading and shareable between threads. Everything a
// generation changes (KV caches, activations, inputs) lives outside it, in a KVCache and a
// ForwardWorkspace owned by a session (decode/session.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "models/kv_cache.h"
#include "tensor/backend.h"
#include "tessera/tessera.h"

namespace tessera {

// What a session needs to know to size its state, and the vocabulary a sampler works over.
struct ArModelInfo {
  int n_layer = 0, n_kv_head = 0, head_dim = 0;
  int dim = 0;          // width of the hidden states a forward can return
  int vocab_size = 0;   // logits per output row
  int prefix_len = 0;   // condition positions before the first generated token
  int n_tokens = 0;     // tokens generated per sequence (an image's token grid)
  int row_width = 0;    // tokens per image row in raster order (Hawk's W); 0: not a grid
  int feature_dim = 0;  // width of the features every input row reads beside its token (EAGLE: the
                        // target's hidden state); 0: none
};

// Which hidden state a forward returns beside the logits, for drafters that read the target: the
// last layer's residual stream (the final norm's input) or the final norm's output (EAGLE's f).
enum class HiddenState { None, PreNorm, PostNorm };

// One forward's inputs, all backend tensors: views into buffers a session reserved once and
// writes once per step, so their addresses are stable and a device backend can replay the call.
struct ForwardInputs {
  AttentionBatch attn;                 // batch sequences, their cached lengths, optional mask
  Tensor tokens;                       // I32 [rows]: token ids (unused when `embeddings` is set)
  const Tensor* embeddings = nullptr;  // f32 [rows, dim]: input embeddings (condition prefixes)
  const Tensor* features = nullptr;    // f32 [rows, info().feature_dim]: models that read them
  Tensor positions;                    // I32 [rows]: position ids (LlamaGen: RoPE table rows)
  Tensor output_rows;                  // I32 [n_out]: batch rows whose outputs are returned
  bool output_hidden = false;          // also return those rows' hidden states
  bool hidden_after_norm = false;      // ... after the final norm (HiddenState::PostNorm)
  int rows() const { return attn.n_seq * attn.n_new; }
};

// Views into the workspace, valid until its next forward.
struct ForwardOutputs {
  Tensor logits;  // f32 [n_out, vocab]
  // f32 [n_out, dim]: the last layer's residual stream (the final norm's input, or its output with
  // hidden_after_norm), the features draft heads read (EAGLE, Medusa, Hawk); undefined unless
  // asked for.
  Tensor hidden;
};

// A model's activation buffers, reserved for the largest batch a session will run.
class ForwardWorkspace {
 public:
  virtual ~ForwardWorkspace() = default;
  virtual int max_rows() const = 0;
  virtual int max_outputs() const = 0;
};

class AutoregressiveModel {
 public:
  virtual ~AutoregressiveModel() = default;
  virtual const ArModelInfo& info() const = 0;
  virtual Backend& backend() const = 0;

  // Position ids of prefix slot i and of generated token t (raster order).
  virtual int32_t prefix_position(int i) const = 0;
  virtual int32_t token_position(int t) const = 0;

  // Prefix embeddings [R * prefix_len, dim] for R = n (conds) or 2n (with_uncond: rows n..2n-1
  // are the unconditional ones). Sets hidden_keys[r * prefix_len + i] = 1 for prefix slots whose
  // keys only their own query may see (LlamaGen t2i caption padding); it is resized to fit.
  virtual Tensor embed_conditions(std::span<const Condition* const> conds, bool with_uncond,
                                  std::vector<uint8_t>& hidden_keys) const = 0;

  virtual std::unique_ptr<ForwardWorkspace> make_workspace(int max_rows, int max_outputs) const = 0;
  // Bytes make_workspace(max_rows, max_outputs) allocates (checked against free memory first).
  virtual int64_t workspace_bytes(int max_rows, int max_outputs) const = 0;

  // Appends the batch's rows to `cache` (the caller advances its lengths) and returns the outputs
  // of in.output_rows.
  virtual ForwardOutputs forward(const ForwardInputs& in, KVCache& cache,
                                 ForwardWorkspace& workspace) const = 0;

  // Bytes of weights one decode step streams (the bandwidth roofline of a step).
  virtual int64_t streamed_weight_bytes() const = 0;

  // The LM head [vocab, dim] (a linear weight): drafters that share it (EAGLE, Medusa) read it.
  virtual const Tensor& output_head() const = 0;
};

// Whether every generated token t sits at position(0) + t: a device loop that moves positions on
// the device (by one a vanilla step, by the tokens a burst's round commits) needs it.
inline bool consecutive_token_positions(const AutoregressiveModel& model) {
  for (int t = 1; t < model.info().n_tokens; ++t)
    if (model.token_position(t) != model.token_position(t - 1) + 1) return false;
  return true;
}

}  // namespace tessera
