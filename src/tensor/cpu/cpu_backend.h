// CPU backend: the worker pool's threads (common/thread_pool.h), OpenBLAS for the decoder's large
// GEMMs, AVX2/AVX-512 kernels for the bandwidth-bound transformer linears.
#pragma once

#include "tensor/backend.h"

namespace tessera {

class CpuBackend final : public Backend {
 public:
  CpuBackend();
  std::string name() const override { return "cpu"; }
  // CPU-only settings: the worker pool's threads (OpenBLAS runs inside them), clamped to [1,
  // available_cpus()]; returns the count in effect.
  int set_threads(int n);
  int threads() const { return threads_; }

  int64_t available_memory() const override;
  Tensor empty(DType dtype, Shape shape) override;
  Tensor zeros(DType dtype, Shape shape) override;
  Tensor upload(const void* host, DType dtype, Shape shape) override;
  void download(const Tensor& t, void* host) override;
  void upload_into(const void* host, Tensor& dst) override;
  void download_async(const Tensor& t, void* host) override { download(t, host); }
  void synchronize() override {}  // every CPU op has finished when it returns
  bool host_memory() const override { return true; }
  Tensor adopt_host(const void* host, DType dtype, Shape shape,
                    std::shared_ptr<void> owner) override;
  Tensor to_f32(const Tensor& t) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void copy_rows(const Tensor& src, const Tensor& from, Tensor& dst, const Tensor& to) override;

  void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) override;
  // Panels of 32 output rows, k-major (linear_panels.h).
  Tensor pack_linear_weight(const Tensor& w) override;
  // True on the "amx" kernel path (linear_isa.h; TESSERA_LINEAR_ISA=amx).
  bool linear_rounds_bf16_activations() const override;
  void get_rows(const Tensor& table, const Tensor& ids, Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y) override;
  void add(const Tensor& a, const Tensor& b, Tensor& y) override;
  void swiglu(const Tensor& gate, const Tensor& up, Tensor& y) override;
  void swiglu_stacked(const Tensor& gate_up, Tensor& y) override;
  void geglu_stacked(const Tensor& gate_up, Tensor& y) override;
  void linear_swiglu(const Tensor& x, const Tensor& w13, Tensor& gate_up, Tensor& y) override;
  void add_scalar_i32(Tensor& x, int32_t delta) override;
  void gelu_tanh(Tensor& x) override;
  void silu(Tensor& x) override;
  void rope(Tensor& x, int n_rot_heads, int head_dim, const Tensor& cos_sin,
            const Tensor& pos) override;
  void kv_store(const Tensor& qkv, int n_head, int n_kv_head, int head_dim, const AttentionBatch& b,
                Tensor& k_cache, Tensor& v_cache) override;
  void expand_tree_mask(const Tensor& parents, const Tensor& past, int n_new, int stride,
                        Tensor& mask) override;
  void attention(const Tensor& qkv, int n_head, int n_kv_head, int head_dim,
                 const AttentionBatch& b, const Tensor& k_cache, const Tensor& v_cache,
                 Tensor& out) override;

  void layer_norm(const Tensor& x, const Tensor* gamma, const Tensor* beta, float eps,
                  Tensor& y) override;
  void gelu_erf(Tensor& x) override;
  void self_attention(const Tensor& qkv, int batch, int n_head, int head_dim, Tensor& out,
                      const SelfAttentionExtras& extras) override;
  void modulate(const Tensor& x, const Tensor& shift, const Tensor& scale, Tensor& y) override;
  void add_gated(Tensor& h, const Tensor& gate, const Tensor& u) override;
  void add_rows_broadcast(Tensor& x, const Tensor& table) override;

  void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, int pad, Tensor& y) override;
  void group_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, int groups, float eps,
                  bool swish, Tensor& y) override;
  void upsample_nearest2x(const Tensor& x, Tensor& y) override;
  void batched_matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, float alpha,
                      Tensor& c) override;
  void softmax_rows(Tensor& x) override;
  void l2_normalize_rows(Tensor& x, float eps) override;
  void transpose_last2(const Tensor& x, Tensor& y) override;

  void relu(Tensor& x) override;
  void max_pool2x2(const Tensor& x, Tensor& y) override;
  void avg_pool2x2(const Tensor& x, Tensor& y) override;

 private:
  int threads_ = 1;
};

// CPUs this process may run on (its affinity mask).
int available_cpus();
// The process-wide CPU backend's thread count, clamped to available_cpus(); returns it.
int set_cpu_threads(int n);
int cpu_threads();

// Kernels (one file per family), callable directly by tests.
namespace cpu {
// Below this many multiply-adds an op runs on the calling thread: waking the pool's workers and
// joining it costs more than the op. 64K threads the draft model's linears of one token
// (110K and 98K at dim 192; its 192x192 output projection, 37K, stays serial): at 128K they ran
// serial and the only threaded op of a step was the output layer, so the idle thread often fell
// asleep between regions and the draft step measured 0.25 or 0.55 ms by turns, against 0.19-0.20 ms
// now (docs/performance.md, "Per-op overhead" and session 16).
constexpr int64_t kParallelMinMacs = 64 * 1024;

// y[M,N] = x[M,K] · w[N,K]^T (+ bias); w in f32/f16/bf16, in panels (linear_panels.h); each
// element is one FMA chain over k, the same bits for any M, thread count and kernel path.
void linear_panels(const float* x, int64_t M, int64_t K, const void* panels, DType w_type,
                   int64_t N, const float* bias, float* y);
// The same for a row-major w[N, K]: packs it first (tests and one-off calls; models pack their
// weights once at load, CpuBackend::pack_linear_weight).
void linear(const float* x, int64_t M, int64_t K, const void* w, DType w_type, int64_t N,
            const float* bias, float* y);
// y[M,F] = silu(x · w1^T) * (x · w3^T) from w13 = [w1; w3] [2F, K] in panels, with gate_up [M, 2F]
// as scratch (it receives x · w13^T), in one parallel region; each element's bits as
// linear_panels then swiglu_stacked give them. False (nothing done) where it does not apply:
// F not a whole number of panels, or the AMX path for bf16 weights.
bool linear_swiglu_panels(const float* x, int64_t M, int64_t K, const void* w13, DType w_type,
                          int64_t F, float* gate_up, float* y);
// silu(g) * u for kSimdBlock elements (vector_math.h): the one copy of SwiGLU's arithmetic.
void swiglu_block(const float* g, const float* u, float* y);
const char* linear_isa();  // "avx512", "avx2" or "scalar"

// Throws an internal Error naming `what` and both shapes when a and b differ in element count.
void require_same_numel(const Tensor& a, const Tensor& b, const char* what);
}  // namespace cpu

}  // namespace tessera
