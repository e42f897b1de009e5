// Row-wise and matrix ops of the image decoders on CUDA (f32): batched matmul through cuBLAS with
// the pedantic f32 compute type (no TF32, so results stay within f32 rounding of the CPU),
// softmax and L2 normalisation of rows, and a transpose of the last two dimensions.
#include <cmath>
#include <string>

#include "tensor/cuda/block_reduce.cuh"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/image_ops.h"
#include "tessera/error.h"

namespace tessera::cuda {

namespace {

constexpr int kThreads = 256;

// One block per row; the row maximum is subtracted before exp, as the CPU.
__global__ void softmax_rows_kernel(float* x, int64_t n) {
  float* v = x + blockIdx.x * n;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) mx = fmaxf(mx, v[i]);
  mx = block_max(mx);
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += (v[i] = expf(v[i] - mx));
  const float total = block_sum(s);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) v[i] /= total;
}

// F.normalize: x / max(||x||, eps).
__global__ void l2_normalize_rows_kernel(float* x, int64_t n, float eps) {
  float* v = x + blockIdx.x * n;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += v[i] * v[i];
  const float norm = fmaxf(sqrtf(block_sum(ss)), eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) v[i] /= norm;
}

// One thread per output element t = (b*N + n)*M + m.
__global__ void transpose_last2_kernel(const float* x, int64_t M, int64_t N, int64_t total,
                                       float* y) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t m = t % M, n = (t / M) % N, b = t / (M * N);
    y[t] = x[(b * M + m) * N + n];
  }
}

}  // namespace

void batched_matmul(cudaStream_t, cublasHandle_t blas, const Tensor& a, bool trans_a,
                    const Tensor& b, bool trans_b, float alpha, Tensor& c) {
  const int64_t batch = a.dim(0);
  const int64_t M = trans_a ? a.dim(2) : a.dim(1), K = trans_a ? a.dim(1) : a.dim(2);
  const int64_t N = trans_b ? b.dim(1) : b.dim(2);
  check((trans_b ? b.dim(2) : b.dim(1)) == K && c.dim(1) == M && c.dim(2) == N,
        "internal: batched_matmul shapes");
  // The CPU loops over a's batch and trusts b and c to match; here cuBLAS would read past them.
  check(b.dim(0) == batch && c.dim(0) == batch, "internal: batched_matmul batch sizes");
  check(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX && batch <= INT32_MAX,
        "internal: batched_matmul too large for cuBLAS's int dimensions");
  if (batch == 0 || M == 0 || N == 0) return;
  // Row-major C[M, N] = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS sees row-major
  // b as its first operand with ld b.dim(2) and the same transpose flag, likewise a. The handle
  // is bound to the stream by the caller; its pointer mode must be host (alpha, beta here).
  const float beta = 0.0f;
  TESSERA_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), &alpha, b.ptr<float>(),
      CUDA_R_32F, static_cast<int>(b.dim(2)), b.dim(1) * b.dim(2), a.ptr<float>(), CUDA_R_32F,
      static_cast<int>(a.dim(2)), a.dim(1) * a.dim(2), &beta, c.ptr<float>(), CUDA_R_32F,
      static_cast<int>(N), M * N, static_cast<int>(batch), CUBLAS_COMPUTE_32F_PEDANTIC,
      CUBLAS_GEMM_DEFAULT));
}

void softmax_rows(cudaStream_t s, Tensor& x) {
  const int64_t n = x.dim(-1), rows = n == 0 ? 0 : x.numel() / n;
  if (rows == 0) return;
  softmax_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x.ptr<float>(), n);
  TESSERA_CUDA_LAUNCHED("softmax_rows");
}

void l2_normalize_rows(cudaStream_t s, Tensor& x, float eps) {
  const int64_t n = x.dim(-1), rows = n == 0 ? 0 : x.numel() / n;
  if (rows == 0) return;
  l2_normalize_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x.ptr<float>(), n, eps);
  TESSERA_CUDA_LAUNCHED("l2_normalize_rows");
}

void transpose_last2(cudaStream_t s, const Tensor& x, Tensor& y) {
  const int64_t M = x.dim(-2), N = x.dim(-1), total = x.numel();
  // The CPU writes y blindly; a smaller y here would be written past.
  check(y.numel() == total,
        "internal: transpose_last2 " + shape_str(x.shape) + " into " + shape_str(y.shape));
  if (total == 0) return;
  transpose_last2_kernel<<<elementwise_blocks(total, kThreads), kThreads, 0, s>>>(
      x.ptr<float>(), M, N, total, y.ptr<float>());
  TESSERA_CUDA_LAUNCHED("transpose_last2");
}

}  // namespace tessera::cuda
