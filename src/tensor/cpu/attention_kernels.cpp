// Rotary embedding, KV-cache writes and attention over a multi-sequence cache, on the CPU.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/vector_math.h"
#include "tessera/error.h"

namespace tessera {

namespace {

// Scores and softmax weights are computed in blocks of this many keys; buffers are padded to
// whole blocks so every key goes through the same instructions (batch invariance).
constexpr int64_t kKeyBlock = 16;

#if defined(__AVX512F__)
// The zero-masked forms: GCC 12 warns that the unmasked ones read an uninitialised register.
#define shuffle_f32x4(a, b, imm) _mm512_maskz_shuffle_f32x4(0xffff, a, b, imm)

// out[i] = sum(v[i]) for 16 registers, in one transposing tree (15 additions for 16 sums): each
// sum adds its own lanes in the same pairs whichever registers share the tree.
inline void sum16(const __m512* v, float* out) {
  __m512 u[8], w[4], x[2];
  for (int p = 0; p < 8; ++p)  // 256-bit halves: u[p] = (halves of v[2p] | of v[2p+1])
    u[p] = _mm512_add_ps(shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int q = 0; q < 4; ++q)  // 128-bit halves: w[q] lane c = v[4q + c]
    w[q] = _mm512_add_ps(shuffle_f32x4(u[2 * q], u[2 * q + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         shuffle_f32x4(u[2 * q], u[2 * q + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  for (int r = 0; r < 2; ++r)  // lanes 0+2 and 1+3 of each 128-bit block
    x[r] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * r], w[2 * r + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(w[2 * r], w[2 * r + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // The two partials: lane 4c + j holds the sum of v[c + 4j].
  const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(x[0], x[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(x[0], x[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  _mm512_storeu_ps(out, _mm512_maskz_permutexvar_ps(0xffff, order, s));
}
#undef shuffle_f32x4

// Heads the AVX-512 paths below take: whole 16-float registers, at most 16 of them.
constexpr bool avx512_head(int head_dim) {
  return head_dim % 16 == 0 && head_dim <= 256;
}
#endif

#if defined(__AVX512F__)
// Calls `f` with the head's number of 16-float chunks as a compile-time constant C (1..8; wider
// heads: C = 16 and the count as a second argument), so that the kernels below keep their
// per-chunk registers in registers (a run-time count put weighted_values' accumulators on the
// stack: a store-to-load round trip per key and chunk).
template <int C = 1, class F>
void with_chunks(int head_dim, F&& f) {
  if constexpr (C <= 8) {
    if (head_dim / 16 == C) return f(std::integral_constant<int, C>{});
    return with_chunks<C + 1>(head_dim, f);
  } else {
    return f(std::integral_constant<int, 16>{}, head_dim / 16);
  }
}
#endif

// s[i] = q . k_i for keys k_0..k_{n-1} (rows of head_dim floats), written for whole blocks of
// kKeyBlock keys (keys past n count as zero). Per key: one FMA chain over the 16-float chunks,
// then a horizontal sum shared by the block's keys; a one-key-at-a-time dot product was latency
// bound on its reduction (attention took ~19% of a 16-position verification forward).
void dot_keys(const float* q, const float* k, int64_t n, int head_dim, float* s) {
#if defined(__AVX512F__)
  if (avx512_head(head_dim)) {
    with_chunks(head_dim, [&](auto max_chunks, int chunks = decltype(max_chunks)::value) {
      constexpr int CM = decltype(max_chunks)::value;
      const int C = chunks;
      __m512 qv[CM];
      for (int c = 0; c < C; ++c) qv[c] = _mm512_loadu_ps(q + 16 * c);
      for (int64_t s0 = 0; s0 < n; s0 += kKeyBlock) {
        __m512 acc[kKeyBlock];
        const int64_t g = std::min(kKeyBlock, n - s0);
        for (int64_t i = 0; i < kKeyBlock; ++i) {
          acc[i] = _mm512_setzero_ps();
          if (i >= g) continue;
          const float* kk = k + (s0 + i) * head_dim;
          for (int c = 0; c < C; ++c)
            acc[i] = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(kk + 16 * c), acc[i]);
        }
        sum16(acc, s + s0);
      }
    });
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) {
    const float* kk = k + i * head_dim;
    float d = 0.0f;
#pragma omp simd reduction(+ : d)
    for (int e = 0; e < head_dim; ++e) d += q[e] * kk[e];
    s[i] = d;
  }
}

// o = sum_i (p[i] * inv) v_i over values v_0..v_{n-1} (rows of head_dim floats) in a fixed order
// per key index, skipping zero weights.
void weighted_values(const float* p, float inv, const float* v, int64_t n, int head_dim, float* o) {
#if defined(__AVX512F__)
  if (avx512_head(head_dim)) {
    // Two accumulator sets, even and odd keys, added at the end: twice the FMA chains in flight
    // (one set was bound by the FMA latency, 4 cycles per key).
    with_chunks(head_dim, [&](auto max_chunks, int chunks = decltype(max_chunks)::value) {
      constexpr int CM = decltype(max_chunks)::value;
      const int C = chunks;
      __m512 even[CM], odd[CM];
      for (int c = 0; c < C; ++c) even[c] = odd[c] = _mm512_setzero_ps();
      auto add_key = [&](int64_t i, __m512* a) {
        if (p[i] == 0.0f) return;
        const __m512 w = _mm512_set1_ps(p[i] * inv);
        const float* vv = v + i * head_dim;
        for (int c = 0; c < C; ++c) a[c] = _mm512_fmadd_ps(w, _mm512_loadu_ps(vv + 16 * c), a[c]);
      };
      int64_t i = 0;
      for (; i + 1 < n; i += 2) {
        add_key(i, even);
        add_key(i + 1, odd);
      }
      if (i < n) add_key(i, even);
      for (int c = 0; c < C; ++c) _mm512_storeu_ps(o + 16 * c, _mm512_add_ps(even[c], odd[c]));
    });
    return;
  }
#endif
  for (int e = 0; e < head_dim; ++e) o[e] = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (p[i] == 0.0f) continue;
    const float w = p[i] * inv;
    const float* vv = v + i * head_dim;
#pragma omp simd
    for (int e = 0; e < head_dim; ++e) o[e] = std::fma(w, vv[e], o[e]);
  }
}

// lane[0] = op over the kKeyBlock lanes, in a fixed pairwise tree.
template <class Op>
float lane_tree(float* lane, Op op) {
  for (int64_t w = kKeyBlock / 2; w >= 1; w /= 2)
    for (int64_t i = 0; i < w; ++i) lane[i] = op(lane[i], lane[i + w]);
  return lane[0];
}

float larger(float a, float b) {
  return a > b ? a : b;
}

// The largest of p over whole blocks of kKeyBlock: a running maximum per lane position, then a
// tree over the lanes (a scalar running maximum was one max-latency chain per key, ~20% of a
// row's attention). The maximum is exact, so the order does not change the result.
float block_max(const float* p, int64_t blocks) {
  alignas(64) float lane[kKeyBlock];
  std::fill(lane, lane + kKeyBlock, -INFINITY);
  for (int64_t b = 0; b < blocks; ++b) {
    const float* v = p + b * kKeyBlock;
#pragma omp simd
    for (int64_t i = 0; i < kKeyBlock; ++i) lane[i] = larger(lane[i], v[i]);
  }
  return lane_tree(lane, larger);
}

// p[i] = exp(p[i] - mx) for whole blocks of kKeyBlock (-inf gives 0), returning their sum: one
// partial sum per lane position across the blocks, then a fixed pairwise tree over the lanes (a
// single running sum was one add-latency chain per key, about a quarter of a row's attention).
float exp_block_sum(float* p, int64_t blocks, float mx) {
  alignas(64) float lane[kKeyBlock] = {};
  for (int64_t b = 0; b < blocks; ++b) {
    float* v = p + b * kKeyBlock;
#pragma omp simd
    for (int64_t i = 0; i < kKeyBlock; ++i) v[i] = expf(v[i] - mx);
#pragma omp simd
    for (int64_t i = 0; i < kKeyBlock; ++i) lane[i] += v[i];
  }
  return lane_tree(lane, [](float a, float b) { return a + b; });
}

}  // namespace

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
          [&] { return "internal: KV sequence " + std::to_string(seqs[r]) + " out of range"; });
    check(past[r] + b.n_new <= cap, [&] {
      return "KV cache full: sequence " + std::to_string(seqs[r]) + " needs " +
             std::to_string(past[r] + b.n_new) + " slots, capacity " + std::to_string(cap);
    });
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
    thread_local std::vector<float> scores;
    scores.resize(static_cast<size_t>((cap + kKeyBlock - 1) / kKeyBlock * kKeyBlock));
    // Items run sequence-major, then head, then new row: a thread's contiguous share covers
    // whole heads, so the rows of a draft window that share a head's keys and values read them
    // from its L2 after the first row (row-major order made both threads stream every head's
    // cache from L3: the k-row forward's attention cost 2-3x the one-row's per row).
#pragma omp for schedule(static)
    for (int64_t idx = 0; idx < total; ++idx) {
      const int64_t j = idx % b.n_new;
      const int64_t h = (idx / b.n_new) % n_head;
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
      const int64_t blocks = (n_keys + kKeyBlock - 1) / kKeyBlock;
      dot_keys(q, kh, n_keys, head_dim, scores.data());
      float* sc = scores.data();
      if (mrow || visible) {
        for (int64_t s = 0; s < n_keys; ++s) {
          bool ok = mrow ? mrow[s] != 0 : true;
          if (ok && visible && s != own) ok = visible[seq * cap + s] != 0;
          sc[s] = ok ? sc[s] * scale : -INFINITY;
        }
      } else {  // causal, every key visible: one vector loop
#pragma omp simd
        for (int64_t s = 0; s < n_keys; ++s) sc[s] *= scale;
      }
      for (int64_t s = n_keys; s < blocks * kKeyBlock; ++s) sc[s] = -INFINITY;
      const float mx = block_max(sc, blocks);
      float* o = dst + row * q_dim + h * head_dim;
      for (int e = 0; e < head_dim; ++e) o[e] = 0.0f;
      if (mx == -INFINITY) continue;  // no visible key (cannot happen with the diagonal kept)
      const float denom = exp_block_sum(scores.data(), blocks, mx);
      // o = sum_s p_s v_s over this head's contiguous value block, in key order.
      const float* vh = vc + (seq * n_kv_head + kvh) * cap * head_dim;
      weighted_values(scores.data(), 1.0f / denom, vh, n_keys, head_dim, o);
    }
  }
}

}  // namespace tessera
