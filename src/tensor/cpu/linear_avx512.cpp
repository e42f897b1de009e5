// The linear kernel for AVX-512F (compiled with -mavx512f whatever the build's -march; called
// only when the CPU reports avx512f, see linear_kernels.cpp).
#include <immintrin.h>

#include "tensor/cpu/linear_isa.h"
#include "tensor/cpu/linear_tiles.h"

namespace tessera::cpu {
namespace {

struct Avx512 {
  using reg = __m512;
  static constexpr int W = 16;
  // A whole panel (2 vectors) per pass; up to 12 rows: 24 accumulators + 2 weights + 1 broadcast
  // of 32 registers.
  static constexpr int kRows = 12, kCols = 2, kWideRows = 12;
  static reg zero() { return _mm512_setzero_ps(); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static reg load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  // W (k, k + 1) pairs of bf16: the even halves shifted up, the odd halves masked in place.
  static reg bf16_even(const uint16_t* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512(p), 16));
  }
  static reg bf16_odd(const uint16_t* p) {
    return _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_loadu_si512(p), _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static reg broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static void store(float* p, reg a) { _mm512_storeu_ps(p, a); }
};

}  // namespace

void linear_avx512(const float* x, int64_t M, int64_t K, const void* panels, DType w_type,
                   int64_t N, const float* bias, float* y, int64_t p_begin, int64_t p_end) {
  linear_simd<Avx512>(x, M, K, panels, w_type, N, bias, y, p_begin, p_end);
}

}  // namespace tessera::cpu
