// One thread per element of the n x d chain states: a step is a few hundred to a few thousand
// elements (MAR-B: 16 tokens of 16 channels per image and step), each a dozen flops and one
// Philox block, so a single small launch replaces the host round trip of the step.
#include <cuda_runtime.h>

#include <string>

#include "sampling/cuda/diffusion_kernels.h"
#include "tensor/cuda/cuda_check.h"
#include "tessera/error.h"

namespace tessera {

namespace {

constexpr int kThreads = 128;

__global__ void diffusion_step_kernel(const float* out, int n, int d, DiffusionStep step,
                                      const DiffusionRowNoise* rows, float* x, float* mean,
                                      float* log_var, double* sum_log_std, float* x_in) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= static_cast<int64_t>(n) * d) return;
  diffusion_step_element(out, n, d, step, rows, e, x, mean, log_var, sum_log_std, x_in);
}

}  // namespace

void launch_diffusion_step(const float* out, int n, int d, const DiffusionStep& step,
                           const DiffusionRowNoise* rows, float* x, float* mean, float* log_var,
                           double* sum_log_std, float* x_in, CUstream_st* stream) {
  if (n < 0 || d < 1)
    throw Error("device diffusion step: " + std::to_string(n) + " rows of " + std::to_string(d));
  const int64_t elements = static_cast<int64_t>(n) * d;
  if (elements == 0) return;
  const int64_t blocks = (elements + kThreads - 1) / kThreads;
  diffusion_step_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      out, n, d, step, rows, x, mean, log_var, sum_log_std, x_in);
  TESSERA_CUDA_LAUNCHED("diffusion_step_kernel");
}

}  // namespace tessera
