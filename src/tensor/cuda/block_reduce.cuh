// Block-wide f32 sum and max for the row kernels (layer_norm, softmax, attention, group_norm):
// every thread of the block gets the result. blockDim.x must be a multiple of 32, at most 1024.
#pragma once

#include <cuda_runtime.h>

namespace tessera::cuda {

__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// `is_max` picks max over sum; the shared slots are reused, so a barrier closes each call.
__device__ inline float block_reduce(float v, bool is_max) {
  __shared__ float part[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = is_max ? warp_max(v) : warp_sum(v);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float r = lane < warps ? part[lane] : (is_max ? -INFINITY : 0.0f);
  r = is_max ? warp_max(r) : warp_sum(r);
  __syncthreads();
  return r;
}
__device__ inline float block_sum(float v) {
  return block_reduce(v, false);
}
__device__ inline float block_max(float v) {
  return block_reduce(v, true);
}

// Block-wide f64 sum (group_norm's statistics, accumulated in double as on the CPU).
__device__ inline double block_sum_double(double v) {
  __shared__ double part[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  double r = lane < warps ? part[lane] : 0.0;
  for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
  __syncthreads();
  return r;
}

// Grid for an element-wise kernel of n elements with a grid-stride loop.
inline unsigned elementwise_blocks(long long n, int threads) {
  const long long b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 16 ? 65535 * 16 : b));
}

}  // namespace tessera::cuda
