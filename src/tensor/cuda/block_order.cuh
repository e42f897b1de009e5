// Block-wide reductions and scans in a fixed order, for kernels whose results must not depend on
// the schedule (replays give the same bits) and should stay close to the CPU's sequential sums:
// warp sums with __shfl_down_sync (lane 0 gets a result in a fixed order; xor butterflies would
// give lanes differently rounded sums), then the warps' partial results added in warp order.
// Every thread of the block gets the result. Warps: blockDim.x / 32 (the caller's compile-time
// block size); `slot` is a Warps-long array in shared memory, reused: a barrier closes each call.
// The row samplers (sampling/cuda/sample_kernels.cu) and the speculative walk
// (speculative/cuda/block_lanes.cuh) use them.
#pragma once

#include <cuda_runtime.h>

namespace tessera::cuda {

template <typename T>
__device__ T ordered_warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

template <int Warps, typename T>
__device__ T ordered_block_sum(T v, T* slot) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = ordered_warp_sum(v);
  if (lane == 0) slot[warp] = v;
  __syncthreads();
  T total = T(0);
  for (int w = 0; w < Warps; ++w) total += slot[w];
  __syncthreads();
  return total;
}

template <int Warps>
__device__ float ordered_block_max(float v, float* slot) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
  if (lane == 0) slot[warp] = v;
  __syncthreads();
  float m = slot[0];
  for (int w = 1; w < Warps; ++w) m = fmaxf(m, slot[w]);
  __syncthreads();
  return m;
}

// Min (want_min) or max of an int over the block.
template <int Warps>
__device__ int ordered_block_extreme(int v, bool want_min, int* slot) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    const int other = __shfl_down_sync(0xffffffffu, v, o);
    v = want_min ? min(v, other) : max(v, other);
  }
  if (lane == 0) slot[warp] = v;
  __syncthreads();
  int m = slot[0];
  for (int w = 1; w < Warps; ++w) m = want_min ? min(m, slot[w]) : max(m, slot[w]);
  __syncthreads();
  return m;
}

// Exclusive prefix sum over threads in thread order; *total gets the block's sum.
template <int Warps, typename T>
__device__ T ordered_block_exclusive_scan(T v, T* slot, T* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  T inclusive = v;
  for (int o = 1; o < 32; o <<= 1) {
    const T up = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += up;
  }
  if (lane == 31) slot[warp] = inclusive;
  __syncthreads();
  T before = T(0), all = T(0);
  for (int w = 0; w < Warps; ++w) {
    if (w < warp) before += slot[w];
    all += slot[w];
  }
  __syncthreads();
  *total = all;
  return before + inclusive - v;
}

}  // namespace tessera::cuda
