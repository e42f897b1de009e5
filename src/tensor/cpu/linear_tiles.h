// The SIMD body of the linear kernel, y = x · w^T, written once over a vector type `V` and
// compiled per instruction set (linear_avx512.cpp, linear_avx2.cpp, each with its own target
// flags); linear_kernels.cpp picks one at run time from the CPU's features.
//
// Every output element is one dot product with its own vector accumulator, walked over the K
// chunks of V::W floats in order, reduced by V::sum's tree and finished by one scalar FMA chain
// over K % W. That order depends only on K: not on M, on the register tile that computes the
// element or on the thread count, so sampling results do not depend on batch size or threads.
//
// V provides: reg, W, kBlockM x kBlockN (the register tile of dot_block), zero, load, load_f16,
// load_bf16, fma, add, sum (horizontal sum of one register) and sums (W registers' horizontal
// sums at once, each bit-identical to sum).
//
// Everything here has internal linkage: each including file gets its own copy compiled for its
// own instruction set, and the linker can never swap one for the other.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "tensor/dtype.h"

namespace tessera::cpu {
namespace {

// The weight storage format is a template parameter so the inner loop has no branches.
template <DType WD>
using storage_t = std::conditional_t<WD == DType::F32, float, uint16_t>;

template <class V, DType WD>
inline typename V::reg load_w(const storage_t<WD>* w) {
  if constexpr (WD == DType::F32)
    return V::load(w);
  else if constexpr (WD == DType::F16)
    return V::load_f16(w);
  else
    return V::load_bf16(w);
}

template <DType WD>
inline float load_scalar(const storage_t<WD>* w, int64_t k) {
  if constexpr (WD == DType::F32)
    return w[k];
  else if constexpr (WD == DType::F16)
    return f16_to_f32(w[k]);
  else
    return bf16_to_f32(w[k]);
}

constexpr int64_t kPrefetchBytes = 1536;

constexpr int64_t imin(int64_t a, int64_t b) {
  return a < b ? a : b;
}
constexpr int64_t imax(int64_t a, int64_t b) {
  return a > b ? a : b;
}

// s + the K % W tail of a dot product, one scalar FMA chain. Out of line so that every tile size
// runs the same instructions: inlined, the compiler vectorised the tail across the rows of a
// 2-row tile (bf16, AVX2), and a row computed alone then differed in the last bit.
template <DType WD>
[[gnu::noinline]] float dot_tail(const float* x, const storage_t<WD>* w, int64_t k, int64_t K,
                                 float s) {
  for (; k < K; ++k) s = std::fma(x[k], load_scalar<WD>(w, k), s);
  return s;
}

// out[m * NT + n] = dot(x row m, w row n) for an MT x NT register tile: each loaded x chunk is
// used NT times and each weight chunk MT times, so a tile is bound by the FMA units, not the
// loads. Every output has its own accumulator, walked over the chunks in order, so its result is
// the same in any tile shape. `Walk`: how many of the NT weight rows are walked together: NT,
// the FMA-bound panels; fewer, groups of Walk rows one after another (the row stream of few-row
// calls, read as one sequential stream). Each walked row is a chain of K / W dependent FMAs per
// x row, so Walk x MT chains are in flight: 2 rows at a time keep a core with two FMA units busy
// from 3 x rows on. `Prefetch`: the tile that first reads the weights from memory prefetches
// (the hardware prefetcher alone keeps too few lines in flight for one core to reach the memory
// bandwidth: measured on Zen 3, GPT-B shapes, 1.5 KB ahead: -14% time for bf16 weights, -8% for
// f32; docs/performance.md): 1.5 KB ahead in a row it walks alone, else the rows of the next
// group (Walk rows on). The row tiles after it find the weights in L1 and skip the prefetches.
template <class V, DType WD, int MT, int NT, bool Prefetch, int Walk>
inline void dot_block(const float* x, int64_t ldx, const storage_t<WD>* w, int64_t ldw, int64_t K,
                      float* out) {
  constexpr int W = V::W;
  constexpr int64_t kChunkBytes = W * static_cast<int64_t>(sizeof(storage_t<WD>));
  constexpr int kChunksPerLine = kChunkBytes >= 64 ? 1 : static_cast<int>(64 / kChunkBytes);
  constexpr int64_t kLine = W * kChunksPerLine;  // floats of K per 64-byte line of weights
  typename V::reg acc[MT][NT];
  for (int m = 0; m < MT; ++m)
    for (int n = 0; n < NT; ++n) acc[m][n] = V::zero();
  const int64_t k_vec = K / W * W;
  // Chunk k of weight rows [NB, NE) against every x row.
  auto chunk = [&]<int NB, int NE>(int64_t k) {
    typename V::reg xv[MT];
    for (int m = 0; m < MT; ++m) xv[m] = V::load(x + m * ldx + k);
    for (int n = NB; n < NE; ++n) {
      const auto wv = load_w<V, WD>(w + n * ldw + k);
      for (int m = 0; m < MT; ++m) acc[m][n] = V::fma(xv[m], wv, acc[m][n]);
    }
  };
  // All of K for weight rows [NB, NE) at once.
  auto walk = [&]<int NB, int NE>() {
    int64_t k = 0;
    if constexpr (Prefetch) {
      const int64_t ahead =
          Walk == 1 ? kPrefetchBytes / static_cast<int64_t>(sizeof(storage_t<WD>)) : Walk * ldw;
      for (; k + kLine <= k_vec; k += kLine) {
        for (int n = NB; n < NE; ++n)
          _mm_prefetch(reinterpret_cast<const char*>(w + n * ldw + k + ahead), _MM_HINT_T0);
        for (int c = 0; c < kChunksPerLine; ++c) chunk.template operator()<NB, NE>(k + c * W);
      }
    }
    for (; k < k_vec; k += W) chunk.template operator()<NB, NE>(k);
  };
  static_assert(Walk >= 1 && NT % Walk == 0, "the walked groups must tile the panel");
  // Groups of Walk weight rows one after another (all NT at once when Walk == NT); the outputs
  // of the NT rows share the epilogue below either way.
  [&]<int... G>(std::integer_sequence<int, G...>) {
    (walk.template operator()<G * Walk, G * Walk + Walk>(), ...);
  }
  (std::make_integer_sequence<int, NT / Walk>{});
  // The horizontal sums: one tree per output for a few outputs (the row-stream tiles), else W at
  // a time (V::sums: the same additions as V::sum per output, shared across W outputs; one at a
  // time they cost as much as the FMAs at K 384), straight from the accumulators (through a
  // zero-filled array it took a memset call per tile, about a third of a 4-row tile's
  // instructions at K 384).
  constexpr int kOut = MT * NT;
  float sums[kOut];
  const auto reg_of = [&](int o) { return acc[o / NT][o % NT]; };
  if constexpr (2 * kOut < W) {
    for (int o = 0; o < kOut; ++o) sums[o] = V::sum(reg_of(o));
  } else {
    constexpr int kFull = kOut / W;
    for (int g = 0; g < kFull; ++g) {
      typename V::reg t[W];
      for (int i = 0; i < W; ++i) t[i] = reg_of(g * W + i);
      V::sums(t, sums + g * W);
    }
    if constexpr (kOut % W != 0) {
      typename V::reg t[W];
      float s[W];
      for (int i = 0; i < W; ++i) t[i] = kFull * W + i < kOut ? reg_of(kFull * W + i) : V::zero();
      V::sums(t, s);
      for (int i = 0; i < kOut % W; ++i) sums[kFull * W + i] = s[i];
    }
  }
  if (k_vec == K) {
    for (int o = 0; o < kOut; ++o) out[o] = sums[o];
  } else {
    for (int m = 0; m < MT; ++m)
      for (int n = 0; n < NT; ++n)
        out[m * NT + n] = dot_tail<WD>(x + m * ldx, w + n * ldw, k_vec, K, sums[m * NT + n]);
  }
}

// Rows m0.. m0+MT-1 of the output for weight rows n0.. n0+NT-1 (one dot_block), plus bias.
template <class V, DType WD, int MT, int NT, bool Prefetch, int Walk>
inline void block_out(const float* x, int64_t K, const storage_t<WD>* w, int64_t N, int64_t n0,
                      const float* bias, float* y) {
  float out[MT * NT];
  dot_block<V, WD, MT, NT, Prefetch, Walk>(x, K, w + n0 * K, K, K, out);
  for (int m = 0; m < MT; ++m)
    for (int n = 0; n < NT; ++n) y[m * N + n0 + n] = out[m * NT + n] + (bias ? bias[n0 + n] : 0.0f);
}

// One tile of exactly `rows` (< kBlockM) rows over the NT weight rows from n0.
template <class V, DType WD, int NT, bool Prefetch, int Walk, int MT = V::kBlockM - 1>
inline void tile_of(int rows, const float* x, int64_t K, const storage_t<WD>* w, int64_t N,
                    int64_t n0, const float* bias, float* y) {
  if constexpr (MT >= 1) {
    if (rows == MT) return block_out<V, WD, MT, NT, Prefetch, Walk>(x, K, w, N, n0, bias, y);
    tile_of<V, WD, NT, Prefetch, Walk, MT - 1>(rows, x, K, w, N, n0, bias, y);
  }
}

// Rows [0, M) of the output for the NT weight rows from n0 in one register tile of all M rows,
// kBlockM < M <= kStreamM, walking the weight rows one after another (the row stream of
// panel_rows below, without a second pass for the M % kBlockM rows).
template <class V, DType WD, int NT, int MT = V::kStreamM>
inline void stream_tile(int rows, const float* x, int64_t K, const storage_t<WD>* w, int64_t N,
                        int64_t n0, const float* bias, float* y) {
  if constexpr (MT > V::kBlockM) {
    if (rows == MT) return block_out<V, WD, MT, NT, true, V::kStreamWalk>(x, K, w, N, n0, bias, y);
    stream_tile<V, WD, NT, MT - 1>(rows, x, K, w, N, n0, bias, y);
  }
}

// Rows [0, M) of the output for the NT weight rows from n0: tiles of kBlockM rows over the same
// panel (the first reads it from memory, the others from L1), then the M % kBlockM rows left over
// in one narrower tile, so every weight byte comes from memory once per row block.
template <class V, DType WD, int NT, int Walk>
inline void panel_rows(const float* x, int64_t M, int64_t K, const storage_t<WD>* w, int64_t N,
                       int64_t n0, const float* bias, float* y) {
  constexpr int BM = V::kBlockM;
  int64_t m0 = 0;
  for (; m0 + BM <= M; m0 += BM) {
    if (m0 == 0)
      block_out<V, WD, BM, NT, true, Walk>(x, K, w, N, n0, bias, y);
    else
      block_out<V, WD, BM, NT, false, Walk>(x + m0 * K, K, w, N, n0, bias, y + m0 * N);
  }
  const int rest = static_cast<int>(M - m0);
  if (rest == 0) return;
  if (m0 == 0)
    tile_of<V, WD, NT, true, Walk>(rest, x, K, w, N, n0, bias, y);
  else
    tile_of<V, WD, NT, false, Walk>(rest, x + m0 * K, K, w, N, n0, bias, y + m0 * N);
}

template <class V, DType WD>
void linear_typed(const float* x, int64_t M, int64_t K, const storage_t<WD>* w, int64_t N,
                  const float* bias, float* y, bool parallel) {
  constexpr int BM = V::kBlockM, BN = V::kBlockN;
  // Rows are processed in blocks whose activations stay in L2 (~256 KB) while every weight panel
  // passes over them; without blocking, a large M (MAR's 640-row MAE passes, thousands of
  // diffusion-head rows) re-reads all of x from memory once per panel.
  const int64_t block = imax(BM, (65536 / imax(K, 1)) / BM * BM);
  for (int64_t b0 = 0; b0 < M; b0 += block) {
    const int64_t bM = imin(block, M - b0);
    const float* xb = x + b0 * K;
    float* yb = y + b0 * N;
    // Few rows (the decode step, short verifications) are bound by the weight stream: while the
    // block's activations fit in L1 (24 KB of the 32) and there are at most 2 row tiles, each
    // thread reads its weight rows once, in order, one row at a time (kStreamN rows' outputs
    // share an epilogue), every row tile reading the row from L1. Past that, panels of BN weight
    // rows (register tiles of BM x BN) reuse each loaded x chunk BN times: bound by the FMA
    // units. Measured on the 2-core Zen 4 machine, weights from memory (docs/performance.md):
    // reading 2 or 6 rows at once halved the bandwidth of the one-row step (f16 384x1152, M 1:
    // 45-60 us against 30 one row at a time); rows 5-8 cost the same either way, and at M 12 the
    // panels took 93-99 us against 112 for the row stream.
    const bool stream = bM <= 2 * BM && bM * K * 4 <= 24 * 1024;
    // The weight rows in groups: BN at once in panels, or SN one after another when streaming
    // (their outputs share one epilogue), then the rest one at a time. Each thread takes a
    // contiguous range of the weights; one parallel region per row block.
    constexpr int SN = V::kStreamN;
    // kBlockM < rows <= kStreamM: one tile of all the rows, kStreamWideN weight rows' outputs
    // per epilogue. In tiles of kBlockM, each row tile walks a weight row as a chain of K / W
    // dependent FMAs per row: with 4 rows, 4 chains, too few to cover the FMA latency on a core
    // with two FMA units, and 5 rows cost as much as 8 (a tile of 4 and a tile of 1, each
    // latency-bound).
    constexpr int WN = V::kStreamWideN;
    // From this many rows the stream walks V::kStreamWalk weight rows together (1 or 2 rows:
    // one row at a time, as the one-row step streams best).
    constexpr int64_t kStreamWalkFromM = 3;
    const bool wide = stream && bM > BM && bM <= V::kStreamM;
    const int64_t groups = wide ? N / WN : stream ? N / SN : N / BN;
    const int64_t done = wide ? groups * WN : stream ? groups * SN : groups * BN;
#pragma omp parallel if (parallel)
    {
      if (wide) {
#pragma omp for schedule(static) nowait
        for (int64_t g = 0; g < groups; ++g)
          stream_tile<V, WD, WN>(static_cast<int>(bM), xb, K, w, N, g * WN, bias, yb);
      } else if (stream && bM >= kStreamWalkFromM) {
#pragma omp for schedule(static) nowait
        for (int64_t g = 0; g < groups; ++g)
          panel_rows<V, WD, SN, V::kStreamWalk>(xb, bM, K, w, N, g * SN, bias, yb);
      } else if (stream) {
#pragma omp for schedule(static) nowait
        for (int64_t g = 0; g < groups; ++g)
          panel_rows<V, WD, SN, 1>(xb, bM, K, w, N, g * SN, bias, yb);
      } else {
#pragma omp for schedule(static) nowait
        for (int64_t g = 0; g < groups; ++g)
          panel_rows<V, WD, BN, BN>(xb, bM, K, w, N, g * BN, bias, yb);
      }
#pragma omp for schedule(static)
      for (int64_t n = done; n < N; ++n) panel_rows<V, WD, 1, 1>(xb, bM, K, w, N, n, bias, yb);
    }
  }
}

// y[M,N] = x[M,K] · w[N,K]^T (+ bias) for one instruction set.
template <class V>
void linear_simd(const float* x, int64_t M, int64_t K, const void* w, DType w_type, int64_t N,
                 const float* bias, float* y, bool parallel) {
  switch (w_type) {
    case DType::F32:
      return linear_typed<V, DType::F32>(x, M, K, static_cast<const float*>(w), N, bias, y,
                                         parallel);
    case DType::F16:
      return linear_typed<V, DType::F16>(x, M, K, static_cast<const uint16_t*>(w), N, bias, y,
                                         parallel);
    default:
      return linear_typed<V, DType::BF16>(x, M, K, static_cast<const uint16_t*>(w), N, bias, y,
                                          parallel);
  }
}

}  // namespace
}  // namespace tessera::cpu
