// MAE-transformer and diffusion-head kernels on the CPU (MAR): LayerNorm, exact GELU,
// bidirectional self-attention without a cache, and the AdaLN element-wise ops.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/thread_pool.h"
#include "common/vector_math.h"
#include "tensor/cpu/cpu_backend.h"
#include "tessera/error.h"

namespace tessera {

void CpuBackend::layer_norm(const Tensor& x, const Tensor* gamma, const Tensor* beta, float eps,
                            Tensor& y) {
  cpu::require_same_numel(x, y, "layer_norm");
  const int64_t D = x.dim(-1), rows = x.numel() / D;
  check(!gamma || gamma->numel() == D, "internal: layer_norm gamma width");
  check(!beta || beta->numel() == D, "internal: layer_norm beta width");
  const float* xp = x.ptr<float>();
  const float* g = gamma ? gamma->ptr<float>() : nullptr;
  const float* bt = beta ? beta->ptr<float>() : nullptr;
  float* yp = y.ptr<float>();
  parallel_for(
      "layer_norm", rows,
      [&](int64_t r) {
        const float* xr = xp + r * D;
        float* yr = yp + r * D;
        // Two passes (mean, then centred variance) as PyTorch computes it: no cancellation.
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t i = 0; i < D; ++i) sum += xr[i];
        const float mean = sum / static_cast<float>(D);
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int64_t i = 0; i < D; ++i) ss += (xr[i] - mean) * (xr[i] - mean);
        const float inv = 1.0f / std::sqrt(ss / static_cast<float>(D) + eps);
        for (int64_t i = 0; i < D; ++i) {
          float v = (xr[i] - mean) * inv;
          if (g) v *= g[i];
          if (bt) v += bt[i];
          yr[i] = v;
        }
      },
      rows > 8);
}

namespace {
// GELU with the exact erf, as torch.nn.GELU(): 0.5 x (1 + erf(x / sqrt 2)); SIMD erff from
// libmvec (vector_math.h): MAR-B evaluates 75M of them per guided MAE pass.
[[gnu::noinline]] void gelu_block(const float* x, const float*, float* y) {
#pragma omp simd
  for (int64_t i = 0; i < kSimdBlock; ++i)
    y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118f));
}
}  // namespace

void CpuBackend::gelu_erf(Tensor& x) {
  float* p = x.ptr<float>();
  simd_blocks("gelu_erf", gelu_block, p, nullptr, p, x.numel(), x.numel() > 65536);
}

void CpuBackend::self_attention(const Tensor& qkv, int batch, int n_head, int head_dim, Tensor& out,
                                const SelfAttentionExtras& extras) {
  const int64_t D = static_cast<int64_t>(n_head) * head_dim, width = 3 * D;
  check(qkv.dim(-1) == width, "internal: self_attention qkv width");
  const int64_t N = qkv.numel() / width / batch;
  check(N * batch * width == qkv.numel() && out.numel() == N * batch * D,
        "internal: self_attention shapes");
  check(!extras.bias || extras.bias->numel() == n_head * N * N,
        "internal: self_attention bias shape");
  check(!extras.key_mask || extras.key_mask->numel() == batch * N,
        "internal: self_attention key mask shape");
  const float scale =
      extras.scale != 0.0f ? extras.scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  const float* bias = extras.bias ? extras.bias->ptr<float>() : nullptr;
  const uint8_t* key_mask = extras.key_mask ? extras.key_mask->ptr<uint8_t>() : nullptr;
  const float* src = qkv.ptr<float>();
  float* dst = out.ptr<float>();
  const int64_t total = static_cast<int64_t>(batch) * n_head * N;
  cpu_pool().run("self_attention", [&](int tid, int team) {
    std::vector<float> scores(static_cast<size_t>(N));
    const IndexRange range = static_range(total, tid, team);
    for (int64_t idx = range.begin; idx < range.end; ++idx) {
      const int64_t i = idx % N, h = (idx / N) % n_head, b = idx / (N * n_head);
      const float* base = src + b * N * width;
      const float* q = base + i * width + h * head_dim;
      const float* bias_row = bias ? bias + (h * N + i) * N : nullptr;
      const uint8_t* visible = key_mask ? key_mask + b * N : nullptr;
      float mx = -INFINITY;
      for (int64_t s = 0; s < N; ++s) {
        if (visible && !visible[s]) continue;
        const float* k = base + s * width + D + h * head_dim;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int e = 0; e < head_dim; ++e) dot += q[e] * k[e];
        scores[s] = dot * scale + (bias_row ? bias_row[s] : 0.0f);
        mx = std::max(mx, scores[s]);
      }
      // A hidden key weighs exp(-inf) = 0, as HF's finfo.min added to its score makes it.
      float denom = 0.0f;
      for (int64_t s = 0; s < N; ++s)
        denom += (scores[s] = visible && !visible[s] ? 0.0f : std::exp(scores[s] - mx));
      const float inv = denom > 0.0f ? 1.0f / denom : 0.0f;  // every key hidden: zeros
      float* o = dst + (b * N + i) * D + h * head_dim;
      for (int e = 0; e < head_dim; ++e) o[e] = 0.0f;
      for (int64_t s = 0; s < N; ++s) {
        if (visible && !visible[s]) continue;
        const float p = scores[s] * inv;
        const float* v = base + s * width + 2 * D + h * head_dim;
#pragma omp simd
        for (int e = 0; e < head_dim; ++e) o[e] += p * v[e];
      }
    }
  });
}

void CpuBackend::modulate(const Tensor& x, const Tensor& shift, const Tensor& scale, Tensor& y) {
  cpu::require_same_numel(x, shift, "modulate shift");
  cpu::require_same_numel(x, scale, "modulate scale");
  cpu::require_same_numel(x, y, "modulate output");
  const float* xp = x.ptr<float>();
  const float* sh = shift.ptr<float>();
  const float* sc = scale.ptr<float>();
  float* yp = y.ptr<float>();
  const int64_t n = x.numel();
  parallel_for(
      "modulate", n, [&](int64_t i) { yp[i] = xp[i] * (1.0f + sc[i]) + sh[i]; }, n > 65536);
}

void CpuBackend::add_gated(Tensor& h, const Tensor& gate, const Tensor& u) {
  cpu::require_same_numel(h, gate, "add_gated gate");
  cpu::require_same_numel(h, u, "add_gated input");
  float* hp = h.ptr<float>();
  const float* g = gate.ptr<float>();
  const float* up = u.ptr<float>();
  const int64_t n = h.numel();
  parallel_for(
      "add_gated", n, [&](int64_t i) { hp[i] += g[i] * up[i]; }, n > 65536);
}

void CpuBackend::add_rows_broadcast(Tensor& x, const Tensor& table) {
  const int64_t block = table.numel();
  check(block > 0 && x.numel() % block == 0,
        "internal: add_rows_broadcast " + shape_str(x.shape) + " vs " + shape_str(table.shape));
  float* xp = x.ptr<float>();
  const float* t = table.ptr<float>();
  const int64_t n = x.numel();
  parallel_for(
      "add_rows_broadcast", n, [&](int64_t i) { xp[i] += t[i % block]; }, n > 65536);
}

}  // namespace tessera
