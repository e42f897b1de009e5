// Rotary embedding, KV-cache writes and attention over a multi-sequence cache, on the CPU.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "common/thread_pool.h"
#include "common/vector_math.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/tree_mask.h"
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

#if defined(__AVX512F__)
// The rows of a draft window share their head's keys and values. Taken one row at a time, every
// row re-read the head's whole key and value block from L2 (about 66 KB at 130 keys and head
// width 64), and a 5-row forward's attention cost twice the one-row's. The group kernels below
// load each key's and value's chunks once for GR rows; per row they run exactly the operations of
// dot_keys and weighted_values, so a row's bits do not depend on the rows beside it.

// Most rows a group kernel takes.
constexpr int kMaxGroup = 4;

// Rows per group for the scores: GR rows x C query chunks stay in registers.
constexpr int score_group(int chunks) {
  return chunks >= 8 ? 1 : std::min(kMaxGroup, 16 / chunks);
}
// Rows per group for the weighted values: 2 x GR x C accumulators (even and odd keys).
constexpr int value_group(int chunks) {
  return chunks >= 7 ? 1 : std::min(kMaxGroup, 12 / chunks);
}

// s[r * ld + i] = q[r] . k_i for GR rows, as dot_keys computes each (the same FMA chain over the
// chunks from zero per key, the same sum16 tree per block of kKeyBlock keys).
template <int CM, int GR>
void dot_keys_group(const float* const* q, const float* k, int64_t n, int head_dim, float* s,
                    int64_t ld) {
  __m512 qv[GR][CM];
  for (int r = 0; r < GR; ++r)
    for (int c = 0; c < CM; ++c) qv[r][c] = _mm512_loadu_ps(q[r] + 16 * c);
  alignas(64) __m512 acc[GR][kKeyBlock];
  for (int64_t s0 = 0; s0 < n; s0 += kKeyBlock) {
    const int64_t g = std::min(kKeyBlock, n - s0);
    for (int64_t i = 0; i < kKeyBlock; ++i) {
      __m512 a[GR];
      for (int r = 0; r < GR; ++r) a[r] = _mm512_setzero_ps();
      if (i < g) {
        const float* kk = k + (s0 + i) * head_dim;
        for (int c = 0; c < CM; ++c) {
          const __m512 kv = _mm512_loadu_ps(kk + 16 * c);
          for (int r = 0; r < GR; ++r) a[r] = _mm512_fmadd_ps(qv[r][c], kv, a[r]);
        }
      }
      for (int r = 0; r < GR; ++r) acc[r][i] = a[r];
    }
    for (int r = 0; r < GR; ++r) sum16(acc[r], s + r * ld + s0);
  }
}

// o[r] = sum_i (p[r][i] * inv[r]) v_i for GR rows over keys 0..n-1, as weighted_values computes
// each: even and odd keys in their own accumulators, added at the end, and a zero weight leaves
// a row's accumulators untouched (a masked FMA where weighted_values skips the key).
template <int CM, int GR>
void weighted_values_group(const float* const* p, const float* inv, const float* v, int64_t n,
                           int head_dim, float* const* o) {
  __m512 even[GR][CM], odd[GR][CM];
  for (int r = 0; r < GR; ++r)
    for (int c = 0; c < CM; ++c) even[r][c] = odd[r][c] = _mm512_setzero_ps();
  auto add_key = [&](int64_t i, __m512(*a)[CM]) {
    __m512 w[GR];
    __mmask16 m[GR];
    for (int r = 0; r < GR; ++r) {
      m[r] = p[r][i] != 0.0f ? 0xffff : 0;
      w[r] = _mm512_set1_ps(p[r][i] * inv[r]);
    }
    const float* vv = v + i * head_dim;
    for (int c = 0; c < CM; ++c) {
      const __m512 x = _mm512_loadu_ps(vv + 16 * c);
      for (int r = 0; r < GR; ++r) a[r][c] = _mm512_mask3_fmadd_ps(w[r], x, a[r][c], m[r]);
    }
  };
  int64_t i = 0;
  for (; i + 1 < n; i += 2) {
    add_key(i, even);
    add_key(i + 1, odd);
  }
  if (i < n) add_key(i, even);
  for (int r = 0; r < GR; ++r)
    for (int c = 0; c < CM; ++c)
      _mm512_storeu_ps(o[r] + 16 * c, _mm512_add_ps(even[r][c], odd[r][c]));
}

// Splits `rows` into groups of at most G (<= kMaxGroup) and calls f(r0, GR) for each, GR the
// group's size as a std::integral_constant.
template <int G, class F>
void for_each_group(int rows, F&& f) {
  static_assert(G >= 1 && G <= kMaxGroup);
  for (int r0 = 0; r0 < rows; r0 += G) {
    const int n = std::min(G, rows - r0);
    if (n >= 4 && G >= 4)
      f(r0, std::integral_constant<int, std::min(4, G)>{});
    else if (n == 3 && G >= 3)
      f(r0, std::integral_constant<int, std::min(3, G)>{});
    else if (n == 2 && G >= 2)
      f(r0, std::integral_constant<int, std::min(2, G)>{});
    else
      f(r0, std::integral_constant<int, 1>{});
  }
}
#endif

// Scores of `rows` query rows against keys 0..n-1: row r's into s + r * ld, each as dot_keys
// gives it alone.
void dot_keys_rows(const float* const* q, int rows, const float* k, int64_t n, int head_dim,
                   float* s, int64_t ld) {
#if defined(__AVX512F__)
  if (avx512_head(head_dim) && head_dim / 16 < 8 && rows > 1) {
    // Head widths of 16..112 (1..7 chunks): the chunk count is a compile-time constant.
    with_chunks(head_dim, [&](auto max_chunks, int = 0) {
      constexpr int CM = std::min(decltype(max_chunks)::value, 7);
      for_each_group<score_group(CM)>(rows, [&](int r0, auto group) {
        dot_keys_group<CM, group()>(q + r0, k, n, head_dim, s + r0 * ld, ld);
      });
    });
    return;
  }
#endif
  for (int r = 0; r < rows; ++r) dot_keys(q[r], k, n, head_dim, s + r * ld);
}

// Weighted values of `rows` rows over keys 0..n-1 (a row's weights past its own keys are zero),
// each as weighted_values gives it alone.
void weighted_values_rows(const float* const* p, const float* inv, int rows, const float* v,
                          int64_t n, int head_dim, float* const* o) {
#if defined(__AVX512F__)
  if (avx512_head(head_dim) && head_dim / 16 < 7 && rows > 1) {
    with_chunks(head_dim, [&](auto max_chunks, int = 0) {
      constexpr int CM = std::min(decltype(max_chunks)::value, 6);
      for_each_group<value_group(CM)>(rows, [&](int r0, auto group) {
        weighted_values_group<CM, group()>(p + r0, inv + r0, v, n, head_dim, o + r0);
      });
    });
    return;
  }
#endif
  for (int r = 0; r < rows; ++r) weighted_values(p[r], inv[r], v, n, head_dim, o[r]);
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
  parallel_for(
      "rope", rows,
      [&](int64_t r) {
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
      },
      rows > 8);
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

void CpuBackend::expand_tree_mask(const Tensor& parents, const Tensor& past, int n_new, int stride,
                                  Tensor& mask) {
  const int64_t n_seq = past.numel();
  check(parents.numel() == n_seq * n_new && mask.numel() == n_seq * n_new * stride,
        "internal: expand_tree_mask shapes");
  const int32_t* par = parents.ptr<int32_t>();
  const int32_t* len = past.ptr<int32_t>();
  uint8_t* m = mask.ptr<uint8_t>();
  for (int64_t r = 0; r < n_seq; ++r)
    for (int j = 0; j < n_new; ++j) {
      uint8_t* row = m + (r * n_new + j) * stride;
      for (int key = 0; key < stride; ++key)
        row[key] = tree_mask_entry(par + r * n_new, len[r], j, key);
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
  const int n_new = b.n_new;
  int64_t macs = 0;  // q.k and p.v over every (row, head): small calls run on this thread
  for (int64_t r = 0; r < n_seq; ++r)
    macs += (static_cast<int64_t>(past[r]) + n_new) * n_new * n_head * head_dim * 2;
  // Work items are (sequence, head, group of rows): a head's rows go together so that its keys
  // and values are read once for all of them; the rows are split further only when there are
  // fewer heads than threads. A row's result does not depend on its group.
  const int64_t heads = n_seq * n_head;
  const int threads = cpu_pool().team();
  const int splits = static_cast<int>(std::clamp<int64_t>((threads + heads - 1) / heads, 1, n_new));
  const int per_split = (n_new + splits - 1) / splits;
  const int64_t total = heads * splits;
  const int64_t ld = (cap + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
  const auto region = [&](int tid, int team) {
    // Per-thread scratch kept across calls: no allocation per layer and token.
    thread_local std::vector<float> scores;
    thread_local std::vector<const float*> qs, ps;
    thread_local std::vector<float*> os;
    thread_local std::vector<float> invs;
    scores.resize(static_cast<size_t>(ld * per_split));
    const IndexRange range = static_range(total, tid, team);
    for (int64_t idx = range.begin; idx < range.end; ++idx) {
      const int64_t part = idx % splits;
      const int64_t h = (idx / splits) % n_head;
      const int64_t r = idx / (splits * n_head);
      const int j0 = static_cast<int>(part) * per_split;
      const int rows = std::min(per_split, n_new - j0);
      if (rows <= 0) continue;
      const int64_t seq = seqs[r];
      const int64_t kvh = h / group;
      const float* kh = kc + (seq * n_kv_head + kvh) * cap * head_dim;
      const float* vh = vc + (seq * n_kv_head + kvh) * cap * head_dim;
      // Keys up to the group's last row's own slot; each row then masks those after its own.
      const int64_t n_all = past[r] + j0 + rows;
      qs.clear();
      for (int j = j0; j < j0 + rows; ++j)
        qs.push_back(src + (r * n_new + j) * width + h * head_dim);
      // scores[s] = q . k_s over this head's contiguous key block (the same instructions for
      // every key, so a score does not depend on the batch, the position or the threads).
      dot_keys_rows(qs.data(), rows, kh, n_all, head_dim, scores.data(), ld);
      ps.clear();
      os.clear();
      invs.clear();
      for (int j = j0; j < j0 + rows; ++j) {
        const int64_t row = r * n_new + j;
        const int64_t own = past[r] + j;  // this query's own cache slot
        const int64_t n_keys = own + 1;
        const uint8_t* mrow = mask ? mask + row * b.mask_stride : nullptr;
        float* sc = scores.data() + (j - j0) * ld;
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
        const int64_t blocks = (n_keys + kKeyBlock - 1) / kKeyBlock;
        for (int64_t s = n_keys; s < blocks * kKeyBlock; ++s) sc[s] = -INFINITY;
        const float mx = block_max(sc, blocks);
        float* o = dst + row * q_dim + h * head_dim;
        for (int e = 0; e < head_dim; ++e) o[e] = 0.0f;
        if (mx == -INFINITY) continue;  // no visible key (cannot happen with the diagonal kept)
        const float denom = exp_block_sum(sc, blocks, mx);
        // Keys after this row's own get weight zero: the group's weighted values run over the
        // last row's keys, and a zero weight is skipped.
        for (int64_t s = n_keys; s < n_all; ++s) sc[s] = 0.0f;
        ps.push_back(sc);
        os.push_back(o);
        invs.push_back(1.0f / denom);
      }
      // o = sum_s p_s v_s over this head's contiguous value block, in key order.
      weighted_values_rows(ps.data(), invs.data(), static_cast<int>(ps.size()), vh, n_all, head_dim,
                           os.data());
    }
  };
  cpu_pool().run("attention", region, total > 1 && macs >= cpu::kParallelMinMacs / 2);
}

}  // namespace tessera
