#include "tensor/cpu/linear_panels.h"

#include <cstring>

#include "common/thread_pool.h"

namespace tessera::cpu {

size_t panel_bytes(DType dtype, int64_t N, int64_t K) {
  return static_cast<size_t>(panel_count(N) * kPanelRows * panel_depth(dtype, K)) *
         dtype_size(dtype);
}

namespace {
template <class T>
void pack_typed(const T* w, DType dtype, int64_t N, int64_t K, T* panels) {
  std::memset(panels, 0, panel_bytes(dtype, N, K));
  parallel_for(
      "pack_linear_weight", N,
      [&](int64_t n) {
        for (int64_t k = 0; k < K; ++k) panels[panel_index(dtype, K, n, k)] = w[n * K + k];
      },
      N * K >= (int64_t{1} << 20));
}
}  // namespace

void pack_panels(const void* w, DType dtype, int64_t N, int64_t K, void* panels) {
  if (dtype_size(dtype) == 4)
    pack_typed(static_cast<const uint32_t*>(w), dtype, N, K, static_cast<uint32_t*>(panels));
  else
    pack_typed(static_cast<const uint16_t*>(w), dtype, N, K, static_cast<uint16_t*>(panels));
}

}  // namespace tessera::cpu
