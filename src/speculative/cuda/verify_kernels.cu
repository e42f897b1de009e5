// One thread per image walks its chain with verify_chain: a round verifies a few to a few
// hundred images, each a serial walk over at most L drafts with an O(V) residual at the rejection,
// so a thread per image costs microseconds and keeps the CPU's order of every sum.
#include <cuda_runtime.h>

#include <string>

#include "speculative/cuda/verify_kernels.h"
#include "tensor/cuda/cuda_check.h"
#include "tessera/error.h"

namespace tessera::speculative {

namespace {

constexpr int kThreads = 64;

__global__ void verify_chains_kernel(const float* p, const float* q, const int32_t* tokens,
                                     const ChainRoundImage* images, int n_images, int width,
                                     int vocab, bool greedy, float* scratch,
                                     ChainVerdict* verdicts) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n_images) return;
  const ChainRoundImage im = images[i];
  const int n = im.drafts < 0 ? 0 : (im.drafts > width ? width : im.drafts);
  verdicts[i] = verify_chain(
      im.rule, p + static_cast<int64_t>(i) * (width + 1) * vocab,
      q && !im.one_hot ? q + static_cast<int64_t>(i) * width * vocab : nullptr,
      tokens + static_cast<int64_t>(i) * width, n, im.draft_len, vocab, greedy, im.seed,
      im.image_index, im.base_token, im.round, scratch + static_cast<int64_t>(i) * vocab);
}

}  // namespace

void launch_verify_chains(const float* p, const float* q, const int32_t* tokens,
                          const ChainRoundImage* images, int n_images, int width, int vocab,
                          bool greedy, float* scratch, ChainVerdict* verdicts,
                          CUstream_st* stream) {
  if (vocab < 1 || width < 0 || n_images < 0)
    throw Error("device verification: vocabulary " + std::to_string(vocab) + ", width " +
                std::to_string(width) + ", " + std::to_string(n_images) + " images");
  if (n_images == 0) return;
  const int blocks = (n_images + kThreads - 1) / kThreads;
  verify_chains_kernel<<<blocks, kThreads, 0, stream>>>(p, q, tokens, images, n_images, width,
                                                        vocab, greedy, scratch, verdicts);
  TESSERA_CUDA_LAUNCHED("verify_chains_kernel");
}

}  // namespace tessera::speculative
