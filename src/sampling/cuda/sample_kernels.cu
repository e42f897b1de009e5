// Device sampling: the CPU sampler's rules (sampling/sampling_rules.h) run by one block per row,
// with block-wide reductions and scans in a fixed order (replays draw the same tokens). Differences
// from the CPU, all float rounding: expf instead of libmvec's exp (a few ulp); sums reduced as a
// tree, not in sequence; the draw sums unnormalised exp in double instead of normalised
// probabilities. The token is the CPU's unless u * total, or the top-p cumulative mass, lies within
// ~1e-6 relative of a boundary.
#include <cuda_runtime.h>

#include <climits>
#include <string>

#include "sampling/cuda/sample_kernels.h"
#include "sampling/philox.h"
#include "sampling/sampling_rules.h"
#include "tensor/cuda/block_order.cuh"
#include "tensor/cuda/cuda_check.h"
#include "tessera/error.h"

namespace tessera {

namespace {

constexpr int kThreads = 1024, kWarps = kThreads / 32;

struct BlockScratch {
  double d[kWarps];
  float f[kWarps];
  int i[kWarps];
  uint32_t u[kWarps];
  float hist_mass[kWarps][kRadixBins];
  uint32_t hist_count[kWarps][kRadixBins];
  float mass[kRadixBins];
  uint32_t count[kRadixBins];
  uint32_t prefix, k_left, count_above, keep;
  float mass_above, budget;
  int flag;
};

// The block's fixed-order reductions (tensor/cuda/block_order.cuh) at this block size.
template <typename T>
__device__ T warp_sum(T v) {
  return cuda::ordered_warp_sum(v);
}
template <typename T>
__device__ T block_sum(T v, T* slot) {
  return cuda::ordered_block_sum<kWarps>(v, slot);
}
__device__ float block_max(float v, float* slot) {
  return cuda::ordered_block_max<kWarps>(v, slot);
}
__device__ int block_extreme(int v, bool want_min, int* slot) {
  return cuda::ordered_block_extreme<kWarps>(v, want_min, slot);
}
template <typename T>
__device__ T block_exclusive_scan(T v, T* slot, T* total) {
  return cuda::ordered_block_exclusive_scan<kWarps>(v, slot, total);
}

// The 16-bin histograms of one radix pass summed over the block into s.count / s.mass.
__device__ void block_histogram(const uint32_t* count, const float* mass, BlockScratch& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int b = 0; b < kRadixBins; ++b) {
    const uint32_t c = warp_sum(count[b]);
    const float m = warp_sum(mass[b]);
    if (lane == 0) s.hist_count[warp][b] = c, s.hist_mass[warp][b] = m;
  }
  __syncthreads();
  if (threadIdx.x < kRadixBins) {
    uint32_t c = 0;
    float m = 0.0f;
    for (int w = 0; w < kWarps; ++w)
      c += s.hist_count[w][threadIdx.x], m += s.hist_mass[w][threadIdx.x];
    s.count[threadIdx.x] = c;
    s.mass[threadIdx.x] = m;
  }
  __syncthreads();
}

__device__ bool dropped(float x) {
  return x == -INFINITY;
}

// Row r's token: to its outputs (SampleRowsOut), then its params advance. Thread 0 only, after
// every thread has read the params.
struct RowOut {
  int32_t* tokens;
  int mirror;
  int32_t* history;
  int history_stride;
  bool advance;
  int* error_flag;
};
__device__ void write_token(const RowOut& o, DeviceSampleParams* params, int row, int token) {
  const uint32_t t = params[row].token_index;
  o.tokens[row] = token;
  if (o.mirror > 0) o.tokens[o.mirror + row] = token;
  if (o.history) {
    if (t < static_cast<uint32_t>(o.history_stride))
      o.history[static_cast<size_t>(row) * o.history_stride + t] = token;
    else
      atomicExch(o.error_flag, 1);
  }
  if (o.advance) params[row].token_index = t + 1;
}

// Row `row`'s logits, guided where its params say, into l (shared memory); false when one is not
// finite (target_distribution's check).
__device__ bool load_guided_row(const float* __restrict__ cond, const float* __restrict__ uncond,
                                const DeviceSampleParams& p, int row, int V, float* l,
                                BlockScratch& s) {
  const float* c = cond + static_cast<size_t>(row) * V;
  const bool guided = uncond && guided_at(p.uses_cfg != 0, p.cfg_interval, p.token_index);
  const float* u = guided ? uncond + static_cast<size_t>(row) * V : nullptr;
  int bad = 0;  // guidance, coalesced
  for (int i = threadIdx.x; i < V; i += kThreads) {
    const float x = u ? guided_logit(c[i], u[i], p.cfg_scale) : c[i];
    bad |= !finite_logit(x);
    l[i] = x;
  }
  return block_extreme(bad, false, s.i) == 0;
}

// The first index of the row's largest logit (greedy), from this thread's chunk [begin, end).
__device__ int row_argmax(const float* l, int begin, int end, BlockScratch& s) {
  float best = -INFINITY;
  int best_i = INT_MAX;
  for (int i = begin; i < end; ++i)
    if (argmax_prefers(l[i], i, best, best_i)) best = l[i], best_i = i;
  const float mx = block_max(best, s.f);
  return block_extreme(best == mx ? best_i : INT_MAX, true, s.i);
}

// Temperature (> 0), top-k and top-p on the row in l, then l[i] = exp(l[i] - max), 0 where
// filtered: the softmax's numerators. Each thread owns the contiguous chunk [begin, end), so
// thread order is vocabulary order for scans. Returns this thread's sum of its chunk.
__device__ double softmax_numerators(float* l, const DeviceSampleParams& p, int V, int begin,
                                     int end, BlockScratch& s) {
  const int tid = threadIdx.x;
  const float t = temperature_divisor(p.temperature);
  for (int i = begin; i < end; ++i) l[i] = __fdiv_rn(l[i], t);
  __syncthreads();

  if (p.top_k > 0 && p.top_k < V) {  // radix select of the k-th largest value
    if (tid == 0) s.prefix = 0, s.k_left = static_cast<uint32_t>(p.top_k);
    __syncthreads();
    for (int pass = 0; pass < kRadixPasses; ++pass) {
      uint32_t count[kRadixBins] = {};
      float mass[kRadixBins] = {};
      const uint32_t prefix = s.prefix;
      for (int i = begin; i < end; ++i) {
        const uint32_t key = float_order_key(l[i]);
        if (radix_matches(key, prefix, pass)) ++count[radix_digit(key, pass)];
      }
      block_histogram(count, mass, s);
      if (tid == 0) s.prefix |= top_k_pick(s.count, &s.k_left) << (32 - kRadixBits * (pass + 1));
      __syncthreads();
    }
    for (int i = begin; i < end; ++i)
      if (float_order_key(l[i]) < s.prefix) l[i] = -INFINITY;  // ties with the k-th survive
    __syncthreads();
  }
  float local_max = -INFINITY;
  for (int i = begin; i < end; ++i) local_max = fmaxf(local_max, l[i]);
  const float mx = block_max(local_max, s.f);

  if (p.top_p < 1.0f) {  // radix search of the last survivor in (logit desc, index) order
    float part = 0.0f;
    for (int i = begin; i < end; ++i) part += dropped(l[i]) ? 0.0f : expf(l[i] - mx);
    const float total = block_sum(part, s.f);
    if (tid == 0) s.prefix = 0, s.count_above = 0, s.mass_above = 0.0f, s.budget = p.top_p * total;
    __syncthreads();
    for (int pass = 0; pass < kRadixPasses; ++pass) {
      uint32_t count[kRadixBins] = {};
      float mass[kRadixBins] = {};
      const uint32_t prefix = s.prefix;
      for (int i = begin; i < end; ++i) {
        const uint32_t key = float_order_key(l[i]);
        if (dropped(l[i]) || !radix_matches(key, prefix, pass)) continue;
        ++count[radix_digit(key, pass)];
        mass[radix_digit(key, pass)] += expf(l[i] - mx);
      }
      block_histogram(count, mass, s);
      if (tid == 0) {
        const uint32_t d = top_p_pick(s.count, s.mass, s.budget, &s.mass_above, &s.count_above);
        s.prefix |= d << (32 - kRadixBits * (pass + 1));
        if (pass == kRadixPasses - 1) {
          const float e = expf(float_from_order_key(s.prefix) - mx);
          s.keep = top_p_group_keep(s.mass_above, s.count_above, e, s.count[d], s.budget);
        }
      }
      __syncthreads();
    }
    const uint32_t cut = s.prefix, keep = s.keep;
    uint32_t mine = 0, all;
    for (int i = begin; i < end; ++i) mine += !dropped(l[i]) && float_order_key(l[i]) == cut;
    uint32_t rank = block_exclusive_scan(mine, s.u, &all);
    for (int i = begin; i < end; ++i) {
      if (dropped(l[i])) continue;
      const uint32_t key = float_order_key(l[i]);
      if (key < cut || (key == cut && rank++ >= keep)) l[i] = -INFINITY;
    }
    __syncthreads();
  }

  double part = 0.0;
  for (int i = begin; i < end; ++i) {
    l[i] = dropped(l[i]) ? 0.0f : expf(l[i] - mx);
    part += l[i];
  }
  return part;
}

// The inverse-CDF draw in vocabulary order over a row of weights w, this thread's chunk
// [begin, end) summing to `part`, with the row's uniform: the CPU's sample_index (the last
// positive index when rounding leaves the target unmet); -1 when no weight is positive.
__device__ int block_draw(const float* w, int begin, int end, double part,
                          const DeviceSampleParams& p, BlockScratch& s) {
  double total;
  const double before = block_exclusive_scan(part, s.d, &total);
  const double target = counter_uniform(p.seed, p.image_index, p.token_index, p.stream) * total;
  int last = -1;
  const int hit = draw_in_chunk(w + begin, end - begin, begin, before, target, &last);
  const int first_hit = block_extreme(hit >= 0 ? hit : INT_MAX, true, s.i);
  const int last_positive = block_extreme(last, false, s.i);
  return first_hit != INT_MAX ? first_hit : last_positive;
}

__global__ void __launch_bounds__(kThreads)
    sample_rows_kernel(const float* __restrict__ cond, const float* __restrict__ uncond, int V,
                       DeviceSampleParams* __restrict__ params, RowOut o) {
  extern __shared__ float l[];  // the row's logits, later its unnormalised probabilities
  __shared__ BlockScratch s;
  const int row = blockIdx.x, tid = threadIdx.x;
  const DeviceSampleParams p = params[row];
  __syncthreads();  // every thread has its copy before thread 0 advances the params
  if (!load_guided_row(cond, uncond, p, row, V, l, s)) {
    if (tid == 0) {
      write_token(o, params, row, 0);
      atomicExch(o.error_flag, 1);
    }
    return;
  }
  const int per = (V + kThreads - 1) / kThreads;
  const int begin = min(V, tid * per), end = min(V, begin + per);
  if (p.temperature <= 0.0f) {  // greedy: argmax, the first maximal index
    const int first = row_argmax(l, begin, end, s);
    if (tid == 0) write_token(o, params, row, first);
    return;
  }
  // The draw over the softmax's numerators.
  const int t = block_draw(l, begin, end, softmax_numerators(l, p, V, begin, end, s), p, s);
  if (tid == 0) write_token(o, params, row, t);
}

// target_distribution for one row a block: probabilities normalised by their block-wide (double)
// sum, one-hot at the argmax when greedy; a non-finite logit sets the flag and zeroes the row.
__global__ void __launch_bounds__(kThreads)
    distribution_rows_kernel(const float* __restrict__ cond, const float* __restrict__ uncond,
                             int V, const DeviceSampleParams* __restrict__ params,
                             float* __restrict__ probs, int* error_flag) {
  extern __shared__ float l[];
  __shared__ BlockScratch s;
  const int row = blockIdx.x, tid = threadIdx.x;
  const DeviceSampleParams p = params[row];
  float* out = probs + static_cast<size_t>(row) * V;
  if (!load_guided_row(cond, uncond, p, row, V, l, s)) {
    for (int i = tid; i < V; i += kThreads) out[i] = 0.0f;
    if (tid == 0) atomicExch(error_flag, 1);
    return;
  }
  const int per = (V + kThreads - 1) / kThreads;
  const int begin = min(V, tid * per), end = min(V, begin + per);
  if (p.temperature <= 0.0f) {
    const int first = row_argmax(l, begin, end, s);
    for (int i = tid; i < V; i += kThreads) out[i] = i == first ? 1.0f : 0.0f;
    return;
  }
  const double total = block_sum(softmax_numerators(l, p, V, begin, end, s), s.d);
  const float total_f = static_cast<float>(total);
  __syncthreads();
  for (int i = tid; i < V; i += kThreads) out[i] = __fdiv_rn(l[i], total_f);
}

// top_rows: k passes over the row, each picking the best id that ranks after the previous pick
// in argmax's order (the picks so far are exactly those ranked before it). k is small (a
// Medusa tree's widest rank), so O(k V / threads) a row.
constexpr int kTopThreads = 256, kTopWarps = kTopThreads / 32;

__global__ void __launch_bounds__(kTopThreads)
    top_rows_kernel(const float* probs, int V, int k, int32_t* ids, float* mass, int32_t* inputs) {
  __shared__ float warp_v[kTopWarps];
  __shared__ int warp_i[kTopWarps];
  __shared__ float pick_v;
  __shared__ int pick_i;
  const int row = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const float* p = probs + static_cast<size_t>(row) * V;
  int32_t* out = ids + static_cast<size_t>(row) * k;
  float* out_mass = mass ? mass + static_cast<size_t>(row) * k : nullptr;
  int32_t* in = inputs ? inputs + static_cast<size_t>(row) * k : nullptr;
  float last_v = INFINITY;
  int last_i = -1;
  for (int j = 0; j < k; ++j) {
    float v = 0.0f;
    int vi = INT_MAX;
    for (int i = threadIdx.x; i < V; i += kTopThreads)
      if (p[i] > 0.0f && argmax_prefers(last_v, last_i, p[i], i) && argmax_prefers(p[i], i, v, vi))
        v = p[i], vi = i;
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_down_sync(0xffffffffu, v, o);
      const int oi = __shfl_down_sync(0xffffffffu, vi, o);
      if (argmax_prefers(ov, oi, v, vi)) v = ov, vi = oi;
    }
    if (lane == 0) warp_v[warp] = v, warp_i[warp] = vi;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kTopWarps; ++w)
        if (argmax_prefers(warp_v[w], warp_i[w], v, vi)) v = warp_v[w], vi = warp_i[w];
      pick_v = v, pick_i = vi;
      out[j] = vi == INT_MAX ? -1 : vi;
      if (out_mass) out_mass[j] = vi == INT_MAX ? 0.0f : v;
      if (in) in[j] = token_as_input(out[j]);
    }
    __syncthreads();
    last_v = pick_v, last_i = pick_i;
    __syncthreads();          // pick_* are written again next pass
    if (last_i == INT_MAX) {  // no id with mass left: the rest are -1
      for (int r = j + 1 + threadIdx.x; r < k; r += kTopThreads) {
        out[r] = -1;
        if (out_mass) out_mass[r] = 0.0f;
        if (in) in[r] = token_as_input(-1);
      }
      return;
    }
  }
}

// draw_rows: sample_rows_kernel's draw over a row of probabilities already computed (the chunk
// sums scanned in double, the first index whose cumulative mass exceeds u * total).
__global__ void __launch_bounds__(kThreads)
    draw_rows_kernel(const float* __restrict__ probs, int V,
                     DeviceSampleParams* __restrict__ params, RowOut o) {
  __shared__ BlockScratch s;
  const int row = blockIdx.x, tid = threadIdx.x;
  const DeviceSampleParams p = params[row];
  __syncthreads();  // every thread has its copy before thread 0 advances the params
  const float* q = probs + static_cast<size_t>(row) * V;
  const int per = (V + kThreads - 1) / kThreads;
  const int begin = min(V, tid * per), end = min(V, begin + per);
  if (p.temperature <= 0.0f) {  // a one-hot row: its argmax
    const int first = row_argmax(q, begin, end, s);
    if (tid == 0) write_token(o, params, row, first);
    return;
  }
  double part = 0.0;
  for (int i = begin; i < end; ++i) part += q[i];
  const int t = block_draw(q, begin, end, part, p, s);
  if (tid == 0) {
    if (t < 0) atomicExch(o.error_flag, 1);  // an all-zero row: flagged, token 0
    write_token(o, params, row, t < 0 ? 0 : t);
  }
}

// draw_children_rows: a parent row's children one after another in one block. Each thread owns
// the contiguous chunk [begin, end) of every q row (so thread order is vocabulary order for the
// draw's scan): q_c is q_{c-1} without the last child's token, normalised as normalise_row does
// (a double sum, each value times its inverse); q_0 is P as it is.
__global__ void __launch_bounds__(kThreads)
    draw_children_kernel(const float* __restrict__ probs, int V, int k,
                         const DeviceSampleParams* __restrict__ params, float* __restrict__ q,
                         int32_t* __restrict__ tokens, int32_t* __restrict__ inputs) {
  __shared__ BlockScratch s;
  __shared__ int previous;
  const int row = blockIdx.x, tid = threadIdx.x;
  const int per = (V + kThreads - 1) / kThreads;
  const int begin = min(V, tid * per), end = min(V, begin + per);
  int32_t* out = tokens + static_cast<size_t>(row) * k;
  int32_t* in = inputs ? inputs + static_cast<size_t>(row) * k : nullptr;
  for (int c = 0; c < k; ++c) {
    const DeviceSampleParams p = params[static_cast<size_t>(row) * k + c];
    float* qc = q + (static_cast<size_t>(row) * k + c) * V;
    const float* from = c == 0 ? probs + static_cast<size_t>(row) * V : qc - V;
    double part = 0.0;
    for (int i = begin; i < end; ++i) {
      const float v = c > 0 && i == previous ? 0.0f : from[i];
      qc[i] = v;
      part += v;
    }
    const double total = block_sum(part, s.d);
    if (!(total > 0.0)) {  // no token left with mass: the rest are -1 (inputs: 0), their q 0
      for (int r = c + tid; r < k; r += kThreads) {
        out[r] = -1;
        if (in) in[r] = token_as_input(-1);
      }
      for (int r = c + 1; r < k; ++r)  // row c is q_{c-1} without its last token: all 0 already
        for (int i = begin; i < end; ++i) q[(static_cast<size_t>(row) * k + r) * V + i] = 0.0f;
      return;
    }
    if (c > 0) {
      const double inv = 1.0 / total;
      part = 0.0;
      for (int i = begin; i < end; ++i) {
        qc[i] = static_cast<float>(qc[i] * inv);
        part += qc[i];
      }
    }
    const int t = p.temperature <= 0.0f ? row_argmax(qc, begin, end, s)
                                        : block_draw(qc, begin, end, part, p, s);
    if (tid == 0) {
      out[c] = t;
      if (in) in[c] = token_as_input(t);
      previous = t;
    }
    __syncthreads();
  }
}

__global__ void __launch_bounds__(kThreads)
    row_square_sums_kernel(const float* __restrict__ probs, int V, double* __restrict__ sums) {
  __shared__ double slot[kWarps];
  const float* q = probs + static_cast<size_t>(blockIdx.x) * V;
  double part = 0.0;
  for (int i = threadIdx.x; i < V; i += kThreads) part += static_cast<double>(q[i]) * q[i];
  const double total = block_sum(part, slot);
  if (threadIdx.x == 0) sums[blockIdx.x] = total;
}

}  // namespace

void launch_draw_children_rows(const float* probs, int n_rows, int vocab, int k,
                               const DeviceSampleParams* params, float* q, int32_t* tokens,
                               int32_t* inputs, CUstream_st* stream) {
  if (vocab < 1 || n_rows < 0 || k < 1)
    throw Error("device draw_children_rows: vocabulary " + std::to_string(vocab) + ", " +
                std::to_string(n_rows) + " rows, k " + std::to_string(k));
  if (n_rows == 0) return;
  draw_children_kernel<<<n_rows, kThreads, 0, stream>>>(probs, vocab, k, params, q, tokens, inputs);
  TESSERA_CUDA_LAUNCHED("draw_children_kernel");
}

void launch_draw_rows(const float* probs, int n_rows, int vocab, DeviceSampleParams* params,
                      int32_t* tokens, int mirror, int32_t* history, int history_stride,
                      bool advance, int* error_flag, CUstream_st* stream) {
  if (vocab < 1 || n_rows < 0)
    throw Error("device draws: vocabulary " + std::to_string(vocab) + ", " +
                std::to_string(n_rows) + " rows");
  if (n_rows == 0) return;
  const RowOut o{tokens, mirror, history, history_stride, advance, error_flag};
  draw_rows_kernel<<<n_rows, kThreads, 0, stream>>>(probs, vocab, params, o);
  TESSERA_CUDA_LAUNCHED("draw_rows_kernel");
}

void launch_top_rows(const float* probs, int n_rows, int vocab, int k, int32_t* ids, float* mass,
                     int32_t* inputs, CUstream_st* stream) {
  if (vocab < 1 || n_rows < 0 || k < 1)
    throw Error("device top_rows: vocabulary " + std::to_string(vocab) + ", " +
                std::to_string(n_rows) + " rows, k " + std::to_string(k));
  if (n_rows == 0) return;
  top_rows_kernel<<<n_rows, kTopThreads, 0, stream>>>(probs, vocab, k, ids, mass, inputs);
  TESSERA_CUDA_LAUNCHED("top_rows_kernel");
}

void launch_sample_rows(const float* cond, const float* uncond, int n_rows, int vocab,
                        DeviceSampleParams* params, int32_t* tokens, int mirror, int32_t* history,
                        int history_stride, bool advance, int* error_flag, CUstream_st* stream) {
  if (vocab < 1 || vocab > kMaxDeviceSampleVocab || n_rows < 0)
    throw Error("device sampling: vocabulary " + std::to_string(vocab) + " (1.." +
                std::to_string(kMaxDeviceSampleVocab) + " supported), " + std::to_string(n_rows) +
                " rows");
  if (n_rows == 0) return;
  const size_t shared = static_cast<size_t>(vocab) * sizeof(float);
  // Above 48 KiB of dynamic shared memory a kernel must opt in (not a stream operation, so it is
  // allowed during graph capture).
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(
      sample_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
  const RowOut o{tokens, mirror, history, history_stride, advance, error_flag};
  sample_rows_kernel<<<n_rows, kThreads, shared, stream>>>(cond, uncond, vocab, params, o);
  TESSERA_CUDA_LAUNCHED("sample_rows_kernel");
}

void launch_distribution_rows(const float* cond, const float* uncond, int n_rows, int vocab,
                              const DeviceSampleParams* params, float* probs, int* error_flag,
                              CUstream_st* stream) {
  if (vocab < 1 || vocab > kMaxDeviceSampleVocab || n_rows < 0)
    throw Error("device distributions: vocabulary " + std::to_string(vocab) + " (1.." +
                std::to_string(kMaxDeviceSampleVocab) + " supported), " + std::to_string(n_rows) +
                " rows");
  if (n_rows == 0) return;
  const size_t shared = static_cast<size_t>(vocab) * sizeof(float);
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(distribution_rows_kernel,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(shared)));
  distribution_rows_kernel<<<n_rows, kThreads, shared, stream>>>(cond, uncond, vocab, params, probs,
                                                                 error_flag);
  TESSERA_CUDA_LAUNCHED("distribution_rows_kernel");
}

void launch_row_square_sums(const float* probs, int n_rows, int vocab, double* sums,
                            CUstream_st* stream) {
  if (n_rows <= 0) return;
  row_square_sums_kernel<<<n_rows, kThreads, 0, stream>>>(probs, vocab, sums);
  TESSERA_CUDA_LAUNCHED("row_square_sums_kernel");
}

}  // namespace tessera
