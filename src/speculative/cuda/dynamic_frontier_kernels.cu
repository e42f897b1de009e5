// A block per image: an image's expansion appends at most K^2 candidates (serial, thread 0, in the
// CPU's order), then every thread places a share of them (an O(K^2) count each); a feed writes K
// mask rows of up to a slot's capacity across the block; the rerank places every candidate.
#include <cuda_runtime.h>

#include <string>

#include "speculative/cuda/dynamic_frontier_kernels.h"
#include "tensor/cuda/cuda_check.h"
#include "tessera/error.h"

namespace tessera::speculative {

namespace {

constexpr int kThreads = 128;

__global__ void expand_frontiers_kernel(DynamicImage* images, DynamicCandidate* candidates,
                                        int32_t* frontier, const int32_t* ids, const float* mass,
                                        const int32_t* flag, int K, int C, int rows, int depth) {
  __shared__ int first;
  const int i = blockIdx.x;
  DynamicImage& im = images[i];
  DynamicCandidate* c = candidates + static_cast<int64_t>(i) * C;
  int32_t* f = frontier + static_cast<int64_t>(i) * K;
  const int64_t row = static_cast<int64_t>(i) * rows * K;
  if (threadIdx.x == 0) first = expand_image(im, c, f, ids + row, mass + row, K, depth, *flag);
  __syncthreads();
  const bool stopped = depth > 1 && im.frontier == 0;
  const int count = im.count;
  __syncthreads();  // every thread has read the old frontier's size before it is replaced
  if (stopped) return;
  for (int x = first + threadIdx.x; x < count; x += kThreads)
    place_in_frontier(im, c, f, K, depth, first, x);
  if (threadIdx.x == 0) im.frontier = min(count - first, K);
}

__global__ void feed_frontiers_kernel(DynamicImage* images, DynamicCandidate* candidates,
                                      const int32_t* frontier, int m, int halves, int K, int C,
                                      int d, int tree_rows, int prev_rows, int32_t* tokens,
                                      int32_t* feature_rows, uint8_t* mask, int stride) {
  const int i = blockIdx.x;
  DynamicImage& im = images[i];
  DynamicCandidate* c = candidates + static_cast<int64_t>(i) * C;
  const int32_t* f = frontier + static_cast<int64_t>(i) * K;
  if (threadIdx.x == 0)
    feed_image(im, c, f, i, m, halves, K, d, tree_rows, prev_rows, 0, tokens, feature_rows);
  __syncthreads();
  const int tree_base = im.tree_base, n_frontier = im.frontier;
  for (int h = 0; h < halves; ++h)
    for (int k = 0; k < K; ++k)
      clear_mask_row(mask + ((static_cast<int64_t>(h) * m + i) * K + k) * stride, stride, tree_base,
                     threadIdx.x, kThreads);
  __syncthreads();
  for (int t = threadIdx.x; t < halves * K; t += kThreads) {
    const int h = t / K, k = t % K;
    mark_mask_path(mask + ((static_cast<int64_t>(h) * m + i) * K + k) * stride, c,
                   k < n_frontier ? f[k] : -1, tree_base, tree_rows + k);
  }
}

__global__ void best_candidates_kernel(DynamicImage* images, const DynamicCandidate* candidates,
                                       int32_t* ranks, DynamicCandidate* best, int C, int total) {
  const int i = blockIdx.x;
  DynamicImage& im = images[i];
  const DynamicCandidate* c = candidates + static_cast<int64_t>(i) * C;
  int32_t* r = ranks + static_cast<int64_t>(i) * C;
  const int count = im.count;
  for (int x = threadIdx.x; x < count; x += kThreads) r[x] = candidate_place(c, 0, count, x);
  __syncthreads();
  for (int x = threadIdx.x; x < count; x += kThreads)
    copy_to_best(c, r, total, best + static_cast<int64_t>(i) * total, x);
  if (threadIdx.x == 0) im.best = min(count, total);
}

void check_sizes(const char* what, int m, int K) {
  if (m < 1 || K < 1)
    throw Error(std::string("internal: ") + what + " of " + std::to_string(m) + " images, K " +
                std::to_string(K));
}

}  // namespace

void launch_expand_frontiers(DynamicImage* images, DynamicCandidate* candidates, int32_t* frontier,
                             const int32_t* ids, const float* mass, const int32_t* flag, int m,
                             int K, int C, int rows, int depth, CUstream_st* stream) {
  check_sizes("expand_frontiers", m, K);
  expand_frontiers_kernel<<<m, kThreads, 0, stream>>>(images, candidates, frontier, ids, mass, flag,
                                                      K, C, rows, depth);
  TESSERA_CUDA_LAUNCHED("expand_frontiers_kernel");
}

void launch_feed_frontiers(DynamicImage* images, DynamicCandidate* candidates,
                           const int32_t* frontier, int m, int halves, int K, int C, int d,
                           int tree_rows, int prev_rows, int32_t* tokens, int32_t* feature_rows,
                           uint8_t* mask, int stride, CUstream_st* stream) {
  check_sizes("feed_frontiers", m, K);
  feed_frontiers_kernel<<<m, kThreads, 0, stream>>>(images, candidates, frontier, m, halves, K, C,
                                                    d, tree_rows, prev_rows, tokens, feature_rows,
                                                    mask, stride);
  TESSERA_CUDA_LAUNCHED("feed_frontiers_kernel");
}

void launch_best_candidates(DynamicImage* images, const DynamicCandidate* candidates,
                            int32_t* ranks, DynamicCandidate* best, int m, int C, int total,
                            CUstream_st* stream) {
  check_sizes("best_candidates", m, total);
  best_candidates_kernel<<<m, kThreads, 0, stream>>>(images, candidates, ranks, best, C, total);
  TESSERA_CUDA_LAUNCHED("best_candidates_kernel");
}

}  // namespace tessera::speculative
