// The CPU backend's layout for linear weights: w[N, K] (row n = output n) repacked into panels of
// kPanelRows output rows, each stored k-major: element (n, k) of panel p = n / kPanelRows is at
// p * K * kPanelRows + k * kPanelRows + n % kPanelRows; rows past N are zero.
//
// bf16 panels are stored as the weight tiles AMX multiplies (linear_amx.cpp), K zero-padded to Kp,
// a multiple of kBf16KBlock: each block of 32 k holds two 1 KB tiles, columns 0-15 then 16-31 of
// the panel, each 16 rows (k pairs) of 16 columns x (k even, k odd). Element (n, k) is at
// p * Kp * kPanelRows + (k / 32) * 1024 + ((n % 32) / 16) * 512 + ((k % 32) / 2) * 32
// + 2 * (n % 16) + k % 2. Contiguous tiles stream faster into AMX than rows strided by 128 bytes;
// the FMA paths widen a vector of pairs with one shift (even k) or one mask (odd k) instead of a
// zero-extension and a shift.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace tessera::cpu {

constexpr int64_t kPanelRows = 32;

constexpr int64_t kBf16KBlock = 32;

// How far ahead along a panel the kernels (linear_tiles.h, linear_amx.cpp) prefetch: the hardware
// prefetcher alone keeps too few lines in flight for one core to reach the memory bandwidth
// (without software prefetches a GPT-B bf16 forward took 1.5x longer). Each line is prefetched
// twice: 2 x kPrefetchBytes ahead into L2, then kPrefetchBytes ahead into L1. A single prefetch
// into L2 (8 KB: of 1, 2, 4, 8 and 16 KB the fastest or tied for 1-4 rows in `bench --kernels`)
// left GPT-B's DRAM-resident weights streaming at about the rate of a forward's compute added to
// its memory time; the second request re-issues lines the first one lost and cut GPT-B bf16's 3-8
// position forwards by 3-7%, with the emoji model (weights in L3) the same or faster
// (docs/performance.md).
constexpr int64_t kPrefetchBytes = 8192;

inline int64_t panel_count(int64_t N) {
  return (N + kPanelRows - 1) / kPanelRows;
}
// The stored depth of a panel: K, or for bf16 K rounded up to whole kBf16KBlock.
inline int64_t panel_depth(DType dtype, int64_t K) {
  return dtype == DType::BF16 ? (K + kBf16KBlock - 1) / kBf16KBlock * kBf16KBlock : K;
}
// Within a bf16 panel: where the pair (k & ~1, k | 1) of panel column c starts (in elements).
inline int64_t bf16_pair_offset(int64_t k, int64_t c) {
  return (k / kBf16KBlock) * (kBf16KBlock * kPanelRows) + (c / 16) * 512 +
         ((k % kBf16KBlock) / 2) * 32 + 2 * (c % 16);
}
// Index of element (n, k) of w in its panels (in elements).
inline int64_t panel_index(DType dtype, int64_t K, int64_t n, int64_t k) {
  const int64_t base = (n / kPanelRows) * panel_depth(dtype, K) * kPanelRows;
  if (dtype == DType::BF16) return base + bf16_pair_offset(k, n % kPanelRows) + (k & 1);
  return base + k * kPanelRows + n % kPanelRows;
}
// Bytes of the panels of an [N, K] weight of element type `dtype` (N rounded up to whole panels,
// K to panel_depth).
size_t panel_bytes(DType dtype, int64_t N, int64_t K);
// Repacks row-major w[N, K] into `panels` (panel_bytes of them); the values are not converted.
void pack_panels(const void* w, DType dtype, int64_t N, int64_t K, void* panels);

}  // namespace tessera::cpu
