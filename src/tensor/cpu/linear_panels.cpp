#include "tensor/cpu/linear_panels.h"

#include <cstring>

namespace tessera::cpu {

size_t panel_bytes(DType dtype, int64_t N, int64_t K) {
  return static_cast<size_t>(panel_count(N) * kPanelRows * K) * dtype_size(dtype);
}

namespace {
template <class T>
void pack_typed(const T* w, int64_t N, int64_t K, T* panels) {
  const int64_t P = panel_count(N);
  std::memset(panels, 0, static_cast<size_t>(P * kPanelRows * K) * sizeof(T));
#pragma omp parallel for schedule(static) if (N * K >= (int64_t{1} << 20))
  for (int64_t p = 0; p < P; ++p)
    for (int64_t r = 0; r < kPanelRows && p * kPanelRows + r < N; ++r) {
      const T* row = w + (p * kPanelRows + r) * K;
      T* out = panels + p * K * kPanelRows + r;
      for (int64_t k = 0; k < K; ++k) out[k * kPanelRows] = row[k];
    }
}
}  // namespace

void pack_panels(const void* w, DType dtype, int64_t N, int64_t K, void* panels) {
  if (dtype_size(dtype) == 4)
    pack_typed(static_cast<const uint32_t*>(w), N, K, static_cast<uint32_t*>(panels));
  else
    pack_typed(static_cast<const uint16_t*>(w), N, K, static_cast<uint16_t*>(panels));
}

}  // namespace tessera::cpu
