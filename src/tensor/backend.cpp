#include "tensor/backend.h"

#include <algorithm>

#include "tensor/cpu/cpu_backend.h"
#include "tessera/error.h"

namespace tessera {

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

std::vector<float> download_f32(Backend& backend, const Tensor& t) {
  check(t.dtype == DType::F32,
        "internal: download_f32 of a " + std::string(dtype_name(t.dtype)) + " tensor");
  std::vector<float> out(static_cast<size_t>(t.numel()));
  backend.download_async(t, out.data());
  backend.synchronize();
  return out;
}

Tensor grown_rows(Backend& backend, Tensor& buffer, DType dtype, int64_t rows, int64_t width) {
  if (!buffer.data || buffer.dtype != dtype || buffer.dim(-1) != width || buffer.dim(0) < rows)
    buffer = backend.empty(dtype, {rows, width});
  return buffer.rows(0, rows);
}

RowPairs upload_row_pairs(Backend& backend, Tensor& buffer, std::span<const int32_t> pairs) {
  check(pairs.size() % 2 == 0, "internal: row pairs of odd length");
  const auto n = static_cast<int64_t>(pairs.size()) / 2;
  if (n == 0) return {};
  Tensor index = grown_rows(backend, buffer, DType::I32, 2 * n, 1).view({2 * n});
  backend.upload_into(pairs.data(), index);
  return {index.rows(0, n), index.rows(n, n)};
}

int64_t double_rows(Backend& backend, Tensor& store) {
  const int64_t held = store.dim(0);
  Tensor bigger = backend.empty(store.dtype, {2 * held, store.dim(-1)});
  Tensor front = bigger.rows(0, held);
  backend.copy(store, front);
  store = bigger;
  return held;
}

GraphCache::GraphCache(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

GraphKey& GraphKey::add(int64_t value) {
  bytes_.append(reinterpret_cast<const char*>(&value), sizeof value);
  return *this;
}

GraphKey& GraphKey::add(const Tensor& t) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(t.data);
  add(static_cast<int64_t>(at)).add(static_cast<int64_t>(t.dtype));
  add(static_cast<int64_t>(t.layout)).add(t.ndim());
  for (const int64_t d : t.shape) add(d);
  return *this;
}

bool GraphCache::replay_or_run(Backend& backend, const GraphKey& graph_key,
                               const std::function<void()>& ops) {
  const std::string& key = graph_key.bytes();
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    if (graphs_.size() >= capacity_)
      graphs_.erase(std::min_element(
          graphs_.begin(), graphs_.end(),
          [](const auto& a, const auto& b) { return a.second.used < b.second.used; }));
    it = graphs_.emplace(key, Entry{backend.capture(ops), 0}).first;
  }
  it->second.used = ++clock_;
  if (!it->second.graph) {
    ops();
    return false;
  }
  backend.replay(*it->second.graph);
  return true;
}

Tensor upload_ids(Backend& backend, std::span<const int32_t> ids) {
  return backend.upload(ids.data(), DType::I32, {static_cast<int64_t>(ids.size())});
}

int set_cpu_threads(int n) {
  return static_cast<CpuBackend&>(cpu_backend()).set_threads(n);
}

int cpu_threads() {
  return static_cast<CpuBackend&>(cpu_backend()).threads();
}

}  // namespace tessera
