// Image-decoder convolution-family kernels on CUDA (NCHW, f32): conv2d as im2col + a pedantic
// f32 cuBLAS GEMM per image (a 1x1 unpadded convolution reads the input directly), group_norm
// and nearest 2x upsampling. CpuBackend's conv_kernels.cpp is the reference.
#include <algorithm>
#include <string>

#include "tensor/cuda/block_reduce.cuh"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/image_math.h"
#include "tensor/cuda/image_ops.h"
#include "tessera/error.h"

namespace tessera::cuda {

namespace {

constexpr int kThreads = 256;
// im2col workspace cap: larger batches are convolved in chunks of images.
constexpr int64_t kWorkspaceBytes = int64_t{256} << 20;

// col[b][r][p] for the nb images of x starting at xb (zero where the window is in the padding).
__global__ void im2col_kernel(const float* xb, int64_t C, int64_t H, int64_t W, int64_t kh,
                              int64_t kw, int pad, int64_t Ho, int64_t Wo, int64_t n, float* col) {
  const int64_t hw = Ho * Wo, ckk = C * kh * kw;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t p = t % hw, r = (t / hw) % ckk, b = t / (hw * ckk);
    const int64_t src = im2col_source(r, p, H, W, kh, kw, pad, Wo);
    col[t] = src < 0 ? 0.0f : xb[b * C * H * W + src];
  }
}

// y[b][o][p] = bias[o]: the GEMM then accumulates onto it (beta = 1), as the CPU does.
__global__ void fill_bias_kernel(float* y, const float* bias, int64_t O, int64_t hw, int64_t n) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n;
       t += int64_t{gridDim.x} * blockDim.x)
    y[t] = bias[(t / hw) % O];
}

// One block per (sample, group). Mean and centred variance in double over the f32 inputs, as
// CpuBackend: only the summation order differs, so the statistics agree to ~1e-12 relative and
// the outputs to a few f32 ulps (swish adds expf's ~2 ulp).
__global__ void group_norm_kernel(const float* x, const float* g, const float* be, int64_t C,
                                  int64_t hw, int groups, float eps, bool swish_on, float* y) {
  const int64_t b = blockIdx.x / groups, gi = blockIdx.x % groups, cpg = C / groups;
  const int64_t base = (b * C + gi * cpg) * hw, n = cpg * hw;
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += x[base + i];
  const double mean = block_sum_double(s) / static_cast<double>(n);
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double d = x[base + i] - mean;
    ss += d * d;
  }
  const float inv = group_norm_inv_std(block_sum_double(ss), n, eps);
  const float m = static_cast<float>(mean);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t ch = gi * cpg + i / hw;
    float v = (x[base + i] - m) * inv * g[ch] + be[ch];
    if (swish_on) v = swish(v);
    y[base + i] = v;
  }
}

__global__ void upsample_kernel(const float* x, int64_t H, int64_t W, int64_t n, float* y) {
  const int64_t plane = 4 * H * W;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n;
       t += int64_t{gridDim.x} * blockDim.x)
    y[t] = x[(t / plane) * H * W + upsample2x_source(t % plane, W)];
}

}  // namespace

void conv2d(cudaStream_t s, cublasHandle_t blas, const Tensor& x, const Tensor& w,
            const Tensor& bias, int pad, Tensor& y) {
  const int64_t B = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t O = w.dim(0), kh = w.dim(2), kw = w.dim(3);
  check(w.dim(1) == C && w.dtype == DType::F32,
        "internal: conv2d weight " + shape_str(w.shape) + " for input " + shape_str(x.shape));
  const int64_t Ho = conv_out_size(H, kh, pad), Wo = conv_out_size(W, kw, pad);
  check(y.dim(0) == B && y.dim(1) == O && y.dim(2) == Ho && y.dim(3) == Wo,
        "internal: conv2d output shape " + shape_str(y.shape));
  // Not checked by the CPU, which reads bias[o] blindly; here a short bias would read past it.
  check(bias.numel() == O, "internal: conv2d bias " + shape_str(bias.shape) + " for " +
                               std::to_string(O) + " output channels");
  const int64_t ckk = C * kh * kw, hw = Ho * Wo;
  check(ckk <= INT32_MAX && hw <= INT32_MAX && O <= INT32_MAX,
        "internal: conv2d too large for cuBLAS's int dimensions");
  if (B == 0 || hw == 0 || O == 0) return;
  const int64_t ny = B * O * hw;
  fill_bias_kernel<<<elementwise_blocks(ny, kThreads), kThreads, 0, s>>>(
      y.ptr<float>(), bias.ptr<float>(), O, hw, ny);
  TESSERA_CUDA_LAUNCHED("conv2d bias");

  const bool direct = kh == 1 && kw == 1 && pad == 0;
  const int64_t per_image = ckk * hw * static_cast<int64_t>(sizeof(float));
  const int64_t chunk = direct ? B : std::clamp<int64_t>(kWorkspaceBytes / per_image, 1, B);
  float* col = nullptr;
  if (!direct)
    TESSERA_CUDA_CHECK(
        cudaMallocAsync(reinterpret_cast<void**>(&col), static_cast<size_t>(chunk * per_image), s));
  // Row-major y_b[O, hw] = W[O, ckk] col_b[ckk, hw] is column-major y_b^T = col_b^T W^T: cuBLAS
  // sees col_b as [hw, ckk] (ld hw) and W as [ckk, O] (ld ckk), no transposes; W is shared
  // (stride 0). The pedantic compute type rules out TF32 and reduced-precision reductions.
  const float one = 1.0f;
  try {
    for (int64_t b0 = 0; b0 < B; b0 += chunk) {
      const int64_t nb = std::min(chunk, B - b0);
      const float* xb = x.ptr<float>() + b0 * C * H * W;
      const float* rhs = xb;
      if (!direct) {
        const int64_t n = nb * ckk * hw;
        im2col_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, s>>>(xb, C, H, W, kh, kw, pad,
                                                                           Ho, Wo, n, col);
        TESSERA_CUDA_LAUNCHED("conv2d im2col");
        rhs = col;
      }
      TESSERA_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
          blas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(hw), static_cast<int>(O),
          static_cast<int>(ckk), &one, rhs, CUDA_R_32F, static_cast<int>(hw), ckk * hw,
          w.ptr<float>(), CUDA_R_32F, static_cast<int>(ckk), 0, &one, y.ptr<float>() + b0 * O * hw,
          CUDA_R_32F, static_cast<int>(hw), O * hw, static_cast<int>(nb),
          CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
    }
  } catch (...) {
    if (col) cudaFreeAsync(col, s);
    throw;
  }
  if (col) TESSERA_CUDA_CHECK(cudaFreeAsync(col, s));
}

void group_norm(cudaStream_t s, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                int groups, float eps, bool swish, Tensor& y) {
  const int64_t B = x.dim(0), C = x.dim(1), hw = x.numel() / (B * C);
  check(C % groups == 0, "group_norm: " + std::to_string(C) + " channels not divisible by " +
                             std::to_string(groups) + " groups");
  const int64_t blocks = B * groups;
  if (blocks == 0 || hw == 0) return;
  group_norm_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
      x.ptr<float>(), gamma.ptr<float>(), beta.ptr<float>(), C, hw, groups, eps, swish,
      y.ptr<float>());
  TESSERA_CUDA_LAUNCHED("group_norm");
}

void upsample_nearest2x(cudaStream_t s, const Tensor& x, Tensor& y) {
  const int64_t BC = x.dim(0) * x.dim(1), H = x.dim(2), W = x.dim(3);
  // The CPU writes y blindly; a wrong shape here would write past it.
  check(y.numel() == 4 * BC * H * W && y.dim(2) == 2 * H && y.dim(3) == 2 * W,
        "internal: upsample_nearest2x output " + shape_str(y.shape) + " for input " +
            shape_str(x.shape));
  const int64_t n = y.numel();
  if (n == 0) return;
  upsample_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, s>>>(x.ptr<float>(), H, W, n,
                                                                       y.ptr<float>());
  TESSERA_CUDA_LAUNCHED("upsample_nearest2x");
}

}  // namespace tessera::cuda
