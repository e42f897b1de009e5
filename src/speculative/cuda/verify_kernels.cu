// One thread per image walks its chain or tree with verify_rows: a round verifies a few to a few
// hundred images, each a serial walk over its drafts with an O(V) residual at each rejection, so
// a thread per image costs microseconds and keeps the CPU's order of every sum.
#include <cuda_runtime.h>

#include <string>

#include "speculative/cuda/verify_kernels.h"
#include "tensor/cuda/cuda_check.h"
#include "tessera/error.h"

namespace tessera::speculative {

namespace {

constexpr int kThreads = 64;

__global__ void verify_images_kernel(const float* p, const float* q, const WalkNode* nodes,
                                     const RoundImage* images, int n_images, int width, int vocab,
                                     bool greedy, float* scratch, DraftVerdict* verdicts) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n_images) return;
  const RoundImage im = images[i];
  const int n = im.drafts < 0 ? 0 : (im.drafts > width ? width : im.drafts);
  verdicts[i] =
      verify_rows(im.rule, p + static_cast<int64_t>(i) * (width + 1) * vocab,
                  q && !im.one_hot ? q + static_cast<int64_t>(i) * width * vocab : nullptr,
                  nodes + static_cast<int64_t>(i) * width, n, im.draft_len, vocab, greedy, im.seed,
                  im.image_index, im.base_token, im.round,
                  scratch + static_cast<int64_t>(i) * verify_scratch(vocab));
}

}  // namespace

void launch_verify_images(const float* p, const float* q, const WalkNode* nodes,
                          const RoundImage* images, int n_images, int width, int vocab, bool greedy,
                          float* scratch, DraftVerdict* verdicts, CUstream_st* stream) {
  if (vocab < 1 || width < 0 || n_images < 0)
    throw Error("device verification: vocabulary " + std::to_string(vocab) + ", width " +
                std::to_string(width) + ", " + std::to_string(n_images) + " images");
  if (n_images == 0) return;
  const int blocks = (n_images + kThreads - 1) / kThreads;
  verify_images_kernel<<<blocks, kThreads, 0, stream>>>(p, q, nodes, images, n_images, width, vocab,
                                                        greedy, scratch, verdicts);
  TESSERA_CUDA_LAUNCHED("verify_images_kernel");
}

}  // namespace tessera::speculative
