// CudaBackend: device discovery, construction (stream, cuBLAS handles), memory and transfers.
// Memory is stream-ordered (cudaMallocAsync on the backend's stream from the device's default
// pool, whose release threshold is raised so freed blocks are reused rather than returned to the
// driver: no allocation cost per step, and CUDA graphs can capture allocations later).
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_backend_impl.h"
#include "tensor/cuda/device_flags.h"
#include "tensor/cuda/image_ops.h"
#include "tessera/error.h"
#include "tessera/log.h"

namespace tessera {

bool cuda_built() {
  return true;
}

std::vector<CudaDeviceInfo> cuda_devices(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
    if (why) *why = cudaGetErrorString(e);
    return {};
  }
  if (count == 0) {
    if (why) *why = "no CUDA device found";
    return {};
  }
  std::vector<CudaDeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    TESSERA_CUDA_CHECK(cudaGetDeviceProperties(&p, i));
    CudaDeviceInfo d;
    d.ordinal = i;
    d.name = p.name;
    d.total_memory = static_cast<int64_t>(p.totalGlobalMem);
    d.compute_major = p.major;
    d.compute_minor = p.minor;
    size_t free_b = 0, total_b = 0;
    TESSERA_CUDA_CHECK(cudaSetDevice(i));
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) d.free_memory = free_b;
    out.push_back(std::move(d));
  }
  return out;
}

std::unique_ptr<Backend> make_cuda_backend(int ordinal) {
  std::string why;
  const std::vector<CudaDeviceInfo> devs = cuda_devices(&why);
  check(!devs.empty(), "no CUDA device: " + why);
  check(ordinal >= 0 && ordinal < static_cast<int>(devs.size()), [&] {
    return "no CUDA device cuda:" + std::to_string(ordinal) + " (this machine has " +
           std::to_string(devs.size()) + ")";
  });
  return std::make_unique<cuda::CudaBackend>(ordinal);
}

namespace cuda {

CudaBackend::CudaBackend(int ordinal) : ordinal_(ordinal) {
  TESSERA_CUDA_CHECK(cudaSetDevice(ordinal_));
  cudaDeviceProp p{};
  TESSERA_CUDA_CHECK(cudaGetDeviceProperties(&p, ordinal_));
  name_ = "cuda:" + std::to_string(ordinal_) + " (" + p.name + ")";
  TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  cudaMemPool_t pool;
  TESSERA_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, ordinal_));
  uint64_t threshold = std::numeric_limits<uint64_t>::max();
  TESSERA_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  TESSERA_CUBLAS_CHECK(cublasCreate(&blas_));
  TESSERA_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
  TESSERA_CUBLAS_CHECK(cublasLtCreate(&blas_lt_));
  TESSERA_CUDA_CHECK(
      cudaMallocAsync(reinterpret_cast<void**>(&error_flag_), 2 * sizeof(int), stream_));
  TESSERA_CUDA_CHECK(cudaMemsetAsync(error_flag_, 0, 2 * sizeof(int), stream_));
  TESSERA_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&staging_host_), staging_.bytes()));
  for (cudaEvent_t& e : staging_events_)
    TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

CudaBackend::~CudaBackend() {
  // No throwing from a destructor: errors here are ignored (the process is usually ending).
  cudaSetDevice(ordinal_);
  if (error_flag_) cudaFreeAsync(error_flag_, stream_);
  cudaStreamSynchronize(stream_);
  for (cudaEvent_t e : staging_events_)
    if (e) cudaEventDestroy(e);
  if (staging_host_) cudaFreeHost(staging_host_);
  if (blas_lt_) cublasLtDestroy(blas_lt_);
  if (blas_) cublasDestroy(blas_);
  if (stream_) cudaStreamDestroy(stream_);
}

int64_t CudaBackend::available_memory() const {
  TESSERA_CUDA_CHECK(cudaSetDevice(ordinal_));
  size_t free_b = 0, total_b = 0;
  TESSERA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  // Memory the pool holds but no tensor uses is free to this backend too.
  cudaMemPool_t pool;
  TESSERA_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, ordinal_));
  uint64_t reserved = 0, used = 0;
  TESSERA_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  TESSERA_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  return static_cast<int64_t>(free_b) + static_cast<int64_t>(reserved - used);
}

Tensor CudaBackend::empty(DType dtype, Shape shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.backend = this;
  const size_t bytes = (t.nbytes() + 255) / 256 * 256;  // 256-byte aligned, for vector loads
  if (bytes == 0) return t;
  // Free memory is queried for large requests only (as the CPU backend does): cudaMemGetInfo and
  // the pool's attributes cost microseconds, and a round allocates its scratch many times. A
  // small one that does not fit fails in cudaMallocAsync, reported the same way. Under graph
  // capture (a step's scratch) nothing is queried (cudaMemGetInfo is not a capturable call): the
  // allocation becomes a graph node, and a failure surfaces at instantiation.
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  TESSERA_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capturing));
  const bool captured = capturing != cudaStreamCaptureStatusNone;
  auto no_room = [&](int64_t avail) {
    return Error("out of device memory on " + name_ + ": a " + std::to_string(bytes >> 20) +
                 " MiB tensor " + shape_str(t.shape) + " does not fit in the " +
                 std::to_string(avail >> 20) + " MiB free");
  };
  if (!captured && bytes >= kQueriedAllocation) {
    const int64_t avail = available_memory();
    if (static_cast<int64_t>(bytes) > avail) throw no_room(avail);
  }
  void* p = nullptr;
  TESSERA_CUDA_CHECK(cudaSetDevice(ordinal_));
  const cudaError_t allocated = cudaMallocAsync(&p, bytes, stream_);
  if (allocated == cudaErrorMemoryAllocation && !captured) {
    (void)cudaGetLastError();  // not sticky: clear it so the next call does not report it
    throw no_room(available_memory());
  }
  TESSERA_CUDA_CHECK(allocated);
  t.data = p;
  cudaStream_t s = stream_;
  // Freed in stream order: ops already queued that read the tensor finish first.
  t.owner = std::shared_ptr<void>(p, [s](void* q) { cudaFreeAsync(q, s); });
  return t;
}

Tensor CudaBackend::zeros(DType dtype, Shape shape) {
  Tensor t = empty(dtype, std::move(shape));
  if (t.nbytes()) TESSERA_CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.nbytes(), stream_));
  return t;
}

Tensor CudaBackend::upload(const void* host, DType dtype, Shape shape) {
  Tensor t = empty(dtype, std::move(shape));
  upload_into(host, t);
  return t;
}

// The caller may reuse or free `host` as soon as this returns. A copy of at most the staging
// ring's size goes through it: the bytes are copied into pinned memory, the device copy is queued
// from there, and the call returns without waiting for the stream (the ops queued before it keep
// running: a round's inputs no longer wait for its drafts, issue 42). A larger one (weights at
// load) is copied from `host` and waited for. Under graph capture an upload is an error: a replay
// would not copy the host's new bytes, and a wait would break the capture (capture() then logs
// this and runs the ops one by one).
void CudaBackend::upload_into(const void* host, Tensor& dst) {
  const size_t n = dst.nbytes();
  if (!n) return;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  TESSERA_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capturing));
  check(capturing == cudaStreamCaptureStatusNone,
        "internal: an upload during a CUDA graph capture (a replay would not repeat it)");
  {
    std::lock_guard<std::mutex> lock(staging_mutex_);
    const auto region = staging_.reserve(
        n, [this](int slot) { TESSERA_CUDA_CHECK(cudaEventSynchronize(staging_events_[slot])); });
    if (region) {
      uint8_t* staged = staging_host_ + region->offset;
      std::memcpy(staged, host, n);
      TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst.data, staged, n, cudaMemcpyHostToDevice, stream_));
      TESSERA_CUDA_CHECK(cudaEventRecord(staging_events_[region->slot], stream_));
      return;
    }
  }
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst.data, host, n, cudaMemcpyHostToDevice, stream_));
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::download(const Tensor& t, void* host) {
  check(t.layout == Layout::RowMajor, "internal: download of a packed weight");
  if (t.nbytes())
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(host, t.data, t.nbytes(), cudaMemcpyDeviceToHost, stream_));
  synchronize();
}

void CudaBackend::download_async(const Tensor& t, void* host) {
  check(t.layout == Layout::RowMajor, "internal: download of a packed weight");
  if (t.nbytes())
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(host, t.data, t.nbytes(), cudaMemcpyDeviceToHost, stream_));
}

namespace {
class CudaGraph final : public OpGraph {
 public:
  explicit CudaGraph(cudaGraphExec_t exec) : exec(exec) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec); }
  cudaGraphExec_t exec;
};
}  // namespace

// The ops' stream-ordered allocations become the graph's memory nodes. Capture records every op
// queued on the stream meanwhile, so no other thread may issue ops on this backend during it.
std::unique_ptr<OpGraph> CudaBackend::capture(const std::function<void()>& ops) {
  TESSERA_CUDA_CHECK(cudaSetDevice(ordinal_));
  TESSERA_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  std::string why;
  try {
    ops();
  } catch (const std::exception& e) {
    why = e.what();
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  if (why.empty() && ended != cudaSuccess) why = cudaGetErrorString(ended);
  cudaGraphExec_t exec = nullptr;
  if (why.empty()) {
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    if (made != cudaSuccess) why = std::string("instantiate: ") + cudaGetErrorString(made);
  }
  if (graph) cudaGraphDestroy(graph);
  if (!why.empty()) {
    (void)cudaGetLastError();  // a failed capture leaves no sticky error behind
    log_info("CUDA graph capture failed on " + name_ + ", the step's ops run one by one: " + why);
    return nullptr;
  }
  return std::make_unique<CudaGraph>(exec);
}

void CudaBackend::replay(OpGraph& graph) {
  TESSERA_CUDA_CHECK(cudaGraphLaunch(static_cast<CudaGraph&>(graph).exec, stream_));
}

void CudaBackend::synchronize() {
  unsigned long long staged;
  {
    std::lock_guard<std::mutex> lock(staging_mutex_);
    staged = staging_.issued();
  }
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  {
    // The copies staged before the wait have run; one another thread staged meanwhile may not.
    std::lock_guard<std::mutex> lock(staging_mutex_);
    staging_.forget_before(staged);
  }
  check_device_flags();
}

void CudaBackend::check_device_flags() {
  int flag[2] = {0, 0};
  TESSERA_CUDA_CHECK(cudaMemcpy(flag, error_flag_, sizeof flag, cudaMemcpyDeviceToHost));
  if (flag[0] == kFlagNone) return;
  TESSERA_CUDA_CHECK(cudaMemset(error_flag_, 0, sizeof flag));
  const std::string v = std::to_string(flag[1]);
  switch (flag[0]) {
    case kFlagRowId:
      throw Error("internal: row id " + v + " out of range (get_rows on " + name_ + ")");
    case kFlagRopePosition:
      throw Error("internal: rope position " + v + " out of table");
    case kFlagKvSequence:
      throw Error("internal: KV sequence " + v + " out of range");
    case kFlagKvFull:
      throw Error("KV cache full: a sequence needs " + v + " slots");
    default:
      throw Error("internal: device error code " + std::to_string(flag[0]));
  }
}

Tensor CudaBackend::adopt_host(const void* host, DType dtype, Shape shape, std::shared_ptr<void>) {
  return upload(host, dtype, std::move(shape));  // a device cannot read the mapping in place
}

void CudaBackend::copy(const Tensor& src, Tensor& dst) {
  check(src.layout == Layout::RowMajor, "internal: copy of a packed weight");
  check(src.dtype == dst.dtype && src.numel() == dst.numel(), "internal: copy mismatch");
  if (src.nbytes())
    TESSERA_CUDA_CHECK(
        cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDeviceToDevice, stream_));
}

// ---- MAE, image decoder and classifier ops: kernels in the other files of this folder ----
void CudaBackend::layer_norm(const Tensor& x, const Tensor* g, const Tensor* b, float eps,
                             Tensor& y) {
  cuda::layer_norm(stream_, x, g, b, eps, y);
}
void CudaBackend::gelu_erf(Tensor& x) {
  cuda::gelu_erf(stream_, x);
}
void CudaBackend::self_attention(const Tensor& qkv, int batch, int n_head, int head_dim,
                                 Tensor& out, const SelfAttentionExtras& extras) {
  cuda::self_attention(stream_, qkv, batch, n_head, head_dim, out, extras);
}
void CudaBackend::modulate(const Tensor& x, const Tensor& shift, const Tensor& scale, Tensor& y) {
  cuda::modulate(stream_, x, shift, scale, y);
}
void CudaBackend::add_gated(Tensor& h, const Tensor& gate, const Tensor& u) {
  cuda::add_gated(stream_, h, gate, u);
}
void CudaBackend::add_rows_broadcast(Tensor& x, const Tensor& table) {
  cuda::add_rows_broadcast(stream_, x, table);
}
void CudaBackend::conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, int pad, Tensor& y) {
  cuda::conv2d(stream_, blas_, x, w, bias, pad, y);
}
void CudaBackend::group_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, int groups,
                             float eps, bool swish, Tensor& y) {
  cuda::group_norm(stream_, x, gamma, beta, groups, eps, swish, y);
}
void CudaBackend::upsample_nearest2x(const Tensor& x, Tensor& y) {
  cuda::upsample_nearest2x(stream_, x, y);
}
void CudaBackend::batched_matmul(const Tensor& a, bool ta, const Tensor& b, bool tb, float alpha,
                                 Tensor& c) {
  cuda::batched_matmul(stream_, blas_, a, ta, b, tb, alpha, c);
}
void CudaBackend::softmax_rows(Tensor& x) {
  cuda::softmax_rows(stream_, x);
}
void CudaBackend::l2_normalize_rows(Tensor& x, float eps) {
  cuda::l2_normalize_rows(stream_, x, eps);
}
void CudaBackend::transpose_last2(const Tensor& x, Tensor& y) {
  cuda::transpose_last2(stream_, x, y);
}
void CudaBackend::relu(Tensor& x) {
  cuda::relu(stream_, x);
}
void CudaBackend::max_pool2x2(const Tensor& x, Tensor& y) {
  cuda::max_pool2x2(stream_, x, y);
}
void CudaBackend::avg_pool2x2(const Tensor& x, Tensor& y) {
  cuda::avg_pool2x2(stream_, x, y);
}

}  // namespace cuda
}  // namespace tessera
