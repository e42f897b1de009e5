// The compute backend interface. It knows tensors and ops, nothing about models. A model calls
// these ops in order; a backend (CPU now, CUDA later) runs them on its own memory, so adding a
// backend never touches model code.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace tessera {

// Describes one attention call over a multi-sequence KV cache. Rows of the batch are
// (sequence, new token) pairs: row r*n_new + j is token j of batch sequence r. The per-call
// arrays are backend tensors (I32 / U8), written once per step into a reused workspace, so a
// device backend reads them where it runs and a captured graph can replay the call.
struct AttentionBatch {
  int n_seq = 0;  // batch sequences
  int n_new = 0;  // tokens appended to each batch sequence in this call
  Tensor seq;     // I32 [n_seq]: cache sequence id of each batch sequence
  Tensor past;    // I32 [n_seq]: cached length of each batch sequence before this call
  // Optional explicit mask (1 = may attend), U8 [n_seq][n_new][mask_stride], over cache slots
  // 0..past+n_new-1. Undefined (no data) means causal. Used for tree verification; a query never
  // sees slots after its own, so tree nodes must be appended in topological order.
  Tensor mask;
  int mask_stride = 0;
  // Optional per-cache-slot key visibility, U8 [n_seq_cache][capacity] (the t2i caption padding):
  // a key whose flag is 0 is seen only by its own query (LlamaGen forces the diagonal on).
  const Tensor* key_visible = nullptr;

  bool has_mask() const { return mask.data != nullptr; }
};

// A recorded sequence of ops that Backend::replay runs again as one launch (a CUDA graph): the
// ops' shapes and addresses are fixed at capture, so what changes between replays lives in
// device tensors that the ops themselves advance.
// The extras of an encoder's self-attention beyond MAR's plain form: T5's (Raffel et al., 2020,
// §2.1: scores not scaled, the 1/sqrt(d) folded into its initialisation; a learned
// relative-position bias per head) and padding keys hidden (HF's attention_mask).
struct SelfAttentionExtras {
  float scale = 0.0f;                // score scale; 0: 1/sqrt(head_dim)
  const Tensor* bias = nullptr;      // f32 [n_head, N, N] added to every sequence's scores
  const Tensor* key_mask = nullptr;  // U8 [batch, N]: 0 hides that key from every query
};

class OpGraph {
 public:
  virtual ~OpGraph() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // ---- memory -------------------------------------------------------------------------------
  // Bytes this backend can still allocate (host: free RAM within the process's cgroup limit;
  // a GPU: free device memory). Requests are checked against it before they allocate.
  virtual int64_t available_memory() const = 0;
  virtual Tensor empty(DType dtype, Shape shape) = 0;
  virtual Tensor zeros(DType dtype, Shape shape) = 0;
  virtual Tensor upload(const void* host, DType dtype, Shape shape) = 0;
  virtual void download(const Tensor& t, void* host) = 0;
  // Writes host bytes into an existing tensor (dst.nbytes() of them); its address is unchanged.
  virtual void upload_into(const void* host, Tensor& dst) = 0;
  // Starts copying t to host memory; the copy is complete, and `host` may be read, only after
  // synchronize(). A device backend queues it behind the ops already issued.
  virtual void download_async(const Tensor& t, void* host) = 0;
  // Waits for every op and transfer issued so far.
  virtual void synchronize() = 0;
  // Makes host memory that outlives the call (a file mapping, kept alive by `owner`) usable as a
  // tensor. The CPU backend uses it in place, without a copy; a device backend copies it.
  virtual Tensor adopt_host(const void* host, DType dtype, Shape shape,
                            std::shared_ptr<void> owner) = 0;
  // Whether tensors' data are host addresses (the CPU backend), readable without a download.
  virtual bool host_memory() const { return false; }
  // The native queue the backend's ops run on (CUDA: its cudaStream_t), for kernels written
  // outside the tensor layer to join it (the device sampler); null where there is none.
  virtual void* native_stream() const { return nullptr; }
  // Records the ops `ops` issues, without running them, into a graph; null when the backend
  // records nothing (the CPU, whose ops cost no launch: the caller runs `ops` itself) or when
  // the ops cannot be recorded (a CUDA capture that fails: logged, and the caller runs them).
  virtual std::unique_ptr<OpGraph> capture(const std::function<void()>& ops) {
    (void)ops;
    return nullptr;
  }
  // Queues a graph made by this backend's capture().
  virtual void replay(OpGraph& graph) { (void)graph; }
  // A new f32 tensor with the values of t (any float dtype).
  virtual Tensor to_f32(const Tensor& t) = 0;
  virtual void copy(const Tensor& src, Tensor& dst) = 0;  // same dtype and element count
  // dst[to[i], :] = src[from[i], :] for each pair: 2-D tensors whose rows hold the same bytes (any
  // dtypes), from and to I32 of one length, each destination row named once; every read before
  // any write, so dst may be src and a source another pair's destination (a KV cache compaction).
  // One op for what would be one copy per row, within a buffer or between two (the device loop's
  // drafted tokens into a forward's inputs).
  virtual void copy_rows(const Tensor& src, const Tensor& from, Tensor& dst, const Tensor& to) = 0;
  void move_rows(Tensor& t, const Tensor& from, const Tensor& to) { copy_rows(t, from, t, to); }

  // ---- transformer ops (activations f32; weights f32, f16 or bf16) ----------------------------
  // y[M,N] = x[M,K] · w[N,K]^T (+ bias[N]). Each output element is one dot product whose
  // summation order does not depend on M or on the thread count (reproducible sampling).
  // w row-major or packed by pack_linear_weight.
  virtual void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) = 0;
  // Whether linear rounds x to bf16 (to nearest even) before multiplying it by bf16 weights, as
  // bf16 matrix units do (AMX on the CPU; bf16 tensor cores), with the products accumulated in
  // f32. f32 and f16 weights always multiply f32 activations. References in tests follow it.
  virtual bool linear_rounds_bf16_activations() const { return false; }
  // w [N, K] in the layout this backend's linear reads fastest (Layout::Packed, same dtype and
  // shape), or w itself if it has none. Models call it once per weight at load.
  virtual Tensor pack_linear_weight(const Tensor& w) { return w; }
  // out[i,:] = table[ids[i],:] converted to f32; ids is an I32 tensor.
  virtual void get_rows(const Tensor& table, const Tensor& ids, Tensor& out) = 0;
  // y = x * rsqrt(mean(x^2) + eps) * w, per row.
  virtual void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y) = 0;
  virtual void add(const Tensor& a, const Tensor& b, Tensor& y) = 0;         // y may alias a
  virtual void swiglu(const Tensor& gate, const Tensor& up, Tensor& y) = 0;  // silu(gate)*up
  // The same from one [rows, 2F] tensor (a stacked w1/w3 linear's output): y [rows, F] =
  // silu(gate_up[:, :F]) * gate_up[:, F:], each element's bits as swiglu gives them.
  virtual void swiglu_stacked(const Tensor& gate_up, Tensor& y) = 0;
  // T5 v1.1's gated GELU from one [rows, 2F] tensor (a stacked wi_0/wi_1 linear's output):
  // y [rows, F] = gelu_tanh(gate_up[:, :F]) * gate_up[:, F:] (HF's gelu_new, the tanh form).
  virtual void geglu_stacked(const Tensor& gate_up, Tensor& y) = 0;
  // y [rows, F] = silu(x · w1^T) * (x · w3^T) for w13 = [w1; w3] ([2F, K], as a stacked linear's
  // weight), each element's bits as linear(x, w13) then swiglu_stacked give them; gate_up
  // [rows, 2F] is scratch. The default does exactly that; a backend may fuse the two (the CPU
  // backend: one parallel region instead of two).
  virtual void linear_swiglu(const Tensor& x, const Tensor& w13, Tensor& gate_up, Tensor& y) {
    linear(x, w13, nullptr, gate_up);
    swiglu_stacked(gate_up, y);
  }
  // x += delta for every element of an I32 tensor (counters a replayed step advances: positions,
  // cached lengths).
  virtual void add_scalar_i32(Tensor& x, int32_t delta) = 0;
  virtual void gelu_tanh(Tensor& x) = 0;
  virtual void silu(Tensor& x) = 0;
  // Interleaved-pair rotary embedding on the first n_rot_heads heads of each row of
  // x [rows, row_width]: pair p of a head uses table[pos[row], p] = (cos, sin); pos is I32 [rows].
  virtual void rope(Tensor& x, int n_rot_heads, int head_dim, const Tensor& cos_sin,
                    const Tensor& pos) = 0;
  // Writes k and v of the new rows of qkv [rows, (H + 2*Hkv)*hd] into the caches at slots
  // past..past+n_new-1: k_cache and v_cache are [n_seq_cache, Hkv, capacity, hd] (one head's
  // keys, and its values, are each one contiguous block).
  virtual void kv_store(const Tensor& qkv, int n_head, int n_kv_head, int head_dim,
                        const AttentionBatch& b, Tensor& k_cache, Tensor& v_cache) = 0;
  // out[rows, H*hd] = softmax(q k^T / sqrt(hd) + mask) v over the cached keys.
  // The ancestor mask of draft trees (tensor/tree_mask.h): mask U8 [n_seq * n_new][stride] from
  // parents I32 [n_seq * n_new] (each new row's parent among its sequence's new rows, -1: none)
  // and past I32 [n_seq] (AttentionBatch::past); slots >= past + n_new are 0.
  virtual void expand_tree_mask(const Tensor& parents, const Tensor& past, int n_new, int stride,
                                Tensor& mask) = 0;
  virtual void attention(const Tensor& qkv, int n_head, int n_kv_head, int head_dim,
                         const AttentionBatch& b, const Tensor& k_cache, const Tensor& v_cache,
                         Tensor& out) = 0;

  // ---- MAE / diffusion-head ops (MAR; activations f32) ----------------------------------------
  // y = (x - mean) / sqrt(var + eps) per row, then * gamma + beta when given (null: no affine).
  virtual void layer_norm(const Tensor& x, const Tensor* gamma, const Tensor* beta, float eps,
                          Tensor& y) = 0;
  virtual void gelu_erf(Tensor& x) = 0;  // exact GELU, x * Phi(x)
  // Bidirectional self-attention without a cache: qkv [batch*N, 3*H*hd] holds q, k, v blocks
  // (head-major within each); out [batch*N, H*hd]. Every token attends to all N of its sequence
  // (but the keys extras.key_mask hides), with extras.bias added to the scaled scores.
  virtual void self_attention(const Tensor& qkv, int batch, int n_head, int head_dim, Tensor& out,
                              const SelfAttentionExtras& extras) = 0;
  // y = x * (1 + scale) + shift, element-wise (AdaLN modulation). y may alias x.
  virtual void modulate(const Tensor& x, const Tensor& shift, const Tensor& scale, Tensor& y) = 0;
  // h += gate * u, element-wise (gated residual).
  virtual void add_gated(Tensor& h, const Tensor& gate, const Tensor& u) = 0;
  // x [batch*N, D] += table [N, D] for each of the batch blocks (position embeddings).
  virtual void add_rows_broadcast(Tensor& x, const Tensor& table) = 0;

  // ---- image decoder ops (NCHW f32) ---------------------------------------------------------
  // Stride-1 convolution with symmetric zero padding `pad`; w [O, C, kh, kw], bias [O].
  virtual void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, int pad, Tensor& y) = 0;
  // GroupNorm over (C/groups, H, W) per sample, affine; optionally followed by swish.
  virtual void group_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, int groups,
                          float eps, bool swish, Tensor& y) = 0;
  virtual void upsample_nearest2x(const Tensor& x, Tensor& y) = 0;
  // c[b] = alpha * op(a[b]) · op(b[b]) for each of the batch matrices (3-D tensors).
  virtual void batched_matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                              float alpha, Tensor& c) = 0;
  virtual void softmax_rows(Tensor& x) = 0;
  virtual void l2_normalize_rows(Tensor& x, float eps) = 0;
  // y[b, n, m] = x[b, m, n].
  virtual void transpose_last2(const Tensor& x, Tensor& y) = 0;

  // ---- classifier ops (NCHW f32; the emoji classifier) --------------------------------------
  virtual void relu(Tensor& x) = 0;  // x = max(x, 0)
  // 2x2 windows, stride 2, no padding (PyTorch's MaxPool2d(2) / AvgPool2d(2)): y [B, C, H/2,
  // W/2]; an odd last row or column is dropped, as PyTorch's floor mode does.
  virtual void max_pool2x2(const Tensor& x, Tensor& y) = 0;
  virtual void avg_pool2x2(const Tensor& x, Tensor& y) = 0;
};

// The process-wide CPU backend.
Backend& cpu_backend();

// The values of an f32 tensor, on the host (a blocking download).
std::vector<float> download_f32(Backend& backend, const Tensor& t);

// An I32 tensor holding `ids` (a host-side gather list for the ops that take index tensors).
Tensor upload_ids(Backend& backend, std::span<const int32_t> ids);

// The first `rows` rows of `buffer` ([rows, width] of `dtype`), reallocated larger when it holds
// fewer: a scratch tensor reused across steps whose sizes vary.
Tensor grown_rows(Backend& backend, Tensor& buffer, DType dtype, int64_t rows, int64_t width);

// Row pairs for Backend::copy_rows: `pairs` holds n source rows, then their n destination rows;
// uploaded into `buffer` (grown as grown_rows does, without waiting) and returned as the two
// [n] I32 index tensors, undefined when n is 0. Moves rows between tensors on the backend with
// one small upload (drafts into a forward's inputs, distributions into a cache).
struct RowPairs {
  Tensor from, to;
  bool empty() const { return !from.data; }
};
RowPairs upload_row_pairs(Backend& backend, Tensor& buffer, std::span<const int32_t> pairs);

// Doubles the rows of `store` ([rows, width], allocated), its rows copied to the front of the new
// one (row indices into it stay valid); returns the old row count. A store of rows that grows
// as it fills (drafters' feature rows).
int64_t double_rows(Backend& backend, Tensor& store);

// What a captured graph's launches depend on, spelled out: the host values and the tensors (their
// addresses, types and shapes) its ops were given. Ops run with equal keys launch the same kernels
// on the same memory, so one graph replays them all; a key that leaves something out would replay
// a stale launch.
class GraphKey {
 public:
  GraphKey() = default;
  explicit GraphKey(int64_t value) { add(value); }
  GraphKey& add(int64_t value);
  GraphKey& add(const Tensor& t);  // undefined tensors included (their absence is part of a key)
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// Captured graphs by key (a step's or a draft chain's shape), at most `capacity` of them: a new
// key past it drops the least recently used one (a GPU frees a graph still in flight when it
// completes), so shapes that vary (--draft-len auto, batches that change size) do not pile up
// graphs without bound.
class GraphCache {
 public:
  explicit GraphCache(size_t capacity = 64);
  // Runs `ops` as the graph cached under `key` (captured at its first use), or runs them directly
  // when the backend records none (the CPU, or a failed capture). Returns whether a graph was
  // replayed. The ops must address only buffers that stay put while the key does.
  bool replay_or_run(Backend& backend, const GraphKey& key, const std::function<void()>& ops);
  bool replay_or_run(Backend& backend, int key, const std::function<void()>& ops) {
    return replay_or_run(backend, GraphKey(key), ops);
  }
  void clear() { graphs_.clear(); }  // after the buffers they address moved
  size_t size() const { return graphs_.size(); }

 private:
  struct Entry {
    std::unique_ptr<OpGraph> graph;  // null: the backend captured none, run the ops
    uint64_t used = 0;
  };
  std::map<std::string, Entry> graphs_;
  uint64_t clock_ = 0;
  size_t capacity_;
};

// n rounded up to a multiple of 256 bytes: the offset of the next part of a byte buffer holding
// several arrays (Tensor::bytes_as), aligned for any element type.
constexpr size_t aligned_offset(size_t n) {
  return (n + 255) / 256 * 256;
}

}  // namespace tessera
