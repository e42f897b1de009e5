// The linear kernel for bf16 weights on AMX (Intel Advanced Matrix Extensions: tile registers and
// the TDPBF16PS tile multiply; compiled with -mamx-tile -mamx-bf16 whatever -march says, called
// only where amx_bf16_available() is true, see linear_kernels.cpp).
//
// Why: from about 8 rows the FMA paths are bound by arithmetic, and with 16-bit weights part of
// it is widening them. One TDPBF16PS multiplies a 16 x 32 bf16 tile of activations by a 32 x 16
// tile of weights into 16 x 16 f32 accumulators; measured here it takes the same ~5 ns for 1 or
// 16 rows, about 7x the f32 FMA peak at 16 rows. A 16-row GPT-B bf16 forward costs 1.2x a
// one-position one on this path instead of 2x; vanilla decoding is slower, so the path is opt-in
// (TESSERA_LINEAR_ISA=amx; docs/performance.md, session 20).
//
// Numerics: the activations are rounded to bf16 (round to nearest even) and each product of two
// bf16 is exact in f32; TDPBF16PS sums 32 of them into an accumulator in an order and internal
// precision of the hardware's own (it matches none of the orders the Intel SDM's pseudo-code
// suggests, measured), so results are close to, not bit-identical with, the FMA paths. They are
// still batch-invariant: a row's accumulators see only that row's activations and the same
// k-blocks in the same order, whatever M, the row's place in a tile or the thread count.
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/thread_pool.h"
#include "tensor/cpu/amx_tiles.h"
#include "tensor/cpu/linear_isa.h"
#include "tensor/cpu/linear_panels.h"

namespace tessera::cpu {
namespace {

constexpr int64_t kTileRows = 16;  // activation rows of one A and C tile
constexpr int kRowBlock = 32;      // rows per pass over a panel: two A tiles, four C tiles

// Tiles (amx_tiles.h): 0-3 hold the 2 x 2 blocks of f32 accumulators of a 32-row x 32-column output
// block, 4-5 its two activation tiles, 6-7 the panel's two weight tiles (columns 0-15 and 16-31).
// Activation and accumulator tiles have M rows when a call has fewer than 16 (no work or stores
// for padding rows), else 16.

// Prefetches one block (2 KB) of a panel at the kernels' distances ahead (kPrefetchBytes).
inline void prefetch_block(const char* ahead) {
  for (int64_t b = 0; b < kBf16KBlock * kPanelRows * 2; b += 64) {
    _mm_prefetch(ahead + b, _MM_HINT_T0);
    _mm_prefetch(ahead + b + kPrefetchBytes, _MM_HINT_T1);
  }
}

// out[rows][32] (row stride ld floats) = one or two row tiles of xa (tile-major, see
// round_rows_to_bf16) times one panel, over all of Kp; a block of 32 k is two contiguous 1 KB
// weight tiles (linear_panels.h).
template <bool kTwoRowTiles>
void panel_block(const uint16_t* xa, int64_t Kp, int64_t tile_rows, const uint16_t* panel,
                 const char* ahead, float* out, int64_t ld) {
  _tile_zero(0);
  _tile_zero(1);
  if constexpr (kTwoRowTiles) {
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t k = 0; k < Kp; k += kBf16KBlock) {
    const uint16_t* wk = panel + k * kPanelRows;
    prefetch_block(ahead + k * kPanelRows * 2);
    _tile_loadd(6, wk, 64);
    _tile_loadd(7, wk + 512, 64);
    _tile_loadd(4, xa + k * tile_rows, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (kTwoRowTiles) {
      _tile_loadd(5, xa + tile_rows * Kp + k * tile_rows, 64);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, out, ld * 4);
  _tile_stored(1, out + 16, ld * 4);
  if constexpr (kTwoRowTiles) {
    _tile_stored(2, out + tile_rows * ld, ld * 4);
    _tile_stored(3, out + tile_rows * ld + 16, ld * 4);
  }
}

// Rows of x rounded to bf16 into xa as the activation tiles AMX loads: tile-major, each tile the
// `tile_rows` rows of one row tile over one block of 32 k, 64 bytes per row, contiguous (a tile
// load then reads consecutive lines, as the weight tiles do; against rows strided by K the kernel
// benchmark measured the same within noise). Row m, k sits at
//   (m / tile_rows) * tile_rows * Kp + (k / 32) * tile_rows * 32 + (m % tile_rows) * 32 + k % 32;
// zero past K and on the padding rows up to Mp.
void round_rows_to_bf16(const float* x, int64_t M, int64_t K, int64_t Mp, int64_t Kp,
                        int64_t tile_rows, uint16_t* xa) {
  for (int64_t m = 0; m < Mp; ++m) {
    const float* in = m < M ? x + m * K : x;  // padding rows load nothing (mask 0)
    uint16_t* tile_row = xa + (m / tile_rows) * tile_rows * Kp + (m % tile_rows) * kBf16KBlock;
    for (int64_t k = 0; k < Kp; k += 16) {
      const int64_t left = m < M ? K - k : 0;
      const __mmask16 mask = left >= 16 ? __mmask16(0xffff)
                             : left > 0 ? static_cast<__mmask16>((1u << left) - 1)
                                        : __mmask16(0);
      const __m256bh b = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, in + k));
      std::memcpy(tile_row + (k / kBf16KBlock) * tile_rows * kBf16KBlock + k % kBf16KBlock, &b, 32);
    }
  }
}

}  // namespace

bool amx_bf16_available() {
  static const bool ok = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool amx = (d >> 22 & 1) && (d >> 24 & 1);  // AMX-BF16, AMX-TILE
    if (!amx || !__get_cpuid_count(7, 1, &a, &b, &c, &d) || !(a >> 5 & 1))
      return false;  // AVX512_BF16
    // Linux hands out the 8 KB of tile state only to a process that asks (ARCH_REQ_XCOMP_PERM for
    // XFEATURE_XTILEDATA); it refuses where the kernel or a hypervisor does not support it.
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
  }();
  return ok;
}

void linear_amx_bf16(const float* x, int64_t M, int64_t K, const uint16_t* panels, int64_t N,
                     const float* bias, float* y, bool parallel) {
  const int64_t Kp = panel_depth(DType::BF16, K);
  const int64_t P = panel_count(N);
  // Rows in blocks whose bf16 activations stay in L2 (~256 KB) while every panel passes over them.
  const int64_t block = std::max<int64_t>(kRowBlock, (131072 / Kp) / kRowBlock * kRowBlock);
  thread_local std::vector<uint16_t> xa;
  for (int64_t b0 = 0; b0 < M; b0 += block) {
    const int64_t bM = std::min(block, M - b0);
    const int64_t tile_rows = std::min(bM, kTileRows);
    const int64_t Mp = (bM + tile_rows - 1) / tile_rows * tile_rows;
    xa.resize(static_cast<size_t>(Mp * Kp));
    round_rows_to_bf16(x + b0 * K, bM, K, Mp, Kp, tile_rows, xa.data());
    const uint16_t* xs = xa.data();
    float* yb = y + b0 * N;
    cpu_pool().run(
        "linear",
        [&](int tid, int team) {
          configure_tiles(static_cast<int>(tile_rows));
          alignas(64) float out[kRowBlock * kPanelRows];
          // Each thread takes a contiguous range of panels: one sequential stream of weights.
          const IndexRange range = static_range(P, tid, team);
          for (int64_t p = range.begin; p < range.end; ++p) {
            const uint16_t* panel = panels + p * Kp * kPanelRows;
            const int64_t n0 = p * kPanelRows, cols = std::min(kPanelRows, N - n0);
            // The panel's columns and bias, for rows that go through `out`.
            const __mmask16 lo = cols >= 16 ? 0xffff : static_cast<__mmask16>((1u << cols) - 1);
            const __mmask16 hi = cols <= 16 ? 0 : static_cast<__mmask16>((1ull << (cols - 16)) - 1);
            const __m512 b_lo = bias ? _mm512_maskz_loadu_ps(lo, bias + n0) : _mm512_setzero_ps();
            const __m512 b_hi =
                bias ? _mm512_maskz_loadu_ps(hi, bias + n0 + 16) : _mm512_setzero_ps();
            for (int64_t m0 = 0; m0 < Mp; m0 += 2 * tile_rows) {
              // The first pass reads the panel from memory and prefetches ahead along it; later
              // passes read it from cache and prefetch the same distances into the next panel.
              const char* ahead =
                  reinterpret_cast<const char*>(panel + (m0 == 0 ? 0 : Kp * kPanelRows)) +
                  kPrefetchBytes;
              const bool two = Mp - m0 > tile_rows;
              const int64_t rows = std::min(2 * tile_rows, bM - m0);
              // A whole panel's columns and no padding rows: the tiles go straight into y.
              const bool direct = cols == kPanelRows && rows == (two ? 2 : 1) * tile_rows;
              float* dst = direct ? yb + m0 * N + n0 : out;
              const int64_t ld = direct ? N : kPanelRows;
              if (two)
                panel_block<true>(xs + m0 * Kp, Kp, tile_rows, panel, ahead, dst, ld);
              else
                panel_block<false>(xs + m0 * Kp, Kp, tile_rows, panel, ahead, dst, ld);
              if (direct && !bias) continue;
              for (int64_t m = 0; m < rows; ++m) {
                const float* o = dst + m * ld;
                float* yr = yb + (m0 + m) * N + n0;
                _mm512_mask_storeu_ps(yr, lo, _mm512_add_ps(_mm512_maskz_loadu_ps(lo, o), b_lo));
                _mm512_mask_storeu_ps(yr + 16, hi,
                                      _mm512_add_ps(_mm512_maskz_loadu_ps(hi, o + 16), b_hi));
              }
            }
          }
          _tile_release();
        },
        parallel);
  }
}

}  // namespace tessera::cpu
