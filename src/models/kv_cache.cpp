#include "models/kv_cache.h"

#include <algorithm>
#include <climits>

#include "tessera/error.h"

namespace tessera {

KVCache::KVCache(Backend& backend, int n_layer, int n_seq, int capacity, int n_kv_head,
                 int head_dim)
    : backend_(backend),
      capacity_(capacity),
      n_kv_head_(n_kv_head),
      head_dim_(head_dim),
      len_(n_seq, 0) {
  // Moves name rows [seq, head, slot] by I32 index.
  check(static_cast<int64_t>(n_seq) * n_kv_head * capacity <= INT32_MAX,
        "KV cache: " + std::to_string(n_seq) + " sequences of " + std::to_string(capacity) +
            " positions are too many rows to index");
  for (int l = 0; l < n_layer; ++l) {
    k_.push_back(backend.zeros(DType::F32, {n_seq, n_kv_head, capacity, head_dim}));
    v_.push_back(backend.zeros(DType::F32, {n_seq, n_kv_head, capacity, head_dim}));
  }
  visible_host_.assign(static_cast<size_t>(n_seq) * capacity, 1);
}

void KVCache::set_length(int seq, int length) {
  check(seq >= 0 && seq < n_seq() && length >= 0 && length <= capacity_,
        "KV cache: sequence " + std::to_string(seq) + " cannot hold " + std::to_string(length) +
            " tokens, capacity " + std::to_string(capacity_));
  len_[seq] = length;
}

void KVCache::remove(int seq, int from) {
  check(from >= 0 && from <= len_.at(seq), "KV cache: cannot cut sequence " + std::to_string(seq) +
                                               " back to " + std::to_string(from));
  len_[seq] = from;
}

// A position of a sequence is n_kv_head rows of head_dim values per layer (the cache is [seq, kv
// head, slot, head_dim]). Moves go through the backend, so the cache may live on a device: the
// row pairs are uploaded once and each layer's K and V move in one op (2 x n_layer ops, not one
// copy per layer, head and position).
void KVCache::move(std::span<const int32_t> from, std::span<const int32_t> to) {
  const size_t n = from.size();
  if (n == 0) return;
  index_host_.assign(from.begin(), from.end());
  index_host_.insert(index_host_.end(), to.begin(), to.end());
  if (index_.numel() < static_cast<int64_t>(2 * n))
    index_ = backend_.empty(DType::I32, {static_cast<int64_t>(2 * n)});
  Tensor pairs = index_.rows(0, static_cast<int64_t>(2 * n));
  backend_.upload_into(index_host_.data(), pairs);
  const Tensor src = pairs.rows(0, static_cast<int64_t>(n));
  const Tensor dst = pairs.rows(static_cast<int64_t>(n), static_cast<int64_t>(n));
  const int64_t rows = static_cast<int64_t>(n_seq()) * n_kv_head_ * capacity_;
  for (std::vector<Tensor>* kv : {&k_, &v_})
    for (Tensor& t : *kv) {
      Tensor all = t.view({rows, head_dim_});
      backend_.move_rows(all, src, dst);
    }
}

int32_t KVCache::row(int seq, int head, int slot) const {
  return static_cast<int32_t>((static_cast<int64_t>(seq) * n_kv_head_ + head) * capacity_ + slot);
}

void KVCache::copy(int src, int dst, int length) {
  check(
      src >= 0 && src < n_seq() && dst >= 0 && dst < n_seq() && length >= 0 && length <= len_[src],
      "KV cache: cannot copy " + std::to_string(length) + " positions of sequence " +
          std::to_string(src) + " to " + std::to_string(dst));
  if (src == dst) {
    len_[dst] = length;
    return;
  }
  std::vector<int32_t> from, to;
  for (int h = 0; h < n_kv_head_; ++h)
    for (int i = 0; i < length; ++i) {
      from.push_back(row(src, h, i));
      to.push_back(row(dst, h, i));
    }
  move(from, to);
  for (int i = 0; i < length; ++i)
    visible_host_[static_cast<size_t>(dst) * capacity_ + i] =
        visible_host_[static_cast<size_t>(src) * capacity_ + i];
  visible_dirty_ = true;
  len_[dst] = length;
}

void KVCache::compact(int seq, int from, std::span<const int> keep) {
  const int len = len_.at(seq);
  int prev = from - 1;
  for (int p : keep) {
    check(p > prev && p < len, "KV cache: compact positions must ascend within the sequence");
    prev = p;
  }
  std::vector<int32_t> src, dst;
  for (int h = 0; h < n_kv_head_; ++h)
    for (size_t i = 0; i < keep.size(); ++i)
      if (keep[i] != from + static_cast<int>(i)) {
        src.push_back(row(seq, h, keep[i]));
        dst.push_back(row(seq, h, from + static_cast<int>(i)));
      }
  move(src, dst);
  len_[seq] = from + static_cast<int>(keep.size());
}

void KVCache::clear() {
  std::fill(len_.begin(), len_.end(), 0);
  if (any_hidden_) {
    std::fill(visible_host_.begin(), visible_host_.end(), 1);
    visible_dirty_ = true;
  }
}

void KVCache::clear(int seq) {
  len_.at(seq) = 0;
  if (any_hidden_) {
    std::fill_n(visible_host_.begin() + static_cast<size_t>(seq) * capacity_, capacity_, 1);
    visible_dirty_ = true;
  }
}

void KVCache::set_key_visible(int seq, int slot, bool visible) {
  check(seq >= 0 && seq < n_seq() && slot >= 0 && slot < capacity_, "KV cache: bad slot");
  visible_host_[static_cast<size_t>(seq) * capacity_ + slot] = visible ? 1 : 0;
  if (!visible) any_hidden_ = true;
  visible_dirty_ = true;
}

const Tensor* KVCache::key_visible() {
  if (!any_hidden_) return nullptr;
  if (visible_dirty_) {  // the only host->device transfer, and only when visibility changed
    if (!visible_.data) visible_ = backend_.empty(DType::U8, {n_seq(), capacity_});
    backend_.upload_into(visible_host_.data(), visible_);
    visible_dirty_ = false;
  }
  return &visible_;
}

}  // namespace tessera
