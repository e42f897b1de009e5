#include "tensor/backend.h"

#include "tensor/cpu/cpu_backend.h"

namespace tessera {

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

Tensor upload_ids(Backend& backend, std::span<const int32_t> ids) {
  return backend.upload(ids.data(), DType::I32, {static_cast<int64_t>(ids.size())});
}

void set_cpu_threads(int n) {
  static_cast<CpuBackend&>(cpu_backend()).set_threads(n);
}

int cpu_threads() {
  return static_cast<CpuBackend&>(cpu_backend()).threads();
}

}  // namespace tessera
