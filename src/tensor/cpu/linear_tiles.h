// The SIMD body of the linear kernel, y = x · w^T over weights in panels (linear_panels.h),
// written once over a vector type `V` and compiled per instruction set (linear_avx512.cpp,
// linear_avx2.cpp, each with its own target flags); linear_kernels.cpp picks one at run time from
// the CPU's features.
//
// A register tile holds MR rows x NC vectors of one panel's columns. Each step k loads the NC
// weight vectors of row k of the panel once (converting 16-bit weights once), broadcasts x[m][k]
// for each of the MR rows and adds x[m][k] * w[n][k] into the accumulator of (m, n) with one FMA.
// So every output element is the sequential chain acc = fma(x[k], w[k], acc) over k = 0..K-1
// from acc = 0, then + bias: the same operations whatever M, the tile that computes it, the
// thread count or the instruction set (the scalar path runs the same chain with std::fma), so
// sampling and verification results do not depend on batch size, threads or CPU.
//
// V provides: reg, W, kRows (the most rows of a tile), kCols (vectors of columns per pass in a
// tile of more than kWideRows rows; smaller tiles take the whole panel per pass), zero, load,
// load_f16, bf16_even and bf16_odd (the k-even and k-odd halves of W pairs, widened), broadcast,
// fma, store.
//
// Everything here has internal linkage: each including file gets its own copy compiled for its
// own instruction set, and the linker can never swap one for the other.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "tensor/cpu/linear_panels.h"
#include "tensor/dtype.h"

namespace tessera::cpu {
namespace {

// The weight storage format is a template parameter so the inner loop has no branches.
template <DType WD>
using storage_t = std::conditional_t<WD == DType::F32, float, uint16_t>;

template <class V, DType WD>
inline typename V::reg load_w(const storage_t<WD>* w) {
  static_assert(WD != DType::BF16, "bf16 panels are read in pairs (bf16_even, bf16_odd)");
  if constexpr (WD == DType::F32)
    return V::load(w);
  else
    return V::load_f16(w);
}

constexpr int64_t imin(int64_t a, int64_t b) {
  return a < b ? a : b;
}
constexpr int64_t imax(int64_t a, int64_t b) {
  return a > b ? a : b;
}

// Where a tile prefetches. Every tile prefetches its own panel kPrefetchBytes ahead into L1; a
// tile that may be the first to touch its panel also prefetches it 2 x kPrefetchBytes ahead into
// L2. When a panel takes several tiles (more rows than one tile holds), each tile also streams a
// share of the next panel into L2 in step with its own k (`Stream`): memory then keeps streaming
// through every tile, not only during the later ones (which streamed the whole next panel before),
// and GPT-B's 7-16 position forwards with CFG took 5-15% less time in f32 and bf16
// (docs/performance.md, session 21).
enum class Ahead {
  Alone,   // the panel's only tile
  First,   // the first of several: this panel into L1 and L2, a share of the next into L2
  Cached,  // a later one: this panel (in L2) into L1, a share of the next into L2
};

// A tile's share of the next panel: one prefetch per k step (pair of k for bf16), the address
// advancing by the share's bytes / steps in 16.16 fixed point (at most a line per step: the share
// is at most half a panel, and a step reads a 64-128 byte row of it).
struct Stream {
  const char* lo = nullptr;
  int64_t cursor = 0, step = 0;
  Stream() = default;
  Stream(const char* first, int64_t bytes, int64_t steps)
      : lo(first), step((bytes << 16) / imax(steps, 1)) {}
  void advance() {
    _mm_prefetch(lo + (cursor >> 16), _MM_HINT_T1);
    cursor += step;
  }
};

// Prefetches the panel rows [k, k + n) at the tile's distances ahead (see kPrefetchBytes).
template <int64_t kRowBytes, Ahead A>
inline void prefetch_rows(const char* ahead, int64_t n) {
  for (int64_t b = 0; b < n * kRowBytes; b += 64) {
    _mm_prefetch(ahead + b, _MM_HINT_T0);
    if constexpr (A != Ahead::Cached) _mm_prefetch(ahead + b + kPrefetchBytes, _MM_HINT_T1);
  }
}

// acc[m][c] over all of K for MR rows of x and the NC vectors of panel columns from c0, stored to
// out[m * kPanelRows + c0 + c * W].
template <class V, DType WD, int MR, int NC, Ahead A>
inline void panel_tile(const float* x, int64_t ldx, const storage_t<WD>* panel, int64_t K, int c0,
                       Stream& next, float* out) {
  using T = storage_t<WD>;
  constexpr int W = V::W;
  constexpr int64_t kRowBytes = kPanelRows * static_cast<int64_t>(sizeof(T));
  const T* ahead = panel + kPrefetchBytes / static_cast<int64_t>(sizeof(T));
  typename V::reg acc[MR][NC];
  for (int m = 0; m < MR; ++m)
    for (int c = 0; c < NC; ++c) acc[m][c] = V::zero();
  // acc[m][c] += x[m][k] * wv[c] for every row.
  auto add_k = [&](const typename V::reg* wv, int64_t k) {
    for (int m = 0; m < MR; ++m) {
      const auto xb = V::broadcast(x + m * ldx + k);
      for (int c = 0; c < NC; ++c) acc[m][c] = V::fma(xb, wv[c], acc[m][c]);
    }
  };
  typename V::reg wv[NC];
  if constexpr (WD == DType::BF16) {
    // Pairs of k (linear_panels.h): k even, then k + 1, so each output keeps the one chain over k.
    for (int64_t k = 0; k < K; k += 2) {
      // The pair's two lines (columns 0-15 and 16-31 lie 1 KB apart), kPrefetchBytes ahead (a
      // whole number of 2 KB blocks, so at the same offsets in a block).
      for (int64_t h = 0; h < kPanelRows; h += 16) {
        const char* line = reinterpret_cast<const char*>(ahead + bf16_pair_offset(k, h));
        _mm_prefetch(line, _MM_HINT_T0);
        if constexpr (A != Ahead::Cached) _mm_prefetch(line + kPrefetchBytes, _MM_HINT_T1);
      }
      if constexpr (A != Ahead::Alone) next.advance();
      for (int c = 0; c < NC; ++c) wv[c] = V::bf16_even(panel + bf16_pair_offset(k, c0 + c * W));
      add_k(wv, k);
      if (k + 1 == K) break;  // odd K: the last pair's odd half is padding
      for (int c = 0; c < NC; ++c) wv[c] = V::bf16_odd(panel + bf16_pair_offset(k, c0 + c * W));
      add_k(wv, k + 1);
    }
  } else {
    for (int64_t k = 0; k < K; ++k) {
      const T* wk = panel + k * kPanelRows;
      prefetch_rows<kRowBytes, A>(reinterpret_cast<const char*>(ahead + k * kPanelRows), 1);
      if constexpr (A != Ahead::Alone) next.advance();
      for (int c = 0; c < NC; ++c) wv[c] = load_w<V, WD>(wk + c0 + c * W);
      add_k(wv, k);
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int c = 0; c < NC; ++c) V::store(out + m * kPanelRows + c0 + c * W, acc[m][c]);
}

// Rows [0, MR) of the output for panel p (columns n0 = p * kPanelRows ..), plus bias.
template <class V, DType WD, int MR, Ahead A>
inline void tile_out(const float* x, int64_t K, const storage_t<WD>* panel, int64_t N, int64_t n0,
                     const float* bias, Stream next, float* y) {
  constexpr int kAll = static_cast<int>(kPanelRows) / V::W;
  constexpr int NC = MR <= V::kWideRows ? kAll : V::kCols;
  static_assert(kAll % NC == 0, "the passes must tile the panel");
  alignas(64) float out[MR * kPanelRows];
  // The tile's share of the next panel is spread over all of its passes.
  constexpr int kPasses = kAll / NC;
  next.step /= kPasses;
  for (int c0 = 0; c0 < kPanelRows; c0 += NC * V::W)
    panel_tile<V, WD, MR, NC, A>(x, K, panel, K, c0, next, out);
  const int64_t cols = imin(kPanelRows, N - n0);
  for (int m = 0; m < MR; ++m)
    for (int64_t j = 0; j < cols; ++j)
      y[m * N + n0 + j] = out[m * kPanelRows + j] + (bias ? bias[n0 + j] : 0.0f);
}

// One tile of exactly `rows` (<= MR, the largest tried) rows.
template <class V, DType WD, Ahead A, int MR = V::kRows - 1>
inline void tile_of(int rows, const float* x, int64_t K, const storage_t<WD>* panel, int64_t N,
                    int64_t n0, const float* bias, Stream next, float* y) {
  if constexpr (MR >= 1) {
    if (rows == MR) return tile_out<V, WD, MR, A>(x, K, panel, N, n0, bias, next, y);
    tile_of<V, WD, A, MR - 1>(rows, x, K, panel, N, n0, bias, next, y);
  }
}

// Rows [0, M) of the output for one panel, in ceil(M / kRows) tiles of as even a size as can be
// (16 rows: two tiles of 8, not 12 + 4): the first reads the panel from memory, the others from
// cache, and with several tiles each streams its share of the next panel (Stream).
template <class V, DType WD>
inline void panel_rows(const float* x, int64_t M, int64_t K, const storage_t<WD>* panel, int64_t N,
                       int64_t n0, const float* bias, float* y) {
  constexpr int R = V::kRows;
  const int64_t tiles = (M + R - 1) / R;
  if (tiles == 1)
    return tile_of<V, WD, Ahead::Alone, R>(static_cast<int>(M), x, K, panel, N, n0, bias, {}, y);
  const int64_t depth = panel_depth(WD, K);
  const int64_t bytes = depth * kPanelRows * static_cast<int64_t>(sizeof(storage_t<WD>));
  const char* next = reinterpret_cast<const char*>(panel + depth * kPanelRows);
  const int64_t steps = WD == DType::BF16 ? (K + 1) / 2 : K;
  for (int64_t t = 0, m0 = 0; t < tiles; ++t) {
    const int rows = static_cast<int>((M - m0) / (tiles - t) + ((M - m0) % (tiles - t) != 0));
    const int64_t lo = t * bytes / tiles, hi = (t + 1) * bytes / tiles;
    const Stream share(next + lo, hi - lo, steps);
    if (t == 0)
      tile_of<V, WD, Ahead::First, R>(rows, x, K, panel, N, n0, bias, share, y);
    else
      tile_of<V, WD, Ahead::Cached, R>(rows, x + m0 * K, K, panel, N, n0, bias, share, y + m0 * N);
    m0 += rows;
  }
}

template <class V, DType WD>
void linear_typed(const float* x, int64_t M, int64_t K, const storage_t<WD>* panels, int64_t N,
                  const float* bias, float* y, int64_t p_begin, int64_t p_end) {
  // Rows are processed in blocks whose activations stay in L2 (~256 KB) while every panel passes
  // over them; without blocking, a large M (MAR's 640-row MAE passes, thousands of diffusion-head
  // rows) re-reads all of x from memory once per panel.
  constexpr int R = V::kRows;
  const int64_t block = imax(R, (65536 / imax(K, 1)) / R * R);
  for (int64_t b0 = 0; b0 < M; b0 += block) {
    const int64_t bM = imin(block, M - b0);
    for (int64_t p = p_begin; p < p_end; ++p)
      panel_rows<V, WD>(x + b0 * K, bM, K, panels + p * panel_depth(WD, K) * kPanelRows, N,
                        p * kPanelRows, bias, y + b0 * N);
  }
}

// Panels [p_begin, p_end) of y[M,N] = x[M,K] · w[N,K]^T (+ bias), every row, on the calling
// thread, for one instruction set; w in panels. The caller shares the panels between threads
// (linear_kernels.cpp): a contiguous range each, one sequential stream of weights.
template <class V>
void linear_simd(const float* x, int64_t M, int64_t K, const void* panels, DType w_type, int64_t N,
                 const float* bias, float* y, int64_t p_begin, int64_t p_end) {
  switch (w_type) {
    case DType::F32:
      return linear_typed<V, DType::F32>(x, M, K, static_cast<const float*>(panels), N, bias, y,
                                         p_begin, p_end);
    case DType::F16:
      return linear_typed<V, DType::F16>(x, M, K, static_cast<const uint16_t*>(panels), N, bias, y,
                                         p_begin, p_end);
    default:
      return linear_typed<V, DType::BF16>(x, M, K, static_cast<const uint16_t*>(panels), N, bias, y,
                                          p_begin, p_end);
  }
}

}  // namespace
}  // namespace tessera::cpu
