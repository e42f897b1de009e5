// Linear layers on the CPU: y = x · w^T with f32 activations and f32/f16/bf16 weights.
//
// Decoding a token multiplies a few activation rows (2 per image with CFG) by every weight
// matrix, so the cost is streaming the weights from memory once. The kernel walks weight rows in
// parallel (each thread streams a contiguous slice), converts each 16/8-wide chunk to f32 in
// registers, and reuses it for a tile of activation rows. Every output element is one dot product
// with four vector accumulators in a fixed order, independent of M, of the tile size and of the
// thread count, so sampling results do not depend on batch size or threads.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "tensor/cpu/cpu_backend.h"

namespace tessera::cpu {
namespace {

#if defined(__AVX512F__)
constexpr int kTile = 4;  // activation rows per tile: 4 rows x 4 accumulators = 16 zmm
constexpr int kBlockM = 4, kBlockN = 6;  // dot_block: 24 accumulators + 4 x + 1 w of 32 zmm
struct Vec {
  using reg = __m512;
  static constexpr int W = 16;
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
};
const char* kIsa = "avx512";
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
constexpr int kTile = 2;                 // 16 ymm registers: 2 rows x 4 accumulators plus loads
constexpr int kBlockM = 3, kBlockN = 4;  // dot_block: 12 accumulators + 3 x + 1 w = 16 ymm
struct Vec {
  using reg = __m256;
  static constexpr int W = 8;
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
};
const char* kIsa = "avx2";
#else
#define TESSERA_SCALAR_LINEAR 1
constexpr int kTile = 1;
const char* kIsa = "scalar";
#endif

inline float load_scalar(const void* w, DType t, int64_t k) {
  switch (t) {
    case DType::F32:
      return static_cast<const float*>(w)[k];
    case DType::BF16:
      return bf16_to_f32(static_cast<const uint16_t*>(w)[k]);
    default:
      return f16_to_f32(static_cast<const uint16_t*>(w)[k]);
  }
}

#ifndef TESSERA_SCALAR_LINEAR
// The weight storage format is a template parameter so the inner loop has no branches.
template <DType WD>
using storage_t = std::conditional_t<WD == DType::F32, float, uint16_t>;

template <DType WD>
inline typename Vec::reg load_w(const storage_t<WD>* w) {
  if constexpr (WD == DType::F32)
    return Vec::load(w);
  else if constexpr (WD == DType::F16)
    return Vec::load_f16(w);
  else
    return Vec::load_bf16(w);
}

constexpr int64_t kPrefetchBytes = 1536;

// s + the K % W tail of a dot product, one scalar FMA chain. Out of line so that every tile size
// runs the same instructions: inlined, the compiler vectorised the tail across the rows of a
// 2-row tile (bf16, AVX2), and a row computed alone then differed in the last bit.
template <DType WD>
[[gnu::noinline]] float dot_tail(const float* x, const storage_t<WD>* w, int64_t k, int64_t K,
                                 float s) {
  for (; k < K; ++k) s = std::fma(x[k], load_scalar(w, WD, k), s);
  return s;
}

// out[m] = dot(x[m*ldx .. +K], w[0..K]) for m < MT.
template <DType WD, int MT>
inline void dot_tile(const float* x, int64_t ldx, const storage_t<WD>* w, int64_t K, float* out) {
  constexpr int W = Vec::W;
  typename Vec::reg acc[MT][4];
  for (int m = 0; m < MT; ++m)
    for (int j = 0; j < 4; ++j) acc[m][j] = Vec::zero();
  // Software prefetch a fixed distance ahead of the weight stream: the hardware prefetcher alone
  // keeps too few lines in flight for one core to reach the memory bandwidth (measured on Zen 3,
  // GPT-B shapes, 1.5 KB ahead: -14% time for bf16 weights, -8% for f32; docs/performance.md).
  // Past the end of a row it fetches the next row, which is what this thread reads next.
  constexpr int64_t kStep = 4 * W * static_cast<int64_t>(sizeof(storage_t<WD>));
  const char* wb = reinterpret_cast<const char*>(w);
  int64_t k = 0;
  for (; k + 4 * W <= K; k += 4 * W) {
    const char* ahead = wb + k * static_cast<int64_t>(sizeof(storage_t<WD>)) + kPrefetchBytes;
    for (int64_t b = 0; b < kStep; b += 64) _mm_prefetch(ahead + b, _MM_HINT_T0);
    const auto w0 = load_w<WD>(w + k), w1 = load_w<WD>(w + k + W);
    const auto w2 = load_w<WD>(w + k + 2 * W), w3 = load_w<WD>(w + k + 3 * W);
    for (int m = 0; m < MT; ++m) {
      const float* xm = x + m * ldx + k;
      acc[m][0] = Vec::fma(Vec::load(xm), w0, acc[m][0]);
      acc[m][1] = Vec::fma(Vec::load(xm + W), w1, acc[m][1]);
      acc[m][2] = Vec::fma(Vec::load(xm + 2 * W), w2, acc[m][2]);
      acc[m][3] = Vec::fma(Vec::load(xm + 3 * W), w3, acc[m][3]);
    }
  }
  for (int j = 0; k + W <= K; k += W, ++j) {
    const auto wv = load_w<WD>(w + k);
    for (int m = 0; m < MT; ++m) acc[m][j] = Vec::fma(Vec::load(x + m * ldx + k), wv, acc[m][j]);
  }
  for (int m = 0; m < MT; ++m) {
    float s = Vec::sum(Vec::add(Vec::add(acc[m][0], acc[m][1]), Vec::add(acc[m][2], acc[m][3])));
    out[m] = dot_tail<WD>(x + m * ldx, w, k, K, s);
  }
}

// out[m * NT + n] = dot(x row m, w row n) for an MT x NT tile, for large M (MAE passes, diffusion
// head rows, verification). Bit-identical to dot_tile: accumulator j of an output sums the chunks
// k = 4W*i + j*W of the 4W loop, plus chunk j of the K % 4W rest, in the same order, and the four
// are combined and finished by dot_tail as there. Running the four accumulators one after another
// (phase j) keeps MT*NT accumulators live instead of 4 per output, so a tile reuses each loaded x
// chunk NT times and each weight chunk MT times: bound by the FMA units, not by the loads.
template <DType WD, int MT, int NT>
inline void dot_block(const float* x, int64_t ldx, const storage_t<WD>* w, int64_t ldw, int64_t K,
                      float* out) {
  constexpr int W = Vec::W;
  // K is walked in slices whose MT + NT rows (~20 KB) stay in L1 across the four phases; the
  // accumulators carry over in part[]. Measured on Zen 3 (AVX2), M 640: 75 GFLOPS on 2 cores for
  // K 768 and 3072, against 42 for dot_tile alone and 149 for OpenBLAS sgemm (docs/performance.md).
  constexpr int64_t kSlice = std::max<int64_t>(1, 20480 / (4 * (MT + NT)) / (4 * W)) * (4 * W);
  const int64_t main_end = K / (4 * W) * (4 * W);
  typename Vec::reg part[4][MT][NT];
  for (int j = 0; j < 4; ++j)
    for (int m = 0; m < MT; ++m)
      for (int n = 0; n < NT; ++n) part[j][m][n] = Vec::zero();
  auto run = [&](int j, int64_t k0, int64_t k1) {  // chunks k0, k0 + 4W, ... < k1 into part[j]
    typename Vec::reg acc[MT][NT];
    for (int m = 0; m < MT; ++m)
      for (int n = 0; n < NT; ++n) acc[m][n] = part[j][m][n];
    for (int64_t k = k0; k < k1; k += 4 * W) {
      typename Vec::reg xv[MT];
      for (int m = 0; m < MT; ++m) xv[m] = Vec::load(x + m * ldx + k);
      for (int n = 0; n < NT; ++n) {
        const auto wv = load_w<WD>(w + n * ldw + k);
        for (int m = 0; m < MT; ++m) acc[m][n] = Vec::fma(xv[m], wv, acc[m][n]);
      }
    }
    for (int m = 0; m < MT; ++m)
      for (int n = 0; n < NT; ++n) part[j][m][n] = acc[m][n];
  };
  for (int64_t s0 = 0; s0 < main_end; s0 += kSlice) {
    const int64_t s1 = std::min(s0 + kSlice, main_end);
    for (int j = 0; j < 4; ++j) run(j, s0 + j * W, s1);
  }
  for (int j = 0; j < 4 && main_end + (j + 1) * W <= K; ++j)
    run(j, main_end + j * W, main_end + j * W + 1);
  const int64_t k_tail = main_end + (K - main_end) / W * W;
  for (int m = 0; m < MT; ++m)
    for (int n = 0; n < NT; ++n) {
      const float s = Vec::sum(
          Vec::add(Vec::add(part[0][m][n], part[1][m][n]), Vec::add(part[2][m][n], part[3][m][n])));
      out[m * NT + n] = dot_tail<WD>(x + m * ldx, w + n * ldw, k_tail, K, s);
    }
}

template <DType WD>
void linear_typed(const float* x, int64_t M, int64_t K, const storage_t<WD>* w, int64_t N,
                  const float* bias, float* y) {
  // Rows are processed in blocks whose activations stay in L2 (~256 KB) while every weight row
  // passes over them; without blocking, a large M (MAR's 640-row MAE passes, thousands of
  // diffusion-head rows) re-reads all of x from memory once per output column. Each element is
  // still one dot_tile with the same summation order, so results do not depend on M or blocking.
  // Blocks of at least kBlockM rows go through dot_block tiles (rows left over, and weight rows
  // past the last whole group of kBlockN, through dot_tile); both give the same bits.
  constexpr int64_t kRowUnit = kTile * kBlockM;
  const int64_t block = std::max<int64_t>(
      kRowUnit, (static_cast<int64_t>(65536) / std::max<int64_t>(K, 1)) / kRowUnit * kRowUnit);
  for (int64_t b0 = 0; b0 < M; b0 += block) {
    const int64_t bM = std::min(block, M - b0);
    const float* xb = x + b0 * K;
    float* yb = y + b0 * N;
    const int64_t tiled_m = bM >= kBlockM ? bM / kBlockM * kBlockM : 0;
    const int64_t tiled_n = tiled_m > 0 ? N / kBlockN * kBlockN : 0;
#pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < tiled_n / kBlockN; ++g) {
      const int64_t n0 = g * kBlockN;
      float out[kBlockM * kBlockN];
      for (int64_t m0 = 0; m0 < tiled_m; m0 += kBlockM) {
        dot_block<WD, kBlockM, kBlockN>(xb + m0 * K, K, w + n0 * K, K, K, out);
        for (int m = 0; m < kBlockM; ++m)
          for (int n = 0; n < kBlockN; ++n)
            yb[(m0 + m) * N + n0 + n] = out[m * kBlockN + n] + (bias ? bias[n0 + n] : 0.0f);
      }
    }
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const storage_t<WD>* wr = w + n * K;
      float out[kTile];
      const float b = bias ? bias[n] : 0.0f;
      int64_t m0 = n < tiled_n ? tiled_m : 0;  // rows dot_block has not done for this column
      for (; m0 + kTile <= bM; m0 += kTile) {
        dot_tile<WD, kTile>(xb + m0 * K, K, wr, K, out);
        for (int m = 0; m < kTile; ++m) yb[(m0 + m) * N + n] = out[m] + b;
      }
      const int rest = static_cast<int>(bM - m0);  // one tile for the remainder: W read once more
      if (rest > 0) {
        if (rest == 1) dot_tile<WD, 1>(xb + m0 * K, K, wr, K, out);
        if constexpr (kTile > 2) {
          if (rest == 2) dot_tile<WD, 2>(xb + m0 * K, K, wr, K, out);
          if (rest == 3) dot_tile<WD, 3>(xb + m0 * K, K, wr, K, out);
        }
        for (int m = 0; m < rest; ++m) yb[(m0 + m) * N + n] = out[m] + b;
      }
    }
  }
}
#endif

}  // namespace

const char* linear_isa() {
  return kIsa;
}

void linear(const float* x, int64_t M, int64_t K, const void* w, DType w_type, int64_t N,
            const float* bias, float* y) {
#ifdef TESSERA_SCALAR_LINEAR
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t m = 0; m < M; ++m) {
      float s = 0.0f;
      for (int64_t k = 0; k < K; ++k) s += x[m * K + k] * load_scalar(w, w_type, n * K + k);
      y[m * N + n] = s + (bias ? bias[n] : 0.0f);
    }
  }
#else
  switch (w_type) {
    case DType::F32:
      return linear_typed<DType::F32>(x, M, K, static_cast<const float*>(w), N, bias, y);
    case DType::F16:
      return linear_typed<DType::F16>(x, M, K, static_cast<const uint16_t*>(w), N, bias, y);
    default:
      return linear_typed<DType::BF16>(x, M, K, static_cast<const uint16_t*>(w), N, bias, y);
  }
#endif
}

}  // namespace tessera::cpu

#include "tensor/cpu/linear_isa.h"
#include "tessera/error.h"

namespace tessera::cpu {
std::vector<std::string> linear_isas() { return {kIsa}; }
void set_linear_isa(const std::string& isa) {
  check(isa.empty() || isa == kIsa, "linear kernel path " + isa + " is not built");
}
}  // namespace tessera::cpu
