// A walk's lanes (speculative/walk_lanes.h) as the threads of one CUDA block: every thread
// follows the same walk, and each pass over a row is spread over them, each thread owning a
// contiguous chunk so that thread order is index order. Reductions and scans run in a fixed order
// (tensor/cuda/block_order.cuh): a replay gives the same bits, and a sum differs from the CPU's
// sequential one by rounding only (~1e-16 relative, in double), so a draw or a test differs from
// the CPU's only when a uniform lies that close to a boundary, or a normalised entry that close to
// a float's rounding boundary.
// Host code never runs these members: they exist on the host only so that the TESSERA_HD walk
// compiles there.
#pragma once

#include <cuda_runtime.h>

#include <climits>

#include "sampling/sampling_rules.h"
#include "speculative/walk_lanes.h"
#include "tensor/cuda/block_order.cuh"

namespace tessera::speculative {

template <int Threads>
struct BlockLanes {
  static_assert(Threads % 32 == 0 && Threads <= 1024, "whole warps");
  static constexpr int kWarps = Threads / 32;
  struct Shared {
    double d[kWarps];
    float f[kWarps];
    int i[kWarps];
  };
  Shared* s;  // in the block's shared memory

  // This thread's chunk of a pass over n entries.
  struct Chunk {
    int begin, end;
  };
#if defined(__CUDA_ARCH__)
  __device__ Chunk chunk(int n) const {
    Chunk c;
    lane_chunk(threadIdx.x, Threads, n, &c.begin, &c.end);
    return c;
  }
#endif

  template <class F>
  TESSERA_HD void each(int n, F&& f) const {
#if defined(__CUDA_ARCH__)
    for (int i = threadIdx.x; i < n; i += Threads) f(i);
    __syncthreads();
#else
    (void)n, (void)f;
#endif
  }
  template <class F>
  TESSERA_HD void one(F&& f) const {
#if defined(__CUDA_ARCH__)
    if (threadIdx.x == 0) f();
    __syncthreads();
#else
    (void)f;
#endif
  }
  TESSERA_HD double sum(const float* v, int n) const {
    return sum_of(n, [v](int i) { return static_cast<double>(v[i]); });
  }
  template <class F>
  TESSERA_HD double sum_of(int n, F&& f) const {
#if defined(__CUDA_ARCH__)
    const Chunk c = chunk(n);
    return cuda::ordered_block_sum<kWarps>(chunk_sum_of(f, c.begin, c.end), s->d);
#else
    (void)n, (void)f;
    return 0.0;
#endif
  }
  // The first index of the largest value: each chunk's by argmax's rule, then the block's. Rows
  // are NaN-free (distributions; a non-finite logit is flagged before any walk): argmax_row
  // returns 0 for a NaN at 0, where this skips NaNs.
  TESSERA_HD int argmax(const float* v, int n) const {
#if defined(__CUDA_ARCH__)
    const Chunk c = chunk(n);
    float best = -INFINITY;
    int best_i = INT_MAX;
    chunk_argmax(v, c.begin, c.end, &best, &best_i);
    const float mx = cuda::ordered_block_max<kWarps>(best, s->f);
    const int first =
        cuda::ordered_block_extreme<kWarps>(best == mx ? best_i : INT_MAX, true, s->i);
    return first == INT_MAX ? 0 : first;  // an all -inf or NaN row: argmax_row's 0
#else
    (void)v, (void)n;
    return 0;
#endif
  }
  // draw_row: the chunks' sums scanned in index order, the first index whose cumulative mass
  // exceeds u times the total; the last positive index when rounding leaves it unmet.
  TESSERA_HD int draw(const float* v, int n, double u) const {
#if defined(__CUDA_ARCH__)
    const Chunk c = chunk(n);
    double total;
    const double before =
        cuda::ordered_block_exclusive_scan<kWarps>(chunk_sum(v, c.begin, c.end), s->d, &total);
    int last = -1;
    const int hit = draw_in_chunk(v + c.begin, c.end - c.begin, c.begin, before, u * total, &last);
    const int first_hit = cuda::ordered_block_extreme<kWarps>(hit >= 0 ? hit : INT_MAX, true, s->i);
    const int last_positive = cuda::ordered_block_extreme<kWarps>(last, false, s->i);
    return first_hit != INT_MAX ? first_hit : last_positive;
#else
    (void)v, (void)n, (void)u;
    return -1;
#endif
  }
  // Each chunk's best, then the warp's (shuffles) and the block's (warp order): under a strict
  // total order the best is one index however they combine.
  template <class Keep, class Better>
  TESSERA_HD int best(int n, Keep&& keep, Better&& better) const {
#if defined(__CUDA_ARCH__)
    const Chunk c = chunk(n);
    int v = chunk_best(keep, better, c.begin, c.end, -1);
    for (int o = 16; o > 0; o >>= 1) {
      const int other = __shfl_down_sync(0xffffffffu, v, o);
      if (other >= 0 && (v < 0 || better(other, v))) v = other;
    }
    if ((threadIdx.x & 31) == 0) s->i[threadIdx.x >> 5] = v;
    __syncthreads();
    int found = -1;
    for (int w = 0; w < kWarps; ++w)
      if (s->i[w] >= 0 && (found < 0 || better(s->i[w], found))) found = s->i[w];
    __syncthreads();
    return found;
#else
    (void)n, (void)keep, (void)better;
    return -1;
#endif
  }
};

}  // namespace tessera::speculative
