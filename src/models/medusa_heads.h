// Medusa's draft heads (Cai et al., 2024, "Medusa: Simple LLM Inference Acceleration Framework
// with Multiple Decoding Heads", §2.1.1; FasterDecoding/Medusa e2a5d20, shared notes
// jacobi_grouped_spatial.md §4.1): K heads on the target's last hidden state h_t after its final
// norm (the row whose logits predict token t + 1). Head k (k = 0..K-1) predicts token t + 2 + k:
//   y_k = h_t + SiLU(W_k h_t + b_k)        (Medusa's ResBlock, one layer per head)
//   logits_k = lm_head(y_k)                 (the target's LM head: Medusa-2's shared lm_head)
// or, for heads converted with their own ("lm_head": "per_head", Medusa-1), that head's.
//
// Hawk's heads (Chen et al., 2025, §4.2, App. C) load here too ("architecture": "hawk"): its
// horizontal heads are Medusa's (heads 0..K-1), its D vertical heads follow as heads K..K+D-1,
// vertical head K + d - 1 predicting the token d image rows below the one h_t's logits predict,
// token t + 1 + d·W, of the same ResBlock form with the shared LM head.
//
// The heads are bound to their target at load (its LM head, width and vocabulary). They are
// weights only: a drafter owns the Workspace its forwards write.
#pragma once

#include <vector>

#include "models/autoregressive_model.h"
#include "tessera/config.h"

namespace tessera {

class MedusaHeads {
 public:
  // Throws a ParameterError naming the heads' directory when they do not fit `target`.
  MedusaHeads(const ModelConfig& config, const AutoregressiveModel& target);

  const MedusaConfig& config() const { return cfg_; }
  int num_heads() const { return cfg_.num_heads; }  // Medusa's (Hawk's horizontal ones)
  int vertical_heads() const { return cfg_.vertical_heads; }
  int total_heads() const { return cfg_.num_heads + cfg_.vertical_heads; }
  int dim() const { return cfg_.dim; }
  int vocab_size() const { return cfg_.vocab_size; }
  Backend& backend() const { return backend_; }

  struct Workspace {
    int rows = 0;       // feature rows
    int head_rows = 0;  // (head, feature row) pairs one forward may compute
    Tensor features;    // [rows, dim]: the caller writes the hidden states here
    Tensor hidden;      // [head_rows, dim]
    Tensor logits;      // [head_rows, vocab]
  };
  // For forwards of at most max_rows feature rows and max_head_rows (head, row) pairs (count *
  // rows; default: every head on max_rows rows).
  Workspace make_workspace(int max_rows, int max_head_rows = 0) const;

  // Logits of heads first..first+count-1 for the first `rows` rows of ws.features (count * rows
  // at most ws.head_rows):
  // [count * rows, vocab], head first + k's for feature row r at row k * rows + r. A view into
  // ws, valid until its next forward.
  Tensor forward(Workspace& ws, int rows, int first, int count) const;
  Tensor forward(Workspace& ws, int rows, int heads) const { return forward(ws, rows, 0, heads); }

  int64_t streamed_weight_bytes() const;

 private:
  MedusaConfig cfg_;
  Backend& backend_;
  Tensor shared_head_;                   // the target's LM head [vocab, dim]
  std::vector<Tensor> w_, b_, lm_head_;  // per head; lm_head_ empty with the shared head
};

}  // namespace tessera
