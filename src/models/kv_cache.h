// Key/value cache for many sequences at once (CFG halves, several images, draft branches), one
// fixed-capacity slot per sequence. Each sequence has its own length; a forward appends any
// number of tokens to a set of sequences; a sequence can be cut back (rejected drafts), copied
// into another (forking a branch) or compacted (keeping the accepted path of a draft tree).
#pragma once

#include <cstdint>
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
  // After a forward appended n tokens: the sequence now holds `length` of them.
  void set_length(int seq, int length);
  // Drops positions [from, length) of `seq` (from <= length).
  void remove(int seq, int from);
  // Makes `dst` hold a copy of the first `length` positions of `src`.
  void copy(int src, int dst, int length);
  // Moves positions keep[i] (each >= from, ascending) to from + i and drops the rest after from:
  // the accepted path of a draft tree becomes contiguous.
  void compact(int seq, int from, std::span<const int> keep);
  // Empties every sequence and makes every key visible again.
  void clear();
  void clear(int seq);

  // Hides cache slot `slot` of `seq` from every query but its own (LlamaGen t2i caption padding).
  void set_key_visible(int seq, int slot, bool visible);
  // The visibility table [n_seq, capacity] (U8) when any key is hidden, else null; uploaded only
  // when it changed.
  const Tensor* key_visible();

  Tensor& k(int layer) { return k_[layer]; }
  Tensor& v(int layer) { return v_[layer]; }

 private:
  // Rows from[i] -> to[i] of every layer's K and V ([seq, head, slot] rows), reads before writes.
  void move(std::span<const int32_t> from, std::span<const int32_t> to);
  int32_t row(int seq, int head, int slot) const;
  Backend& backend_;
  int capacity_, n_kv_head_, head_dim_;
  std::vector<int> len_;
  std::vector<Tensor> k_, v_;
  std::vector<uint8_t> visible_host_;
  Tensor visible_;
  Tensor index_;  // I32: the row pairs of the last move, reused
  std::vector<int32_t> index_host_;
  bool any_hidden_ = false, visible_dirty_ = false;
};

}  // namespace tessera
