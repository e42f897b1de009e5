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
  static constexpr int kBlockM = 3, kBlockN = 4;  // dot_block: 12 accumulators + 3 x + 1 w = 16
  static constexpr int kStreamN = 4;              // weight rows one after another: 12 accumulators
  // No wider streamed tile: 16 registers hold no more rows than kBlockM's.
  static constexpr int kStreamM = kBlockM, kStreamWideN = 1;
  // 16 registers: streamed tiles walk one weight row at a time.
  static constexpr int kStreamWalk = 1;
  static reg zero() { return _mm256_setzero_ps(); }
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static reg load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static reg load_bf16(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static float sum(reg a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // out[i] = sum(v[i]) for 8 registers, adding the same pairs as sum (128-bit halves, then lanes
  // 0+2 and 1+3, then the two partials) in a transposing tree: 7 additions for 8 sums.
  static void sums(const reg* v, float* out) {
    reg u[4], w[2];
    for (int p = 0; p < 4; ++p)  // u[p] = (halves of v[2p] | of v[2p+1])
      u[p] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * p], v[2 * p + 1], 0x20),
                           _mm256_permute2f128_ps(v[2 * p], v[2 * p + 1], 0x31));
    for (int q = 0; q < 2; ++q)  // lanes 0+2 and 1+3 of each half
      w[q] = _mm256_add_ps(_mm256_shuffle_ps(u[2 * q], u[2 * q + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm256_shuffle_ps(u[2 * q], u[2 * q + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    // The two partials: lane 4c + j holds the sum of v[c + 2j].
    const reg s = _mm256_add_ps(_mm256_shuffle_ps(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                _mm256_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    _mm256_storeu_ps(out, _mm256_permutevar8x32_ps(s, order));
  }
};

}  // namespace

void linear_avx2(const float* x, int64_t M, int64_t K, const void* w, DType w_type, int64_t N,
                 const float* bias, float* y, bool parallel) {
  linear_simd<Avx2>(x, M, K, w, w_type, N, bias, y, parallel);
}

}  // namespace tessera::cpu
