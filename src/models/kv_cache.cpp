#include "models/kv_cache.h"

#include <algorithm>

#include "tessera/error.h"

namespace tessera {

KVCache::KVCache(Backend& backend, int n_layer, int n_seq, int capacity, int n_kv_head,
                 int head_dim)
    : backend_(backend), capacity_(capacity), len_(n_seq, 0) {
  for (int l = 0; l < n_layer; ++l) {
    k_.push_back(backend.zeros(DType::F32, {n_seq, n_kv_head, capacity, head_dim}));
    v_.push_back(backend.zeros(DType::F32, {n_seq, n_kv_head, capacity, head_dim}));
  }
  visible_host_.assign(static_cast<size_t>(n_seq) * capacity, 1);
}

void KVCache::truncate(int seq, int length) {
  check(length >= 0 && length <= len_.at(seq), "KV cache: cannot truncate sequence " +
                                                   std::to_string(seq) + " to " +
                                                   std::to_string(length));
  len_[seq] = length;
}

void KVCache::clear() {
  std::fill(len_.begin(), len_.end(), 0);
  if (any_hidden_) {
    std::fill(visible_host_.begin(), visible_host_.end(), 1);
    visible_dirty_ = true;
  }
}

void KVCache::set_key_visible(int seq, int slot, bool visible) {
  check(seq >= 0 && seq < n_seq() && slot >= 0 && slot < capacity_, "KV cache: bad slot");
  visible_host_[static_cast<size_t>(seq) * capacity_ + slot] = visible ? 1 : 0;
  if (!visible) any_hidden_ = true;
  visible_dirty_ = true;
}

AttentionBatch KVCache::plan_append(std::span<const int32_t> seqs, int n_new) {
  AttentionBatch b;
  b.n_new = n_new;
  b.seq.assign(seqs.begin(), seqs.end());
  for (int32_t s : seqs) {
    check(s >= 0 && s < n_seq(), "KV cache: sequence " + std::to_string(s) + " out of range");
    check(len_[s] + n_new <= capacity_, "KV cache: sequence " + std::to_string(s) + " would hold " +
                                            std::to_string(len_[s] + n_new) + " tokens, capacity " +
                                            std::to_string(capacity_));
    b.past.push_back(len_[s]);
  }
  if (any_hidden_) {
    if (visible_dirty_) {  // the only host->device transfer, and only when visibility changed
      visible_ = backend_.upload(visible_host_.data(), DType::U8, {n_seq(), capacity_});
      visible_dirty_ = false;
    }
    b.key_visible = &visible_;
  }
  return b;
}

void KVCache::commit(const AttentionBatch& b) {
  for (size_t r = 0; r < b.seq.size(); ++r) len_[b.seq[r]] = b.past[r] + b.n_new;
}

}  // namespace tessera
