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
  static constexpr int kBlockM = 4, kBlockN = 6;  // dot_block: 24 accumulators + 4 x + 1 w of 32
  static constexpr int kStreamN = 4;              // weight rows one after another: 16 accumulators
  // Up to 8 rows in one streamed tile, 2 weight rows' outputs per epilogue: 16 accumulators +
  // 8 x + 1 w.
  static constexpr int kStreamM = 8, kStreamWideN = 2;
  // Streamed tiles of 3 or more rows walk 2 weight rows together (2 x MT FMA chains).
  static constexpr int kStreamWalk = 2;
  static reg zero() { return _mm512_setzero_ps(); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static reg load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static reg load_bf16(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static float sum(reg a) { return _mm512_reduce_add_ps(a); }
  // out[i] = sum(v[i]) for 16 registers: a transposing tree that adds the same pairs as GCC's
  // _mm512_reduce_add_ps (256-bit halves, then 128-bit halves, then lanes (0,2)+(1,3), then the
  // two partials; float addition is commutative), 15 additions for 16 sums instead of 64.
  static void sums(const reg* v, float* out) {
    reg u[8], w[4], x[2];
    for (int p = 0; p < 8; ++p)  // 256-bit halves: u[p] = (halves of v[2p] | of v[2p+1])
      u[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int q = 0; q < 4; ++q)  // 128-bit halves: w[q] lane c = v[4q + c]
      w[q] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * q], u[2 * q + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_shuffle_f32x4(u[2 * q], u[2 * q + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int r = 0; r < 2; ++r)  // lanes 0+2 and 1+3 of each 128-bit block
      x[r] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * r], w[2 * r + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm512_shuffle_ps(w[2 * r], w[2 * r + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    // The two partials: lane 4c + j holds the sum of v[c + 4j].
    const reg s = _mm512_add_ps(_mm512_shuffle_ps(x[0], x[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                _mm512_shuffle_ps(x[0], x[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_ps(out, _mm512_permutexvar_ps(order, s));
  }
};

}  // namespace

void linear_avx512(const float* x, int64_t M, int64_t K, const void* w, DType w_type, int64_t N,
                   const float* bias, float* y, bool parallel) {
  linear_simd<Avx512>(x, M, K, w, w_type, N, bias, y, parallel);
}

}  // namespace tessera::cpu
