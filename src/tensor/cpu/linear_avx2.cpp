// The linear kernel for AVX2 + FMA + F16C (compiled with those flags and without AVX-512 whatever
// the build's -march, so this path is the one an AVX2-only CPU runs; see linear_kernels.cpp).
#include <immintrin.h>

#include "tensor/cpu/linear_isa.h"
#include "tensor/cpu/linear_tiles.h"

namespace tessera::cpu {
namespace {

struct Avx2 {
  using reg = __m256;
  static constexpr int W = 8;
  // 16 registers: tiles of 1-2 rows take the whole panel (4 vectors) per pass, 8 accumulators;
  // larger tiles take half a panel per pass, up to 6 rows: 12 accumulators + 2 weights + 1
  // broadcast.
  static constexpr int kRows = 6, kCols = 2, kWideRows = 2;
  static reg zero() { return _mm256_setzero_ps(); }
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static reg load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // W (k, k + 1) pairs of bf16: the even halves shifted up, the odd halves masked in place.
  static reg bf16_even(const uint16_t* p) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), 16));
  }
  static reg bf16_odd(const uint16_t* p) {
    return _mm256_castsi256_ps(
        _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)),
                         _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static reg broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static void store(float* p, reg a) { _mm256_storeu_ps(p, a); }
};

}  // namespace

void linear_avx2(const float* x, int64_t M, int64_t K, const void* panels, DType w_type, int64_t N,
                 const float* bias, float* y, int64_t p_begin, int64_t p_end) {
  linear_simd<Avx2>(x, M, K, panels, w_type, N, bias, y, p_begin, p_end);
}

}  // namespace tessera::cpu
