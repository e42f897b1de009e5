// Classifier ops on CUDA (NCHW, f32): ReLU and the floor-mode 2x2 max and average pools, with
// the window index math and reductions shared with their CPU twins (image_math.h).
#include <string>

#include "tensor/cuda/block_reduce.cuh"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/image_math.h"
#include "tensor/cuda/image_ops.h"
#include "tessera/error.h"

namespace tessera::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void relu_kernel(float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

// One thread per output; `is_max` picks max4 over avg4.
__global__ void pool2x2_kernel(const float* x, int64_t H, int64_t W, int64_t n, bool is_max,
                               float* y) {
  const int64_t plane = (H / 2) * (W / 2);
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n;
       t += int64_t{gridDim.x} * blockDim.x) {
    const float* r0 = x + (t / plane) * H * W + pool2x2_window(t % plane, W);
    y[t] = is_max ? max4(r0[0], r0[1], r0[W], r0[W + 1]) : avg4(r0[0], r0[1], r0[W], r0[W + 1]);
  }
}

void pool2x2(cudaStream_t s, const Tensor& x, Tensor& y, const char* op, bool is_max) {
  const int64_t B = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t Ho = H / 2, Wo = W / 2;
  check(y.ndim() == 4 && y.dim(0) == B && y.dim(1) == C && y.dim(2) == Ho && y.dim(3) == Wo,
        std::string("internal: ") + op + " output " + shape_str(y.shape) + " for input " +
            shape_str(x.shape));
  const int64_t n = y.numel();
  if (n == 0) return;
  pool2x2_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, s>>>(x.ptr<float>(), H, W, n,
                                                                      is_max, y.ptr<float>());
  TESSERA_CUDA_LAUNCHED(op);
}

}  // namespace

void relu(cudaStream_t s, Tensor& x) {
  const int64_t n = x.numel();
  if (n == 0) return;
  relu_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, s>>>(x.ptr<float>(), n);
  TESSERA_CUDA_LAUNCHED("relu");
}

void max_pool2x2(cudaStream_t s, const Tensor& x, Tensor& y) {
  pool2x2(s, x, y, "max_pool2x2", true);
}

void avg_pool2x2(cudaStream_t s, const Tensor& x, Tensor& y) {
  pool2x2(s, x, y, "avg_pool2x2", false);
}

}  // namespace tessera::cuda
