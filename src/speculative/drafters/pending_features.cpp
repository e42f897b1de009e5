#include "speculative/drafters/pending_features.h"

#include "tessera/error.h"

namespace tessera::speculative {

PendingFeatures::PendingFeatures(Backend& backend, int dim, bool cfg)
    : be_(backend), dim_(dim), halves_(cfg ? 2 : 1) {
  check(dim >= 1, "internal: pending features without a dimension");
  constexpr int64_t kInitial = 64;
  rows_ = be_.zeros(DType::F32, {kInitial, dim_});
  for (int32_t r = 1; r < kInitial; ++r) free_.insert(r);
}

int32_t PendingFeatures::take() {
  if (free_.empty()) {  // full: twice the rows, the held ones kept (indices stay valid)
    const int64_t held = double_rows(be_, rows_);
    for (int64_t r = held; r < 2 * held; ++r) free_.insert(static_cast<int32_t>(r));
  }
  const int32_t r = *free_.begin();
  free_.erase(free_.begin());
  return r;
}

void PendingFeatures::append(int id, const Tensor& cond, std::span<const int64_t> cond_rows,
                             const Tensor* uncond, std::span<const int64_t> uncond_rows) {
  const size_t n = cond_rows.size();
  check(cond.data && cond.dtype == DType::F32 && cond.dim(-1) == dim_ &&
            (halves_ == 1 || (uncond && uncond->data && uncond->dtype == DType::F32 &&
                              uncond->dim(-1) == dim_ && uncond_rows.size() == n)),
        "internal: the EAGLE drafter needs the target's hidden states");
  std::vector<int32_t>& held = held_[id];
  for (int h = 0; h < halves_; ++h) {
    const Tensor& src = h == 0 ? cond : *uncond;
    const std::span<const int64_t> from = h == 0 ? cond_rows : uncond_rows;
    std::vector<int32_t> to(n);
    for (size_t k = 0; k < n; ++k) {
      check(from[k] >= 0 && from[k] < src.dim(0), "internal: a pending feature row out of range");
      to[k] = take();
    }
    // One copy per run of rows consecutive in both the source and the table (a prefill's).
    for (size_t k = 0; k < n;) {
      size_t e = k + 1;
      while (e < n && from[e] == from[e - 1] + 1 && to[e] == to[e - 1] + 1) ++e;
      const auto len = static_cast<int64_t>(e - k);
      Tensor dst = rows_.rows(to[k], len);
      be_.copy(src.rows(from[k], len), dst);
      k = e;
    }
    if (h == 0) held.resize(held.size() + n * halves_);
    for (size_t k = 0; k < n; ++k) held[held.size() - (n - k) * halves_ + h] = to[k];
  }
}

int PendingFeatures::count(int id) const {
  const auto it = held_.find(id);
  return it == held_.end() ? 0 : static_cast<int>(it->second.size()) / halves_;
}

int32_t PendingFeatures::at(int id, int half, int k) const {
  const std::vector<int32_t>& held = held_.at(id);
  check(half >= 0 && half < halves_ && k >= 0 && (k + 1) * halves_ <= static_cast<int>(held.size()),
        "internal: a pending feature out of range");
  return held[static_cast<size_t>(k) * halves_ + half];
}

void PendingFeatures::clear(int id) {
  const auto it = held_.find(id);
  if (it == held_.end()) return;
  free_.insert(it->second.begin(), it->second.end());
  held_.erase(it);
}

}  // namespace tessera::speculative
