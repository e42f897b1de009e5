#include "tensor/backend.h"

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

bool replay_or_run(Backend& backend, std::map<int, std::unique_ptr<OpGraph>>& graphs, int key,
                   const std::function<void()>& ops) {
  auto graph = graphs.find(key);
  if (graph == graphs.end()) graph = graphs.emplace(key, backend.capture(ops)).first;
  if (!graph->second) {
    ops();
    return false;
  }
  backend.replay(*graph->second);
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
