// Rotary embedding, KV-cache writes and attention over a multi-sequence cache, on the CPU.
#include <cmath>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tessera/error.h"

namespace tessera {

void CpuBackend::rope(Tensor& x, int n_rot_heads, int head_dim, const Tensor& cos_sin,
                      const Tensor& pos_tensor) {
  const int64_t width = x.dim(-1), rows = x.numel() / width;
  check(pos_tensor.dtype == DType::I32 && pos_tensor.numel() == rows,
        "internal: rope positions vs rows");
  const int32_t* pos = pos_tensor.ptr<int32_t>();
  const int64_t n_pos = cos_sin.dim(0), half = head_dim / 2;
  check(cos_sin.dim(1) == half, "internal: rope table width");
  for (int64_t r = 0; r < rows; ++r)
    check(pos[r] >= 0 && pos[r] < n_pos, "internal: rope position out of table");
  float* xp = x.ptr<float>();
  const float* tab = cos_sin.ptr<float>();
#pragma omp parallel for schedule(static) if (rows > 8)
  for (int64_t r = 0; r < rows; ++r) {
    const float* cs = tab + static_cast<int64_t>(pos[r]) * half * 2;
    for (int h = 0; h < n_rot_heads; ++h) {
      float* v = xp + r * width + static_cast<int64_t>(h) * head_dim;
      for (int64_t p = 0; p < half; ++p) {
        const float c = cs[2 * p], s = cs[2 * p + 1];
        const float a = v[2 * p], b = v[2 * p + 1];
        v[2 * p] = a * c - b * s;
        v[2 * p + 1] = b * c + a * s;
      }
    }
  }
}

void CpuBackend::kv_store(const Tensor& qkv, int n_head, int n_kv_head, int head_dim,
                          const AttentionBatch& b, Tensor& k_cache, Tensor& v_cache) {
  const int64_t kv_dim = static_cast<int64_t>(n_kv_head) * head_dim;
  const int64_t width = qkv.dim(-1), cap = k_cache.dim(2);
  const int64_t q_dim = static_cast<int64_t>(n_head) * head_dim;
  check(k_cache.dim(1) == n_kv_head && k_cache.dim(3) == head_dim && v_cache.shape == k_cache.shape,
        "internal: KV cache layout");
  const float* src = qkv.ptr<float>();
  float* kc = k_cache.ptr<float>();
  float* vc = v_cache.ptr<float>();
  const int32_t* seqs = b.seq.ptr<int32_t>();
  const int32_t* past = b.past.ptr<int32_t>();
  for (int r = 0; r < b.n_seq; ++r) {
    check(seqs[r] >= 0 && seqs[r] < k_cache.dim(0),
          "internal: KV sequence " + std::to_string(seqs[r]) + " out of range");
    check(past[r] + b.n_new <= cap, "KV cache full: sequence " + std::to_string(seqs[r]) +
                                        " needs " + std::to_string(past[r] + b.n_new) +
                                        " slots, capacity " + std::to_string(cap));
    for (int j = 0; j < b.n_new; ++j) {
      const float* row = src + (static_cast<int64_t>(r) * b.n_new + j) * width;
      const int64_t seq = seqs[r], slot = past[r] + j;
      // K and V are stored [seq][kv head][slot][head_dim]: attention for one head then streams
      // two contiguous blocks, and this store is a plain copy.
      for (int64_t h = 0; h < n_kv_head; ++h) {
        const int64_t at = ((seq * n_kv_head + h) * cap + slot) * head_dim;
        const float* k = row + q_dim + h * head_dim;
        std::copy(k, k + head_dim, kc + at);
        std::copy(k + kv_dim, k + kv_dim + head_dim, vc + at);
      }
    }
  }
}

void CpuBackend::attention(const Tensor& qkv, int n_head, int n_kv_head, int head_dim,
                           const AttentionBatch& b, const Tensor& k_cache, const Tensor& v_cache,
                           Tensor& out) {
  const int64_t width = qkv.dim(-1), cap = k_cache.dim(2);
  const int64_t q_dim = static_cast<int64_t>(n_head) * head_dim;
  const int group = n_head / n_kv_head;
  const int64_t n_seq = b.n_seq;
  const int32_t* seqs = b.seq.ptr<int32_t>();
  const int32_t* past = b.past.ptr<int32_t>();
  const uint8_t* mask = b.has_mask() ? b.mask.ptr<uint8_t>() : nullptr;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const float* src = qkv.ptr<float>();
  const float* kc = k_cache.ptr<float>();
  const float* vc = v_cache.ptr<float>();
  const uint8_t* visible = b.key_visible ? b.key_visible->ptr<uint8_t>() : nullptr;
  float* dst = out.ptr<float>();
  const int64_t total = n_seq * b.n_new * n_head;
  int64_t macs = 0;  // q.k and p.v over every (row, head): small calls run on this thread
  for (int64_t r = 0; r < n_seq; ++r)
    macs += (static_cast<int64_t>(past[r]) + b.n_new) * b.n_new * n_head * head_dim * 2;
#pragma omp parallel if (total > 1 && macs >= cpu::kParallelMinMacs / 2)
  {
    // Per-thread scratch kept across calls: no allocation per layer and token.
    thread_local std::vector<float> scores, acc;
    scores.resize(static_cast<size_t>(cap));
    acc.resize(static_cast<size_t>(head_dim));
#pragma omp for schedule(static)
    for (int64_t idx = 0; idx < total; ++idx) {
      const int64_t h = idx % n_head;
      const int64_t j = (idx / n_head) % b.n_new;
      const int64_t r = idx / (n_head * b.n_new);
      const int64_t row = r * b.n_new + j;
      const int64_t seq = seqs[r];
      const int64_t own = past[r] + j;  // this query's own cache slot
      const int64_t n_keys = own + 1;
      const float* q = src + row * width + h * head_dim;
      const int64_t kvh = h / group;
      const uint8_t* mrow = mask ? mask + (r * b.n_new + j) * b.mask_stride : nullptr;
      // scores[s] = q . k_s over this head's contiguous key block (the same instructions for
      // every key, so a score does not depend on the batch, the position or the threads).
      const float* kh = kc + (seq * n_kv_head + kvh) * cap * head_dim;
      for (int64_t s = 0; s < n_keys; ++s) {
        const float* k = kh + s * head_dim;
        float d = 0.0f;
#pragma omp simd reduction(+ : d)
        for (int e = 0; e < head_dim; ++e) d += q[e] * k[e];
        scores[s] = d;
      }
      float mx = -INFINITY;
      for (int64_t s = 0; s < n_keys; ++s) {
        bool ok = mrow ? mrow[s] != 0 : true;
        if (ok && visible && s != own) ok = visible[seq * cap + s] != 0;
        scores[s] = ok ? scores[s] * scale : -INFINITY;
        if (scores[s] > mx) mx = scores[s];
      }
      float* o = dst + row * q_dim + h * head_dim;
      for (int e = 0; e < head_dim; ++e) o[e] = 0.0f;
      if (mx == -INFINITY) continue;  // no visible key (cannot happen with the diagonal kept)
      float denom = 0.0f;
      for (int64_t s = 0; s < n_keys; ++s) {
        const float p = scores[s] == -INFINITY ? 0.0f : std::exp(scores[s] - mx);
        scores[s] = p;
        denom += p;
      }
      const float inv = 1.0f / denom;
      // o = sum_s p_s v_s over this head's contiguous value block, accumulated locally (no
      // aliasing with the output) in key order.
      std::fill(acc.begin(), acc.end(), 0.0f);
      const float* vh = vc + (seq * n_kv_head + kvh) * cap * head_dim;
      for (int64_t s = 0; s < n_keys; ++s) {
        if (scores[s] == 0.0f) continue;
        const float p = scores[s] * inv;
        const float* v = vh + s * head_dim;
#pragma omp simd
        for (int e = 0; e < head_dim; ++e) acc[e] += p * v[e];
      }
      std::copy(acc.begin(), acc.end(), o);
    }
  }
}

}  // namespace tessera
