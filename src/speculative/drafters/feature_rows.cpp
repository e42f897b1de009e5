#include "speculative/drafters/feature_rows.h"

#include <algorithm>

#include "tessera/error.h"

namespace tessera::speculative {

FeatureRows::FeatureRows(Backend& backend, int dim, bool cfg, int images)
    : be_(backend), dim_(dim), halves_(cfg ? 2 : 1) {
  const int capacity = std::max(images, 1);
  rows_ = be_.empty(DType::F32, {static_cast<int64_t>(capacity) * halves_, dim_});
  for (int s = capacity - 1; s >= 0; --s) free_.push_back(s);
}

Tensor FeatureRows::row(int id, int half) const {
  return rows_.rows(static_cast<int64_t>(slot_.at(id)) * halves_ + half, 1);
}

void FeatureRows::put(int id, const Tensor& cond, int64_t cond_row, const Tensor* uncond,
                      int64_t uncond_row) {
  check(cond.data && cond.dtype == DType::F32 && cond.dim(1) == dim_ && cond_row < cond.dim(0) &&
            (halves_ == 1 || uncond),
        "internal: draft heads need the target's post-norm hidden states");
  if (!slot_.count(id)) {
    if (free_.empty()) {  // full: twice the slots, the held rows kept
      const int64_t held = double_rows(be_, rows_);
      for (int s = static_cast<int>(2 * held / halves_) - 1; s >= held / halves_; --s)
        free_.push_back(s);
    }
    slot_[id] = free_.back();
    free_.pop_back();
  }
  Tensor c = row(id, 0);
  be_.copy(cond.rows(cond_row, 1), c);
  if (halves_ == 2) {
    check(uncond->dtype == DType::F32 && uncond->dim(1) == dim_ && uncond_row < uncond->dim(0),
          "internal: draft heads need the target's post-norm hidden states");
    Tensor u = row(id, 1);
    be_.copy(uncond->rows(uncond_row, 1), u);
  }
}

void FeatureRows::gather(std::span<const int> ids, Tensor& dst) {
  const int64_t n = static_cast<int64_t>(ids.size());
  check(dst.dim(0) >= n * halves_ && dst.dim(1) == dim_, "internal: draft heads' feature rows");
  for (int64_t i = 0; i < n; ++i)
    for (int h = 0; h < halves_; ++h) {
      Tensor to = dst.rows(h * n + i, 1);
      be_.copy(row(ids[i], h), to);
    }
}

void FeatureRows::erase(int id) {
  const auto it = slot_.find(id);
  if (it == slot_.end()) return;
  free_.push_back(it->second);
  slot_.erase(it);
}

}  // namespace tessera::speculative
