#include "speculative/drafters/head_rows.h"

#include <cstring>

#include "tessera/error.h"

namespace tessera::speculative {

HeadRows::HeadRows(Backend& backend, int vocab, const std::string& method) : be_(backend) {
  check_param(can_sample_rows(backend, vocab), "method",
              method + " computes its heads' distributions on " + backend.name() +
                  ", which takes vocabularies up to " + std::to_string(kMaxDeviceSampleVocab) +
                  "; this model's is " + std::to_string(vocab));
}

void HeadRows::compute(const Tensor& logits, int rows, int count, bool cfg,
                       std::span<const DeviceSampleParams> params, const Tensor* flag_into) {
  const int R = cfg ? 2 * rows : rows;
  V_ = static_cast<int>(logits.dim(-1));
  n_ = rows * count;
  check(static_cast<int>(params.size()) == n_ && logits.dim(0) >= int64_t{count} * R,
        "internal: head rows' settings");
  // Up: the settings, then the error flag (0).
  flag_at_ = aligned_offset(static_cast<size_t>(n_) * sizeof(DeviceSampleParams));
  up_host_.assign(flag_at_ + sizeof(int32_t), 0);
  std::memcpy(up_host_.data(), params.data(), params.size_bytes());
  grown_rows(be_, up_, DType::U8, static_cast<int64_t>(up_host_.size()), 1);
  Tensor up = up_.rows(0, static_cast<int64_t>(up_host_.size()));
  be_.upload_into(up_host_.data(), up);
  // The distributions, then a word for the flag, so that read() takes both in one download.
  grown_rows(be_, probs_, DType::F32, int64_t{n_} * V_ + 1, 1);
  flag_ = flag_into ? *flag_into : up_.bytes_as(flag_at_, DType::I32, {1});
  Tensor flag = flag_;
  const size_t row_bytes = static_cast<size_t>(rows) * sizeof(DeviceSampleParams);
  for (int k = 0; k < count; ++k) {
    const Tensor cond = logits.rows(int64_t{k} * R, rows);
    const Tensor uncond = cfg ? logits.rows(int64_t{k} * R + rows, rows) : Tensor{};
    const Tensor p = up_.bytes_as(k * row_bytes, DType::U8, {static_cast<int64_t>(row_bytes)});
    Tensor q =
        probs_.bytes_as(static_cast<size_t>(k) * rows * V_ * sizeof(float), DType::F32, {rows, V_});
    distribution_rows(be_, cond, cfg ? &uncond : nullptr, rows, p, q, flag);
  }
}

const std::vector<int32_t>& HeadRows::top(int K) {
  // Down: the ids, then the flag; one download.
  const int64_t n_ids = int64_t{n_} * K;
  grown_rows(be_, down_, DType::I32, n_ids + 1, 1);
  Tensor ids = down_.rows(0, n_ids), flag_back = down_.rows(n_ids, 1);
  top_rows(be_, probs_.bytes_as(0, DType::F32, {n_, V_}), n_, K, ids);
  be_.copy(flag_, flag_back);
  down_host_.resize(static_cast<size_t>(n_ids) + 1);
  be_.download(down_.rows(0, n_ids + 1), down_host_.data());
  if (down_host_[n_ids] != 0) throw Error(device_sample_failed());
  ids_.assign(down_host_.begin(), down_host_.begin() + n_ids);
  return ids_;
}

const DeviceDraftRows& HeadRows::top_on_device(int K) {
  const int64_t n_ids = int64_t{n_} * K;
  grown_rows(be_, down_, DType::I32, n_ids + 1, 1);
  grown_rows(be_, inputs_, DType::I32, n_ids, 1);
  Tensor ids = down_.rows(0, n_ids), flag_back = down_.rows(n_ids, 1);
  Tensor inputs = inputs_.rows(0, n_ids);
  top_rows(be_, probs_.bytes_as(0, DType::F32, {n_, V_}), n_, K, ids, nullptr, &inputs);
  be_.copy(flag_, flag_back);
  on_device_.tokens = down_.rows(0, n_ids + 1).view({n_ids + 1});
  on_device_.inputs = inputs.view({n_ids});
  return on_device_;
}

HeadRows::Ranked HeadRows::top_with_mass_on_device(int K) {
  const int64_t n_ids = int64_t{n_} * K;
  grown_rows(be_, down_, DType::I32, 2 * n_ids, 1);
  Ranked r{down_.rows(0, n_ids).view({n_ids}),
           down_.bytes_as(static_cast<size_t>(n_ids) * sizeof(int32_t), DType::F32, {n_ids}),
           flag_};
  top_rows(be_, probs_.bytes_as(0, DType::F32, {n_, V_}), n_, K, r.ids, &r.mass);
  return r;
}

const std::vector<float>& HeadRows::read() {
  const int64_t n = int64_t{n_} * V_;
  Tensor flag_back = probs_.bytes_as(static_cast<size_t>(n) * sizeof(float), DType::I32, {1});
  be_.copy(flag_, flag_back);
  rows_.resize(static_cast<size_t>(n) + 1);
  be_.download(probs_.rows(0, n + 1), rows_.data());
  int32_t failed = 0;
  std::memcpy(&failed, &rows_[n], sizeof failed);
  if (failed != 0) throw Error(device_sample_failed());
  rows_.pop_back();
  return rows_;
}

}  // namespace tessera::speculative
