#include "tensor/cpu/bandwidth.h"

#include <immintrin.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace tessera {

double measure_read_bandwidth_gbs(size_t bytes, int repeats) {
  const size_t n = bytes / sizeof(float);
  std::unique_ptr<float, void (*)(void*)> buf(static_cast<float*>(std::aligned_alloc(64, n * 4)),
                                              std::free);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) buf.get()[i] = static_cast<float>(i & 1023);
  double best = 0.0;
  volatile float sink = 0.0f;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    float total = 0.0f;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (size_t blk = 0; blk < n / 64; ++blk) {
      const float* p = buf.get() + blk * 64;
#if defined(__AVX512F__)
      __m512 a = _mm512_add_ps(_mm512_load_ps(p), _mm512_load_ps(p + 16));
      __m512 b = _mm512_add_ps(_mm512_load_ps(p + 32), _mm512_load_ps(p + 48));
      total += _mm512_reduce_add_ps(_mm512_add_ps(a, b));
#else
      float s = 0.0f;
      for (int i = 0; i < 64; ++i) s += p[i];
      total += s;
#endif
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink = sink + total;
    const double gbs = static_cast<double>(n / 64 * 64 * 4) / dt / 1e9;
    if (gbs > best) best = gbs;
  }
  (void)sink;
  return best;
}

}  // namespace tessera
