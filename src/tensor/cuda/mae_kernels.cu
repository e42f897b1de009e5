// MAE-transformer and diffusion-head kernels on CUDA (MAR): LayerNorm, exact GELU, bidirectional
// self-attention without a cache and the AdaLN element-wise ops; CpuBackend's mae_kernels.cpp is
// the reference for every op's semantics and shape checks.
#include <cmath>
#include <string>

#include "tensor/cuda/block_reduce.cuh"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/image_math.h"
#include "tensor/cuda/image_ops.h"
#include "tessera/error.h"

namespace tessera::cuda {

namespace {

constexpr int kThreads = 256;

void require_same_numel(const Tensor& a, const Tensor& b, const char* what) {
  check(a.numel() == b.numel(), [&] {
    return std::string("internal: ") + what + ": " + shape_str(a.shape) + " vs " +
           shape_str(b.shape);
  });
}

// One block per row; two passes (mean, then centred variance) as the CPU and PyTorch.
__global__ void layer_norm_kernel(const float* x, const float* g, const float* bt, float eps,
                                  int64_t D, float* y) {
  const float* xr = x + blockIdx.x * D;
  float* yr = y + blockIdx.x * D;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) s += xr[i];
  const float mean = block_sum(s) / static_cast<float>(D);
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) ss += (xr[i] - mean) * (xr[i] - mean);
  const float inv = 1.0f / sqrtf(block_sum(ss) / static_cast<float>(D) + eps);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    float v = (xr[i] - mean) * inv;
    if (g) v *= g[i];
    if (bt) v += bt[i];
    yr[i] = v;
  }
}

__global__ void gelu_kernel(float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    x[i] = gelu_erf_value(x[i]);
}

// One block per (batch, head, query row): the N scores live in dynamic shared memory; softmax
// with the row maximum subtracted, then each thread owns output features e, e + blockDim.x, ...
// bias [H, N, N] (null: none) is added to the scaled scores; a key whose key_mask [batch, N]
// entry is 0 weighs 0 (null: every key visible).
__global__ void self_attention_kernel(const float* qkv, int n_head, int head_dim, int64_t N,
                                      float scale, const float* bias, const uint8_t* key_mask,
                                      float* out) {
  extern __shared__ float scores[];
  const int64_t i = blockIdx.x % N, h = (blockIdx.x / N) % n_head, b = blockIdx.x / (N * n_head);
  const int64_t D = static_cast<int64_t>(n_head) * head_dim, width = 3 * D;
  const float* base = qkv + b * N * width;
  const float* q = base + i * width + h * head_dim;
  const float* bias_row = bias ? bias + (h * N + i) * N : nullptr;
  const uint8_t* visible = key_mask ? key_mask + b * N : nullptr;
  float mx = -INFINITY;
  for (int64_t s = threadIdx.x; s < N; s += blockDim.x) {
    if (visible && !visible[s]) continue;
    const float* k = base + s * width + D + h * head_dim;
    float dot = 0.0f;
    for (int e = 0; e < head_dim; ++e) dot += q[e] * k[e];
    scores[s] = dot * scale + (bias_row ? bias_row[s] : 0.0f);
    mx = fmaxf(mx, scores[s]);
  }
  mx = block_max(mx);  // its barriers also publish the scores
  float part = 0.0f;
  for (int64_t s = threadIdx.x; s < N; s += blockDim.x)
    part += (scores[s] = visible && !visible[s] ? 0.0f : expf(scores[s] - mx));
  const float denom = block_sum(part);
  const float inv = denom > 0.0f ? 1.0f / denom : 0.0f;  // every key hidden: zeros
  float* o = out + (b * N + i) * D + h * head_dim;
  for (int e = threadIdx.x; e < head_dim; e += blockDim.x) {
    float acc = 0.0f;
    for (int64_t s = 0; s < N; ++s)
      if (!visible || visible[s])
        acc += scores[s] * inv * base[s * width + 2 * D + h * head_dim + e];
    o[e] = acc;
  }
}

__global__ void modulate_kernel(const float* x, const float* sh, const float* sc, float* y,
                                int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] = x[i] * (1.0f + sc[i]) + sh[i];
}

__global__ void add_gated_kernel(float* h, const float* g, const float* u, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    h[i] += g[i] * u[i];
}

__global__ void add_rows_broadcast_kernel(float* x, const float* t, int64_t block, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    x[i] += t[i % block];
}

}  // namespace

void layer_norm(cudaStream_t s, const Tensor& x, const Tensor* gamma, const Tensor* beta, float eps,
                Tensor& y) {
  require_same_numel(x, y, "layer_norm");
  const int64_t D = x.dim(-1), rows = x.numel() / D;
  check(!gamma || gamma->numel() == D, "internal: layer_norm gamma width");
  check(!beta || beta->numel() == D, "internal: layer_norm beta width");
  if (rows == 0) return;
  layer_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
      x.ptr<float>(), gamma ? gamma->ptr<float>() : nullptr, beta ? beta->ptr<float>() : nullptr,
      eps, D, y.ptr<float>());
  TESSERA_CUDA_LAUNCHED("layer_norm");
}

void gelu_erf(cudaStream_t s, Tensor& x) {
  const int64_t n = x.numel();
  if (n == 0) return;
  gelu_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, s>>>(x.ptr<float>(), n);
  TESSERA_CUDA_LAUNCHED("gelu_erf");
}

void self_attention(cudaStream_t s, const Tensor& qkv, int batch, int n_head, int head_dim,
                    Tensor& out, const SelfAttentionExtras& extras) {
  const int64_t D = static_cast<int64_t>(n_head) * head_dim, width = 3 * D;
  check(qkv.dim(-1) == width, "internal: self_attention qkv width");
  const int64_t N = qkv.numel() / width / batch;
  check(N * batch * width == qkv.numel() && out.numel() == N * batch * D,
        "internal: self_attention shapes");
  check(!extras.bias || extras.bias->numel() == n_head * N * N,
        "internal: self_attention bias shape");
  check(!extras.key_mask || extras.key_mask->numel() == batch * N,
        "internal: self_attention key mask shape");
  const size_t smem = static_cast<size_t>(N) * sizeof(float);
  check(smem <= 48 * 1024, "internal: self_attention: " + std::to_string(N) +
                               " tokens exceed the 48 KiB of scores in shared memory");
  const int64_t blocks = static_cast<int64_t>(batch) * n_head * N;
  if (blocks == 0) return;
  const float scale =
      extras.scale != 0.0f ? extras.scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  self_attention_kernel<<<static_cast<unsigned>(blocks), 128, smem, s>>>(
      qkv.ptr<float>(), n_head, head_dim, N, scale,
      extras.bias ? extras.bias->ptr<float>() : nullptr,
      extras.key_mask ? extras.key_mask->ptr<uint8_t>() : nullptr, out.ptr<float>());
  TESSERA_CUDA_LAUNCHED("self_attention");
}

void modulate(cudaStream_t s, const Tensor& x, const Tensor& shift, const Tensor& scale,
              Tensor& y) {
  require_same_numel(x, shift, "modulate shift");
  require_same_numel(x, scale, "modulate scale");
  require_same_numel(x, y, "modulate output");
  const int64_t n = x.numel();
  if (n == 0) return;
  modulate_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, s>>>(
      x.ptr<float>(), shift.ptr<float>(), scale.ptr<float>(), y.ptr<float>(), n);
  TESSERA_CUDA_LAUNCHED("modulate");
}

void add_gated(cudaStream_t s, Tensor& h, const Tensor& gate, const Tensor& u) {
  require_same_numel(h, gate, "add_gated gate");
  require_same_numel(h, u, "add_gated input");
  const int64_t n = h.numel();
  if (n == 0) return;
  add_gated_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, s>>>(
      h.ptr<float>(), gate.ptr<float>(), u.ptr<float>(), n);
  TESSERA_CUDA_LAUNCHED("add_gated");
}

void add_rows_broadcast(cudaStream_t s, Tensor& x, const Tensor& table) {
  const int64_t block = table.numel();
  check(block > 0 && x.numel() % block == 0,
        "internal: add_rows_broadcast " + shape_str(x.shape) + " vs " + shape_str(table.shape));
  const int64_t n = x.numel();
  if (n == 0) return;
  add_rows_broadcast_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, s>>>(
      x.ptr<float>(), table.ptr<float>(), block, n);
  TESSERA_CUDA_LAUNCHED("add_rows_broadcast");
}

}  // namespace tessera::cuda
