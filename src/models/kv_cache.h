// Key/value cache for many sequences at once (CFG halves, several images, draft branches).
// Each sequence has its own length; a forward appends any number of tokens to a set of
// sequences, and a sequence can be truncated back to any length (rejected draft tokens).
#pragma once

#include <span>
#include <vector>

#include "tensor/backend.h"

namespace tessera {

class KVCache {
 public:
  KVCache(Backend& backend, int n_layer, int n_seq, int capacity, int n_kv_head, int head_dim);

  int n_seq() const { return static_cast<int>(len_.size()); }
  int capacity() const { return capacity_; }
  int length(int seq) const { return len_.at(seq); }
  void truncate(int seq, int length);  // length <= current length
  void clear();

  // Hides cache slot `slot` of `seq` from every query but its own (LlamaGen t2i caption padding).
  void set_key_visible(int seq, int slot, bool visible);

  // Attention description for appending n_new tokens to each of `seqs` (not yet committed).
  AttentionBatch plan_append(std::span<const int32_t> seqs, int n_new);
  // Advances the lengths of the planned sequences by n_new (after the forward ran).
  void commit(const AttentionBatch& b);

  Tensor& k(int layer) { return k_[layer]; }
  Tensor& v(int layer) { return v_[layer]; }

 private:
  Backend& backend_;
  int capacity_;
  std::vector<int> len_;
  std::vector<Tensor> k_, v_;
  std::vector<uint8_t> visible_host_;
  Tensor visible_;
  bool any_hidden_ = false, visible_dirty_ = false;
};

}  // namespace tessera
