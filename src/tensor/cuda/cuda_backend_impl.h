// The CudaBackend class (private to src/tensor/cuda/): one per device, with its own
// non-blocking stream and cuBLAS/cuBLASLt handles bound to it. Ops are queued on the stream.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <mutex>
#include <string>

#include "tensor/backend.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/staging_ring.h"

namespace tessera::cuda {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int ordinal);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  // "cuda:0 (NVIDIA H100 80GB HBM3)": the ordinal as --device names it, then the device.
  std::string name() const override { return name_; }
  cudaStream_t stream() const { return stream_; }

  int64_t available_memory() const override;
  // empty() checks a request of this size or more against available_memory() before allocating.
  static constexpr size_t kQueriedAllocation = size_t{64} << 20;
  Tensor empty(DType dtype, Shape shape) override;
  Tensor zeros(DType dtype, Shape shape) override;
  Tensor upload(const void* host, DType dtype, Shape shape) override;
  void download(const Tensor& t, void* host) override;
  void upload_into(const void* host, Tensor& dst) override;
  void download_async(const Tensor& t, void* host) override;
  void synchronize() override;
  Tensor adopt_host(const void* host, DType dtype, Shape shape,
                    std::shared_ptr<void> owner) override;
  void* native_stream() const override { return stream_; }
  // A CUDA graph of the ops, captured on the backend's stream (thread-local mode: other threads
  // may keep allocating); null, with the reason logged, when capture fails.
  std::unique_ptr<OpGraph> capture(const std::function<void()>& ops) override;
  void replay(OpGraph& graph) override;
  Tensor to_f32(const Tensor& t) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void copy_rows(const Tensor& src, const Tensor& from, Tensor& dst, const Tensor& to) override;

  void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) override;
  void get_rows(const Tensor& table, const Tensor& ids, Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y) override;
  void add(const Tensor& a, const Tensor& b, Tensor& y) override;
  void swiglu(const Tensor& gate, const Tensor& up, Tensor& y) override;
  void swiglu_stacked(const Tensor& gate_up, Tensor& y) override;
  void geglu_stacked(const Tensor& gate_up, Tensor& y) override;
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
  void check_device_flags();  // the device-side range checks (device_flags.h), at synchronize()

  int ordinal_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  cublasLtHandle_t blas_lt_ = nullptr;
  int* error_flag_ = nullptr;  // device int[2] {code, value} (device_flags.h); code 0 = none
  // Asynchronous uploads (upload_into): pinned staging memory and an event per region in flight.
  static constexpr size_t kStagingBytes = size_t{16} << 20;
  static constexpr int kStagingSlots = 64;
  std::mutex staging_mutex_;
  StagingRing staging_{kStagingBytes, kStagingSlots};
  uint8_t* staging_host_ = nullptr;
  std::array<cudaEvent_t, kStagingSlots> staging_events_{};
};

}  // namespace tessera::cuda
