#include "tensor/cpu/peak_flops.h"

#include <immintrin.h>

#include <chrono>
#include <cstdint>

#include "common/thread_pool.h"
#include "tensor/cpu/linear_isa.h"

namespace tessera {

namespace {

// Enough independent accumulators to cover the FMA latency on two ports (4 cycles x 2 ports).
constexpr int kChains = 12;
constexpr int64_t kInner = 4096;  // iterations between clock reads

// GFLOP/s of `kernel(iterations)`, which returns the flops it did, run on every thread for about
// `seconds`; the best of `repeats`.
template <class Kernel>
double best_gflops(double seconds, int repeats, Kernel kernel) {
  double best = 0.0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const double flops = cpu_pool().run_sum<double>("peak_probe", [&](int, int) {
      double mine = 0.0;
      while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds)
        mine += kernel(kInner);
      return mine;
    });
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (flops / dt / 1e9 > best) best = flops / dt / 1e9;
  }
  return best;
}

volatile float g_sink = 0.0f;

}  // namespace

double measure_f32_fma_gflops(double seconds, int repeats) {
  return best_gflops(seconds, repeats, [](int64_t iters) {
#if defined(__AVX512F__)
    __m512 acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.001f * static_cast<float>(c));
    const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-4f);
    for (int64_t i = 0; i < iters; ++i)
      for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
    __m512 s = acc[0];
    for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
    g_sink = g_sink + _mm512_reduce_add_ps(s);
    return 2.0 * 16 * kChains * static_cast<double>(iters);
#elif defined(__FMA__)
    __m256 acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(0.001f * static_cast<float>(c));
    const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-4f);
    for (int64_t i = 0; i < iters; ++i)
      for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
    alignas(32) float out[8];
    __m256 s = acc[0];
    for (int c = 1; c < kChains; ++c) s = _mm256_add_ps(s, acc[c]);
    _mm256_store_ps(out, s);
    g_sink = g_sink + out[0];
    return 2.0 * 8 * kChains * static_cast<double>(iters);
#else
    float acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = 0.001f * static_cast<float>(c);
    for (int64_t i = 0; i < iters; ++i)
      for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * 0.999f + 1e-4f;
    g_sink = g_sink + acc[0];
    return 2.0 * kChains * static_cast<double>(iters);
#endif
  });
}

double measure_bf16_dot_gflops(double seconds, int repeats) {
#if defined(__AVX512BF16__)
  return best_gflops(seconds, repeats, [](int64_t iters) {
    __m512 acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.001f * static_cast<float>(c));
    const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(2e-3f));
    for (int64_t i = 0; i < iters; ++i)
      for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, a);
    __m512 s = acc[0];
    for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
    g_sink = g_sink + _mm512_reduce_add_ps(s);
    // Per f32 lane: two bf16 products added to the accumulator (4 flops), 16 lanes.
    return 4.0 * 16 * kChains * static_cast<double>(iters);
  });
#else
  (void)seconds;
  (void)repeats;
  return 0.0;
#endif
}

double measure_amx_bf16_gflops(double seconds, int repeats) {
  if (!cpu::amx_bf16_available()) return 0.0;
  // kInner rounds of four 16-cycle tile multiplies between clock reads, as the FMA loops do.
  return best_gflops(seconds, repeats, [](int64_t iters) { return amx_bf16_tile_flops(iters); });
}

}  // namespace tessera
