// A block per image walks its chain or tree with verify_rows_on: the walk is serial (siblings in
// order, each test deciding the next), so every thread of the block follows it, and each of its
// passes over a row of V (a residual, a normalisation, a draw, an argmax) is spread over the
// threads (block_lanes.cuh). One thread per image, as before session 42, made each pass V serial
// steps: at LlamaGen's V = 16384 a rejection's few passes took a good part of a target step.
#include <cuda_runtime.h>

#include <string>

#include "speculative/cuda/block_lanes.cuh"
#include "speculative/cuda/verify_kernels.h"
#include "speculative/drafters/jacobi_carry.h"
#include "tensor/cuda/cuda_check.h"
#include "tessera/error.h"

namespace tessera::speculative {

namespace {

constexpr int kThreads = 64;       // the carry-over draws: a thread per node row
constexpr int kWalkThreads = 256;  // the walk: a block per image
using WalkLanes = BlockLanes<kWalkThreads>;

__global__ void __launch_bounds__(kWalkThreads)
    verify_images_kernel(const float* p, const float* q, const WalkNode* nodes,
                         const RoundImage* images, int width, int vocab, bool greedy,
                         float* scratch, DraftVerdict* verdicts) {
  __shared__ WalkLanes::Shared shared;
  const int i = blockIdx.x;
  const RoundImage im = images[i];
  const int n = im.drafts < 0 ? 0 : (im.drafts > width ? width : im.drafts);
  const DraftVerdict v =
      verify_rows_on(WalkLanes{&shared}, im.rule, p + static_cast<int64_t>(i) * (width + 1) * vocab,
                     q && !im.one_hot ? q + static_cast<int64_t>(i) * width * vocab : nullptr,
                     nodes + static_cast<int64_t>(i) * width, n, im.draft_len, vocab, greedy,
                     im.seed, im.image_index, im.base_token, im.round,
                     scratch + static_cast<int64_t>(i) * verify_scratch(vocab));
  if (threadIdx.x == 0) verdicts[i] = v;
}

// The Jacobi carry-over draws, one thread per (image, node row): each an O(V) scan, independent
// of the walk, so they run in parallel threads of their own rather than serially in the walk's
// (the kernel is queued after the walk on the same stream).
__global__ void jacobi_carry_kernel(const float* p, const RoundImage* images, int n_images,
                                    int width, int vocab, bool greedy, int32_t* carried) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= static_cast<int64_t>(n_images) * width) return;
  const int i = static_cast<int>(k / width), c = static_cast<int>(k % width);
  const RoundImage& im = images[i];
  if (!im.carry || c >= im.drafts) return;
  carried[k] = jacobi_carry_token(p + (static_cast<int64_t>(i) * (width + 1) + c + 1) * vocab,
                                  vocab, greedy, im.seed, im.image_index,
                                  im.base_token + static_cast<uint32_t>(c + 1), im.round);
}

}  // namespace

void launch_verify_images(const float* p, const float* q, const WalkNode* nodes,
                          const RoundImage* images, int n_images, int width, int vocab, bool greedy,
                          float* scratch, DraftVerdict* verdicts, int32_t* carried,
                          CUstream_st* stream) {
  if (vocab < 1 || width < 0 || n_images < 0)
    throw Error("device verification: vocabulary " + std::to_string(vocab) + ", width " +
                std::to_string(width) + ", " + std::to_string(n_images) + " images");
  if (n_images == 0) return;
  verify_images_kernel<<<n_images, kWalkThreads, 0, stream>>>(p, q, nodes, images, width, vocab,
                                                              greedy, scratch, verdicts);
  TESSERA_CUDA_LAUNCHED("verify_images_kernel");
  const int64_t rows = static_cast<int64_t>(n_images) * width;
  if (!carried || rows == 0) return;
  jacobi_carry_kernel<<<static_cast<unsigned>((rows + kThreads - 1) / kThreads), kThreads, 0,
                        stream>>>(p, images, n_images, width, vocab, greedy, carried);
  TESSERA_CUDA_LAUNCHED("jacobi_carry_kernel");
}

}  // namespace tessera::speculative
