// The CPU backend's layout for linear weights: w[N, K] (row n = output n) repacked into panels of
// kPanelRows output rows, each stored k-major: element (n, k) of panel p = n / kPanelRows is at
// p * K * kPanelRows + k * kPanelRows + n % kPanelRows; rows past N are zero.
//
// bf16 panels interleave pairs of k instead (the VNNI order AMX tiles take, linear_amx.cpp):
// element (n, k) at p * Kp * kPanelRows + (k & ~1) * kPanelRows + 2 * (n % kPanelRows) + (k & 1),
// with K zero-padded to Kp, a multiple of kBf16KBlock (one tile's depth). A pair row holds the
// same bytes at the same offset as the two k-major rows it replaces, and the FMA paths widen it
// with one shift (even k) or one mask (odd k) per vector instead of a zero-extension and a shift.
//
// Why: a k-major panel lets the kernel load the weights of 32 outputs at one k with one or two
// vector loads and multiply them by a broadcast activation, so each output is one sequential FMA
// chain over k (the same order for every M, thread count and instruction set) and each loaded
// weight serves every row of a register tile (BLIS-style outer products instead of dot products,
// which needed a horizontal sum per output and converted each 16-bit weight once per row tile).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace tessera::cpu {

constexpr int64_t kPanelRows = 32;

constexpr int64_t kBf16KBlock = 32;

inline int64_t panel_count(int64_t N) {
  return (N + kPanelRows - 1) / kPanelRows;
}
// The stored depth of a panel: K, or for bf16 K rounded up to whole kBf16KBlock.
inline int64_t panel_depth(DType dtype, int64_t K) {
  return dtype == DType::BF16 ? (K + kBf16KBlock - 1) / kBf16KBlock * kBf16KBlock : K;
}
// Index of element (n, k) of w in its panels (in elements).
inline int64_t panel_index(DType dtype, int64_t K, int64_t n, int64_t k) {
  const int64_t base = (n / kPanelRows) * panel_depth(dtype, K) * kPanelRows;
  if (dtype == DType::BF16)
    return base + (k & ~int64_t{1}) * kPanelRows + 2 * (n % kPanelRows) + (k & 1);
  return base + k * kPanelRows + n % kPanelRows;
}
// Bytes of the panels of an [N, K] weight of element type `dtype` (N rounded up to whole panels,
// K to panel_depth).
size_t panel_bytes(DType dtype, int64_t N, int64_t K);
// Repacks row-major w[N, K] into `panels` (panel_bytes of them); the values are not converted.
void pack_panels(const void* w, DType dtype, int64_t N, int64_t K, void* panels);

}  // namespace tessera::cpu
