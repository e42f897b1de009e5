// One block: the round's flag or-ed into the burst's (once set, nothing is committed), the images'
// commits (a thread each; a commit past the image's end sets nothing and is left to the host's
// checks of the record), each followed by its Jacobi window's refill when the burst has windows,
// a barrier, then the fields of the images that committed (a thread each,
// in strides: each word has one field, so no two threads write one). A burst's round has a few
// images and a few hundred fields: one block is enough.
#include <cuda_runtime.h>

#include <string>

#include "speculative/cuda/chain_commit_kernels.h"
#include "tensor/cuda/cuda_check.h"
#include "tessera/error.h"

namespace tessera::speculative {

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    commit_chain_round_kernel(const DraftVerdict* verdicts, const WalkNode* nodes, int m, int width,
                              int32_t* state, int32_t* history, int n_tokens, int32_t* committed,
                              const RoundField* fields, int n_fields, const int32_t* round_flag,
                              int32_t* burst_flag, const int32_t* carried,
                              WindowImage* window_images, int32_t* window_words, int vocab) {
  __shared__ int32_t flag;
  if (threadIdx.x == 0) flag = *burst_flag |= *round_flag;
  __syncthreads();
  for (int j = threadIdx.x; j < m; j += blockDim.x) {
    const DraftVerdict v = verdicts[j];
    int32_t n = state[j];
    if (flag || v.accepted < 0 || v.accepted > width || n + v.accepted + 1 > n_tokens) {
      committed[j] = 0;  // the host sees no token (the flag, or its check of the record)
      continue;
    }
    committed[j] = commit_chain_image(v, nodes + static_cast<size_t>(j) * width,
                                      history + static_cast<size_t>(j) * n_tokens, n);
    state[j] = n;
    if (window_images && window_images[j].depth <= width)
      refill_jacobi_window(v, carried + static_cast<size_t>(j) * width, window_images[j], n, vocab,
                           window_words + static_cast<size_t>(j) * width * kWindowWords);
  }
  __syncthreads();
  for (int k = threadIdx.x; k < n_fields; k += blockDim.x) {
    const RoundField f = fields[k];
    if (f.image < 0 || f.image >= m || committed[f.image] == 0) continue;  // nothing committed
    if (f.kind == RoundField::kWindow &&
        (!window_words || f.add < 0 || f.add >= m * width * kWindowWords))
      continue;  // no such word (the host lists none)
    apply_round_field(f, committed[f.image], history + static_cast<size_t>(f.image) * n_tokens,
                      state[f.image], window_words);
  }
}

}  // namespace

void launch_commit_chain_round(const DraftVerdict* verdicts, const WalkNode* nodes, int m,
                               int width, int32_t* state, int32_t* history, int n_tokens,
                               int32_t* committed, const RoundField* fields, int n_fields,
                               const int32_t* round_flag, int32_t* burst_flag,
                               const int32_t* carried, WindowImage* window_images,
                               int32_t* window_words, int vocab, CUstream_st* stream) {
  if (m < 0 || width < 1 || n_fields < 0)
    throw Error("device commit: " + std::to_string(m) + " images, width " + std::to_string(width) +
                ", " + std::to_string(n_fields) + " fields");
  if (m == 0) return;
  commit_chain_round_kernel<<<1, kThreads, 0, stream>>>(
      verdicts, nodes, m, width, state, history, n_tokens, committed, fields, n_fields, round_flag,
      burst_flag, carried, window_images, window_words, vocab);
  TESSERA_CUDA_LAUNCHED("commit_chain_round_kernel");
}

}  // namespace tessera::speculative
