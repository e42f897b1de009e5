// rope, kv_store and attention over the KV cache on the device. Semantics as
// src/tensor/cpu/attention_kernels.cpp: query j of batch sequence r sits at cache slot
// past[r] + j and sees slots 0..own (causal), narrowed by the optional U8 mask row and by
// key_visible (a hidden key is still seen by its own query). Attention is split over keys in
// slices of kSliceKeys (flash-decoding): pass 1 gives each (row, head, slice) its softmax
// partial (max, sum, weighted values), pass 2 merges the slices in slice order
// (device_math.h's softmax_merge), so a row's result depends on its keys only, never on the
// batch. Seq ids and lengths live on the device: bad ones raise the device flag.
#include <cmath>
#include <cstdint>
#include <string>

#include "tensor/cuda/cuda_backend_impl.h"
#include "tensor/cuda/device_flags.h"
#include "tensor/cuda/device_math.h"
#include "tensor/tree_mask.h"
#include "tessera/error.h"

namespace tessera::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kSliceKeys = 256;

__global__ void rope_kernel(float* x, int64_t rows, int64_t width, int n_rot_heads, int head_dim,
                            const float* table, int64_t n_pos, const int32_t* pos, int* flag) {
  const int64_t half = head_dim / 2;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * n_rot_heads * half) return;
  const int64_t r = i / (n_rot_heads * half), h = (i / half) % n_rot_heads, p = i % half;
  const int32_t at = pos[r];
  if (at < 0 || at >= n_pos) {
    raise_flag(flag, kFlagRopePosition, at);
    return;
  }
  const float* cs = table + static_cast<int64_t>(at) * half * 2;
  float* v = x + r * width + h * head_dim;
  rope_pair(v[2 * p], v[2 * p + 1], cs[2 * p], cs[2 * p + 1]);
}

// Block (row, kv head), threads over head_dim: copies the row's k and v into the caches.
__global__ void kv_store_kernel(const float* qkv, int64_t width, int64_t q_dim, int64_t kv_dim,
                                int n_kv_head, int head_dim, int n_new, const int32_t* seqs,
                                const int32_t* past, int64_t n_seq_cache, int64_t cap, float* kc,
                                float* vc, int* flag) {
  const int64_t row = blockIdx.x;
  const int h = blockIdx.y;
  const int64_t r = row / n_new, j = row % n_new;
  const int32_t seq = seqs[r];
  if (seq < 0 || seq >= n_seq_cache) {
    if (threadIdx.x == 0) raise_flag(flag, kFlagKvSequence, seq);
    return;
  }
  if (past[r] + n_new > cap) {
    if (threadIdx.x == 0) raise_flag(flag, kFlagKvFull, past[r] + n_new);
    return;
  }
  const int64_t at = ((static_cast<int64_t>(seq) * n_kv_head + h) * cap + past[r] + j) * head_dim;
  const float* k = qkv + row * width + q_dim + static_cast<int64_t>(h) * head_dim;
  for (int e = threadIdx.x; e < head_dim; e += blockDim.x) {
    kc[at + e] = k[e];
    vc[at + e] = k[kv_dim + e];
  }
}

struct AttentionArgs {
  const float* qkv;
  int64_t width, q_dim;
  int n_head, n_kv_head, head_dim, n_new;
  const int32_t* seqs;
  const int32_t* past;
  const uint8_t* mask;  // null: causal
  int64_t mask_stride;
  const uint8_t* visible;  // null: every key visible
  const float* kc;
  const float* vc;
  int64_t n_seq_cache, cap;
  float scale;
  int n_slices;
  float* part;  // [row * n_head + h][slice][head_dim + 2]: weighted values, max, sum
  int* flag;
};

__device__ inline float block_reduce(float v, float* red, bool is_max) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) {
      const float o = red[threadIdx.x + s];
      red[threadIdx.x] = is_max ? fmaxf(red[threadIdx.x], o) : red[threadIdx.x] + o;
    }
    __syncthreads();
  }
  const float out = red[0];
  __syncthreads();  // red is reused by the next reduction
  return out;
}

// Block (row * n_head + h, slice): the softmax partial of this slice of the row's keys.
__global__ void attention_partial_kernel(AttentionArgs a) {
  extern __shared__ float sh[];  // q [head_dim], scores [kSliceKeys], reduction [kThreads]
  float* q = sh;
  float* sc = sh + a.head_dim;
  float* red = sc + kSliceKeys;
  const int64_t rh = blockIdx.x, row = rh / a.n_head;
  const int h = static_cast<int>(rh % a.n_head);
  const int64_t r = row / a.n_new, j = row % a.n_new;
  float* out = a.part + (rh * a.n_slices + blockIdx.y) * (a.head_dim + 2);
  const int32_t seq = a.seqs[r];
  const int64_t own = a.past[r] + j, n_keys = own + 1;
  const int64_t s0 = static_cast<int64_t>(blockIdx.y) * kSliceKeys;
  const int64_t s1 = n_keys < s0 + kSliceKeys ? n_keys : s0 + kSliceKeys;
  const bool bad_seq = seq < 0 || seq >= a.n_seq_cache, full = own >= a.cap;
  if (bad_seq || full || s0 >= s1) {  // nothing to see here: an empty partial
    if (threadIdx.x == 0) {
      if (bad_seq)
        raise_flag(a.flag, kFlagKvSequence, seq);
      else if (full)
        raise_flag(a.flag, kFlagKvFull, static_cast<int>(n_keys));
      out[a.head_dim] = -INFINITY;
      out[a.head_dim + 1] = 0.0f;
    }
    for (int e = threadIdx.x; e < a.head_dim; e += blockDim.x) out[e] = 0.0f;
    return;
  }
  const float* qrow = a.qkv + row * a.width + static_cast<int64_t>(h) * a.head_dim;
  for (int e = threadIdx.x; e < a.head_dim; e += blockDim.x) q[e] = qrow[e];
  __syncthreads();
  const int kvh = h / (a.n_head / a.n_kv_head);
  const int64_t base = (static_cast<int64_t>(seq) * a.n_kv_head + kvh) * a.cap * a.head_dim;
  const uint8_t* mrow = a.mask ? a.mask + row * a.mask_stride : nullptr;
  const uint8_t* vis = a.visible ? a.visible + static_cast<int64_t>(seq) * a.cap : nullptr;
  float mx = -INFINITY;
  for (int64_t s = s0 + threadIdx.x; s < s1; s += blockDim.x) {
    bool ok = mrow ? mrow[s] != 0 : true;
    if (ok && vis && s != own) ok = vis[s] != 0;
    float d = 0.0f;
    if (ok) {
      const float* k = a.kc + base + s * a.head_dim;
      for (int e = 0; e < a.head_dim; ++e) d = fmaf(q[e], k[e], d);
    }
    sc[s - s0] = ok ? d * a.scale : -INFINITY;
    mx = fmaxf(mx, sc[s - s0]);
  }
  const float m = block_reduce(mx, red, true);
  float l = 0.0f;
  for (int64_t s = s0 + threadIdx.x; s < s1; s += blockDim.x) {
    const float p = m == -INFINITY ? 0.0f : expf(sc[s - s0] - m);
    sc[s - s0] = p;
    l += p;
  }
  l = block_reduce(l, red, false);  // its barriers also publish sc
  for (int e = threadIdx.x; e < a.head_dim; e += blockDim.x) {
    float acc = 0.0f;
    for (int64_t s = s0; s < s1; ++s)  // key order
      if (sc[s - s0] != 0.0f) acc = fmaf(sc[s - s0], a.vc[base + s * a.head_dim + e], acc);
    out[e] = acc;
  }
  if (threadIdx.x == 0) {
    out[a.head_dim] = m;
    out[a.head_dim + 1] = l;
  }
}

// Block row * n_head + h, threads over head_dim: merges the slices in order, then normalises.
__global__ void attention_combine_kernel(const float* part, int n_slices, int n_head, int head_dim,
                                         float* out) {
  const int64_t rh = blockIdx.x, row = rh / n_head;
  const int h = static_cast<int>(rh % n_head);
  float* o =
      out + row * static_cast<int64_t>(n_head) * head_dim + static_cast<int64_t>(h) * head_dim;
  for (int e = threadIdx.x; e < head_dim; e += blockDim.x) {
    SoftmaxPartial run{-INFINITY, 0.0f};
    float acc = 0.0f;
    for (int sl = 0; sl < n_slices; ++sl) {
      const float* p = part + (rh * n_slices + sl) * (head_dim + 2);
      const SoftmaxMerge mg = softmax_merge(run, {p[head_dim], p[head_dim + 1]});
      acc = acc * mg.scale_a + p[e] * mg.scale_b;
      run = mg.r;
    }
    o[e] = run.l > 0.0f ? acc / run.l : 0.0f;  // no visible key: zeros, as the CPU
  }
}

// One thread per mask byte (tree_mask.h's entry, the CPU backend's definition).
__global__ void tree_mask_kernel(const int32_t* parents, const int32_t* past, int64_t n_seq,
                                 int n_new, int stride, uint8_t* mask) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n_seq * n_new * stride) return;
  const int64_t row = i / stride, r = row / n_new;
  const int j = static_cast<int>(row % n_new), key = static_cast<int>(i % stride);
  mask[i] = tree_mask_entry(parents + r * n_new, past[r], j, key);
}

}  // namespace

void CudaBackend::expand_tree_mask(const Tensor& parents, const Tensor& past, int n_new, int stride,
                                   Tensor& mask) {
  const int64_t n_seq = past.numel(), n = n_seq * n_new * stride;
  check(parents.numel() == n_seq * n_new && mask.numel() == n, "internal: expand_tree_mask shapes");
  if (n == 0) return;
  tree_mask_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream_>>>(
      parents.ptr<int32_t>(), past.ptr<int32_t>(), n_seq, n_new, stride, mask.ptr<uint8_t>());
  TESSERA_CUDA_LAUNCHED("tree_mask");
}

void CudaBackend::rope(Tensor& x, int n_rot_heads, int head_dim, const Tensor& cos_sin,
                       const Tensor& pos) {
  const int64_t width = x.dim(-1), rows = x.numel() / width;
  check(pos.dtype == DType::I32 && pos.numel() == rows, "internal: rope positions vs rows");
  const int64_t n_pos = cos_sin.dim(0), half = head_dim / 2;
  check(cos_sin.dim(1) == half, "internal: rope table width");
  check(static_cast<int64_t>(n_rot_heads) * head_dim <= width, "internal: rope heads vs row width");
  const int64_t n = rows * n_rot_heads * half;
  if (n == 0) return;
  rope_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream_>>>(
      x.ptr<float>(), rows, width, n_rot_heads, head_dim, cos_sin.ptr<float>(), n_pos,
      pos.ptr<int32_t>(), error_flag_);
  TESSERA_CUDA_LAUNCHED("rope");
}

void CudaBackend::kv_store(const Tensor& qkv, int n_head, int n_kv_head, int head_dim,
                           const AttentionBatch& b, Tensor& k_cache, Tensor& v_cache) {
  check(k_cache.dim(1) == n_kv_head && k_cache.dim(3) == head_dim && v_cache.shape == k_cache.shape,
        "internal: KV cache layout");
  const int64_t kv_dim = static_cast<int64_t>(n_kv_head) * head_dim;
  const int64_t q_dim = static_cast<int64_t>(n_head) * head_dim;
  const int64_t width = qkv.dim(-1);
  check(width >= q_dim + 2 * kv_dim && qkv.numel() >= int64_t{b.n_seq} * b.n_new * width,
        "internal: kv_store qkv shape");
  if (b.n_seq == 0 || b.n_new == 0 || n_kv_head == 0) return;
  const dim3 grid(static_cast<unsigned>(int64_t{b.n_seq} * b.n_new),
                  static_cast<unsigned>(n_kv_head));
  kv_store_kernel<<<grid, 64, 0, stream_>>>(
      qkv.ptr<float>(), width, q_dim, kv_dim, n_kv_head, head_dim, b.n_new, b.seq.ptr<int32_t>(),
      b.past.ptr<int32_t>(), k_cache.dim(0), k_cache.dim(2), k_cache.ptr<float>(),
      v_cache.ptr<float>(), error_flag_);
  TESSERA_CUDA_LAUNCHED("kv_store");
}

void CudaBackend::attention(const Tensor& qkv, int n_head, int n_kv_head, int head_dim,
                            const AttentionBatch& b, const Tensor& k_cache, const Tensor& v_cache,
                            Tensor& out) {
  check(n_kv_head > 0 && n_head % n_kv_head == 0, "internal: attention heads vs KV heads");
  check(k_cache.dim(1) == n_kv_head && k_cache.dim(3) == head_dim && v_cache.shape == k_cache.shape,
        "internal: KV cache layout");
  const int64_t q_dim = static_cast<int64_t>(n_head) * head_dim;
  const int64_t rows = int64_t{b.n_seq} * b.n_new, cap = k_cache.dim(2);
  check(out.numel() == rows * q_dim, "internal: attention output shape");
  if (rows == 0 || n_head == 0) return;
  // The lengths are on the device: slices cover the whole capacity, and the slices past a
  // row's keys return at once.
  const int n_slices = static_cast<int>((cap + kSliceKeys - 1) / kSliceKeys);
  Tensor part = empty(DType::F32, {rows * n_head * n_slices * (head_dim + 2)});
  AttentionArgs a{};
  a.qkv = qkv.ptr<float>();
  a.width = qkv.dim(-1);
  a.q_dim = q_dim;
  a.n_head = n_head;
  a.n_kv_head = n_kv_head;
  a.head_dim = head_dim;
  a.n_new = b.n_new;
  a.seqs = b.seq.ptr<int32_t>();
  a.past = b.past.ptr<int32_t>();
  a.mask = b.has_mask() ? b.mask.ptr<uint8_t>() : nullptr;
  a.mask_stride = b.mask_stride;
  a.visible = b.key_visible ? b.key_visible->ptr<uint8_t>() : nullptr;
  a.kc = k_cache.ptr<float>();
  a.vc = v_cache.ptr<float>();
  a.n_seq_cache = k_cache.dim(0);
  a.cap = cap;
  a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  a.n_slices = n_slices;
  a.part = part.ptr<float>();
  a.flag = error_flag_;
  const size_t smem = (static_cast<size_t>(head_dim) + kSliceKeys + kThreads) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(rows * n_head), static_cast<unsigned>(n_slices));
  attention_partial_kernel<<<grid, kThreads, smem, stream_>>>(a);
  TESSERA_CUDA_LAUNCHED("attention_partial");
  attention_combine_kernel<<<static_cast<unsigned>(rows * n_head), 64, 0, stream_>>>(
      part.ptr<float>(), n_slices, n_head, head_dim, out.ptr<float>());
  TESSERA_CUDA_LAUNCHED("attention_combine");
}

}  // namespace tessera::cuda
