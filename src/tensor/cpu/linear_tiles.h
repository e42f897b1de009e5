// The SIMD body of the linear kernel, y = x · w^T, written once over a vector type `V` and
// compiled per instruction set (linear_avx512.cpp, linear_avx2.cpp, each with its own target
// flags); linear_kernels.cpp picks one at run time from the CPU's features.
//
// Every output element is one dot product with four vector accumulators over the K chunks of
// V::W floats (chunk c goes to accumulator c % 4), combined as (a0 + a1) + (a2 + a3) and finished
// by one scalar FMA chain over K % W. That order does not depend on M, on the tile that computes
// the element or on the thread count, so sampling results do not depend on batch size or threads.
//
// V provides: reg, W, kTile (rows of a streaming dot_tile), kBlockM x kBlockN (register tile of
// dot_block), zero, load, load_f16, load_bf16, fma, add, sum (horizontal sum of one register)
// and sums (W registers' horizontal sums at once, each bit-identical to sum).
//
// Everything here has internal linkage: each including file gets its own copy compiled for its
// own instruction set, and the linker can never swap one for the other.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

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

// out[m] = dot(x[m*ldx .. +K], w[0..K]) for m < MT: streams one weight row once, for few rows.
template <class V, DType WD, int MT>
inline void dot_tile(const float* x, int64_t ldx, const storage_t<WD>* w, int64_t K, float* out) {
  constexpr int W = V::W;
  typename V::reg acc[MT][4];
  for (int m = 0; m < MT; ++m)
    for (int j = 0; j < 4; ++j) acc[m][j] = V::zero();
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
    const auto w0 = load_w<V, WD>(w + k), w1 = load_w<V, WD>(w + k + W);
    const auto w2 = load_w<V, WD>(w + k + 2 * W), w3 = load_w<V, WD>(w + k + 3 * W);
    for (int m = 0; m < MT; ++m) {
      const float* xm = x + m * ldx + k;
      acc[m][0] = V::fma(V::load(xm), w0, acc[m][0]);
      acc[m][1] = V::fma(V::load(xm + W), w1, acc[m][1]);
      acc[m][2] = V::fma(V::load(xm + 2 * W), w2, acc[m][2]);
      acc[m][3] = V::fma(V::load(xm + 3 * W), w3, acc[m][3]);
    }
  }
  for (int j = 0; k + W <= K; k += W, ++j) {
    const auto wv = load_w<V, WD>(w + k);
    for (int m = 0; m < MT; ++m) acc[m][j] = V::fma(V::load(x + m * ldx + k), wv, acc[m][j]);
  }
  for (int m = 0; m < MT; ++m) {
    float s = V::sum(V::add(V::add(acc[m][0], acc[m][1]), V::add(acc[m][2], acc[m][3])));
    out[m] = dot_tail<WD>(x + m * ldx, w, k, K, s);
  }
}

// out[m * NT + n] = dot(x row m, w row n) for an MT x NT tile, for several rows (verification,
// MAE passes, diffusion-head rows). Bit-identical to dot_tile: accumulator j of an output sums the
// chunks k = 4W*i + j*W of the 4W loop, plus chunk j of the K % 4W rest, in the same order, and
// the four are combined and finished by dot_tail as there. Running the four accumulators one after
// another (phase j) keeps MT*NT accumulators live instead of 4 per output, so a tile reuses each
// loaded x chunk NT times and each weight chunk MT times: bound by the FMA units, not the loads.
template <class V, DType WD, int MT, int NT>
inline void dot_block(const float* x, int64_t ldx, const storage_t<WD>* w, int64_t ldw, int64_t K,
                      float* out) {
  constexpr int W = V::W;
  // K is walked in slices whose MT + NT rows (~20 KB) stay in L1 across the four phases; the
  // accumulators carry over in part[]. Measured on Zen 3 (AVX2), M 640: 75 GFLOPS on 2 cores for
  // K 768 and 3072, against 42 for dot_tile alone and 149 for OpenBLAS sgemm (docs/performance.md).
  constexpr int64_t kSlice = imax(1, 20480 / (4 * (MT + NT)) / (4 * W)) * (4 * W);
  const int64_t main_end = K / (4 * W) * (4 * W);
  typename V::reg part[4][MT][NT];
  for (int j = 0; j < 4; ++j)
    for (int m = 0; m < MT; ++m)
      for (int n = 0; n < NT; ++n) part[j][m][n] = V::zero();
  auto run = [&](int j, int64_t k0, int64_t k1) {  // chunks k0, k0 + 4W, ... < k1 into part[j]
    typename V::reg acc[MT][NT];
    for (int m = 0; m < MT; ++m)
      for (int n = 0; n < NT; ++n) acc[m][n] = part[j][m][n];
    for (int64_t k = k0; k < k1; k += 4 * W) {
      typename V::reg xv[MT];
      for (int m = 0; m < MT; ++m) xv[m] = V::load(x + m * ldx + k);
      for (int n = 0; n < NT; ++n) {
        const auto wv = load_w<V, WD>(w + n * ldw + k);
        for (int m = 0; m < MT; ++m) acc[m][n] = V::fma(xv[m], wv, acc[m][n]);
      }
    }
    for (int m = 0; m < MT; ++m)
      for (int n = 0; n < NT; ++n) part[j][m][n] = acc[m][n];
  };
  for (int64_t s0 = 0; s0 < main_end; s0 += kSlice) {
    const int64_t s1 = imin(s0 + kSlice, main_end);
    for (int j = 0; j < 4; ++j) run(j, s0 + j * W, s1);
  }
  for (int j = 0; j < 4 && main_end + (j + 1) * W <= K; ++j)
    run(j, main_end + j * W, main_end + j * W + 1);
  // The horizontal sums of all MT*NT outputs, W at a time (V::sums: the same additions as V::sum
  // per output, shared across W outputs; the epilogue cost as much as the FMAs at K 384).
  constexpr int kOut = MT * NT, kPadded = (kOut + W - 1) / W * W;
  typename V::reg tot[kPadded];
  for (int m = 0; m < MT; ++m)
    for (int n = 0; n < NT; ++n)
      tot[m * NT + n] =
          V::add(V::add(part[0][m][n], part[1][m][n]), V::add(part[2][m][n], part[3][m][n]));
  for (int o = kOut; o < kPadded; ++o) tot[o] = V::zero();
  float sums[kPadded];
  for (int g = 0; g < kPadded; g += W) V::sums(tot + g, sums + g);
  const int64_t k_tail = main_end + (K - main_end) / W * W;
  for (int m = 0; m < MT; ++m)
    for (int n = 0; n < NT; ++n)
      out[m * NT + n] = k_tail < K
                            ? dot_tail<WD>(x + m * ldx, w + n * ldw, k_tail, K, sums[m * NT + n])
                            : sums[m * NT + n];
}

// Rows m0.. m0+MT-1 of the output for weight rows n0.. n0+NT-1 (one dot_block), plus bias.
template <class V, DType WD, int MT, int NT>
inline void block_out(const float* x, int64_t K, const storage_t<WD>* w, int64_t N, int64_t n0,
                      const float* bias, float* y) {
  float out[MT * NT];
  dot_block<V, WD, MT, NT>(x, K, w + n0 * K, K, K, out);
  for (int m = 0; m < MT; ++m)
    for (int n = 0; n < NT; ++n) y[m * N + n0 + n] = out[m * NT + n] + (bias ? bias[n0 + n] : 0.0f);
}

// The last `rest` (< kBlockM) rows of a row block against one weight panel: a narrower dot_block,
// so those rows read the panel from L1 with the others instead of streaming the weights again.
template <class V, DType WD, int NT, int MT = V::kBlockM - 1>
inline void block_rest(int rest, const float* x, int64_t K, const storage_t<WD>* w, int64_t N,
                       int64_t n0, const float* bias, float* y) {
  if constexpr (MT >= 1) {
    if (rest == MT) return block_out<V, WD, MT, NT>(x, K, w, N, n0, bias, y);
    block_rest<V, WD, NT, MT - 1>(rest, x, K, w, N, n0, bias, y);
  }
}

// Rows [m0, M) of one output column n through streaming dot_tiles (few rows, or columns past the
// last whole panel).
template <class V, DType WD, int MT = V::kTile>
inline void column_rows(const float* x, int64_t m0, int64_t M, int64_t K, const storage_t<WD>* wr,
                        int64_t N, int64_t n, float b, float* y) {
  float out[MT];
  for (; m0 + MT <= M; m0 += MT) {
    dot_tile<V, WD, MT>(x + m0 * K, K, wr, K, out);
    for (int m = 0; m < MT; ++m) y[(m0 + m) * N + n] = out[m] + b;
  }
  if constexpr (MT > 1) {
    if (m0 < M) column_rows<V, WD, MT - 1>(x, m0, M, K, wr, N, n, b, y);
  }
}

template <class V, DType WD>
void linear_typed(const float* x, int64_t M, int64_t K, const storage_t<WD>* w, int64_t N,
                  const float* bias, float* y, bool parallel) {
  constexpr int BM = V::kBlockM, BN = V::kBlockN;
  // Rows are processed in blocks whose activations stay in L2 (~256 KB) while every weight row
  // passes over them; without blocking, a large M (MAR's 640-row MAE passes, thousands of
  // diffusion-head rows) re-reads all of x from memory once per output column.
  constexpr int64_t kRowUnit = V::kTile * BM;
  const int64_t block = imax(kRowUnit, (65536 / imax(K, 1)) / kRowUnit * kRowUnit);
  for (int64_t b0 = 0; b0 < M; b0 += block) {
    const int64_t bM = imin(block, M - b0);
    const float* xb = x + b0 * K;
    float* yb = y + b0 * N;
    // While the block's activations fit in L1 (24 KB of the 32) and there are at most 4 * kTile
    // rows, each weight row is streamed once through dot_tile over all the row tiles, reused from
    // L1: the bandwidth-bound decode step and small verifications. Past that dot_block's register
    // tiles win: each panel of BN weight rows is loaded once and all rows run over it in tiles of
    // BM rows, the last bM % BM rows in one narrower tile, so every weight byte still comes from
    // memory once per row block. Measured on the 2-core Zen 4 machine, f16 384x1152: dot_block
    // 213/261/507 us at M 4/8/16 against 143/213/338, and 497 against 819 at M 24; at K 768, M 12
    // and 16 dot_tile was slower (activations out of L1); AVX2: the crossing lies between M 8
    // and 16 (docs/performance.md).
    const bool stream = bM <= 4 * V::kTile && bM * K * 4 <= 24 * 1024;
    const int64_t panels = stream ? 0 : N / BN;
    const int64_t full_m = bM / BM * BM;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t g = 0; g < panels; ++g) {
      const int64_t n0 = g * BN;
      for (int64_t m0 = 0; m0 < full_m; m0 += BM)
        block_out<V, WD, BM, BN>(xb + m0 * K, K, w, N, n0, bias, yb + m0 * N);
      if (full_m < bM)
        block_rest<V, WD, BN>(static_cast<int>(bM - full_m), xb + full_m * K, K, w, N, n0, bias,
                              yb + full_m * N);
    }
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t n = panels * BN; n < N; ++n)
      column_rows<V, WD>(xb, 0, bM, K, w + n * K, N, n, bias ? bias[n] : 0.0f, yb);
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
