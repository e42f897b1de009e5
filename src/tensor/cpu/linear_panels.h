// The CPU backend's layout for linear weights: w[N, K] (row n = output n) repacked into panels of
// kPanelRows output rows, each stored k-major: element (n, k) of panel p = n / kPanelRows is at
// p * K * kPanelRows + k * kPanelRows + n % kPanelRows; rows past N are zero.
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

inline int64_t panel_count(int64_t N) {
  return (N + kPanelRows - 1) / kPanelRows;
}
// Bytes of the panels of an [N, K] weight of element type `dtype` (N rounded up to whole panels).
size_t panel_bytes(DType dtype, int64_t N, int64_t K);
// Repacks row-major w[N, K] into `panels` (panel_bytes of them); the values are not converted.
void pack_panels(const void* w, DType dtype, int64_t N, int64_t K, void* panels);

}  // namespace tessera::cpu
