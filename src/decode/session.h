// A session owns everything one model's generation changes: the KV cache, split into slots (one
// sequence each) that are acquired and released as images come and go, the activation
// workspace and the input buffers, both reserved once at the largest batch (stable addresses).
// The model itself stays read-only and can be shared by several sessions. Modelled on the split
// of llama.cpp's llama_model (weights) and llama_context (state and memory).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "models/autoregressive_model.h"

namespace tessera {

struct SessionOptions {
  int n_slots = 1;              // sequences held at once (an image takes one, two with CFG)
  int extra_capacity = 0;       // positions per slot beyond prefix + tokens (draft nodes)
  int max_new = 1;              // most rows one sequence appends in one decoding forward
  int max_outputs_per_seq = 1;  // most output rows per sequence in one forward
  // Which hidden state forwards may return (drafters that read them); with one, a prefill returns
  // every prefix row's.
  HiddenState hidden_states = HiddenState::None;
};

// One forward, described on the host. Rows are (sequence, new token) pairs: row r*n_new + j is
// token j of slots[r].
struct StepBatch {
  int n_new = 0;
  std::vector<int32_t> slots;
  std::vector<int32_t> tokens;         // [slots * n_new]; ignored when `embeddings` is set
  const Tensor* embeddings = nullptr;  // f32 [slots * n_new, dim]
  std::vector<float> features;         // [slots * n_new, feature_dim] (models that read them)
  // Or the features are written where the model runs, by forward()'s edit (features empty).
  bool features_on_device = false;
  std::vector<int32_t> positions;  // [slots * n_new] position ids
  std::vector<int32_t> output_at;  // indices j in [0, n_new) whose outputs each slot returns
  std::vector<uint8_t> mask;       // optional [slots][n_new][mask_stride] (tree attention)
  int mask_stride = 0;
  // Or the mask ([slots][n_new][mask_stride], mask empty) is written where the model runs, by
  // forward()'s edit (a dynamic tree's frontier on the device loop).
  bool mask_on_device = false;
  // Optional tree attention in compact form (instead of `mask`): per row, the index j' < j of
  // the row (of the same sequence) it hangs below, or -1. A row sees the sequence's cached
  // slots, its ancestors and itself; the session expands this into the mask.
  std::vector<int32_t> parents;  // [slots * n_new]
  bool output_hidden = false;
};

class Session {
 public:
  Session(const AutoregressiveModel& model, const SessionOptions& options);

  const AutoregressiveModel& model() const { return model_; }
  Backend& backend() const { return model_.backend(); }
  int n_slots() const { return cache_.n_seq(); }
  int capacity() const { return cache_.capacity(); }  // positions per slot

  // Slots (llama.cpp's sequence ids). Acquiring throws when every slot is in use.
  int acquire_slot();
  void release_slot(int slot);
  int free_slots() const;

  // Per-slot memory operations (llama.cpp's seq_rm / seq_cp; compact keeps a tree's path).
  int length(int slot) const { return cache_.length(slot); }
  void remove(int slot, int from) { cache_.remove(slot, from); }
  void copy(int src, int dst, int length) { cache_.copy(src, dst, length); }
  void compact(int slot, int from, std::span<const int> keep) { cache_.compact(slot, from, keep); }

  // Runs the condition prefixes of `conds` into `slots` (conditional rows first, then with_uncond
  // the unconditional ones, one slot each); outputs are the last prefix position of every slot,
  // or with hidden states every prefix position's (prefill_rows() per slot, the last one last).
  ForwardOutputs prefill(std::span<const Condition* const> conds, bool with_uncond,
                         std::span<const int32_t> slots);
  int prefill_rows() const;
  HiddenState hidden_states() const { return hidden_states_; }
  // Uploads the batch's inputs (one transfer per buffer), runs the model, advances the slots.
  ForwardOutputs forward(const StepBatch& batch);
  // The same, with `edit` run on the uploaded inputs before the model (inputs the device writes
  // itself: a drafter's fed tokens and features, gathered where they are).
  ForwardOutputs forward(const StepBatch& batch, const std::function<void(ForwardInputs&)>& edit);
  // forward() in three parts, for steps run as captured graphs (VanillaDecoder's device loop, the
  // speculative device loop's passes): prepare uploads the batch's inputs and returns them, views
  // of the session's buffers whose addresses depend only on the batch's shape (a tree's mask
  // included: its stride is the capacity); run runs the model on them (once, or captured and
  // replayed); advance records n more cached positions for each slot.
  // part 1 puts the inputs beside part 0's, for a graph that runs two forwards of different
  // shapes (a draft chain's catch-up, then its steps; no mask or features there).
  ForwardInputs prepare(const StepBatch& batch, int part = 0);
  ForwardOutputs run(const ForwardInputs& in);
  void advance(std::span<const int32_t> slots, int n);
  // What run(in) launches with, for a graph's key: the inputs' tensors and sizes (the cache, the
  // workspace and the weights stay put for the session's life).
  static void add_to(GraphKey& key, const ForwardInputs& in);
  // Copies t to `host` (resized) and waits for it.
  void read(const Tensor& t, std::vector<float>& host);

  int64_t forwards() const { return forwards_; }  // forward() calls

 private:
  // Throws before anything is allocated when the cache and workspace `o` asks for do not fit in
  // the backend's free memory (an error naming the batch, not a crash by the OOM killer).
  // Returns the model (it initialises model_, the first member).
  static const AutoregressiveModel& fits_in_memory(const AutoregressiveModel& model,
                                                   const SessionOptions& o);

  const AutoregressiveModel& model_;
  KVCache cache_;
  std::unique_ptr<ForwardWorkspace> workspace_;
  std::vector<uint8_t> in_use_;
  // I32, kIndexParts parts of index_part_: tokens | positions | seq | past | output rows | tree
  // parents
  static constexpr int kIndexParts = 2;
  int64_t index_part_ = 0;
  Tensor index_buffer_;
  Tensor mask_buffer_;            // U8, reserved on first use
  Tensor feature_buffer_;         // F32 [max rows, feature_dim], reserved on first use
  Tensor features_;               // the prepared batch's rows of feature_buffer_
  std::vector<int32_t> staging_;  // host side of index_buffer_
  HiddenState hidden_states_ = HiddenState::None;
  int64_t forwards_ = 0;
};

}  // namespace tessera
