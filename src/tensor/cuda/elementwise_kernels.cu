// Row-wise and element-wise transformer ops on the device: get_rows, rms_norm, add, SwiGLU,
// GELU (tanh), SiLU and to_f32. Semantics as src/tensor/cpu/cpu_backend.cpp.
#include <cmath>
#include <cstdint>
#include <string>

#include "tensor/cuda/cuda_backend_impl.h"
#include "tensor/cuda/device_flags.h"
#include "tensor/cuda/device_math.h"
#include "tessera/error.h"

namespace tessera::cuda {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>((n + kThreads - 1) / kThreads);
}

void require_f32(const Tensor& t, const char* what) {
  check(t.dtype == DType::F32, [&] {
    return std::string("internal: ") + what + " must be f32, got " + dtype_name(t.dtype);
  });
}
void require_same_numel(const Tensor& a, const Tensor& b, const char* what) {
  check(a.numel() == b.numel(), [&] {
    return std::string("internal: ") + what + ": " + shape_str(a.shape) + " vs " +
           shape_str(b.shape);
  });
}

__device__ inline float load_f32(const void* p, DType dt, int64_t i) {
  if (dt == DType::F32) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  return dt == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

__global__ void to_f32_kernel(const void* src, DType dt, float* dst, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) dst[i] = load_f32(src, dt, i);
}

// One block per id; a bad id is recorded in the flag (device_flags.h) and its row left as is.
__global__ void get_rows_kernel(const void* table, DType dt, int64_t n_rows, int64_t width,
                                const int32_t* ids, float* out, int* flag) {
  const int64_t i = blockIdx.x;
  const int32_t id = ids[i];
  if (id < 0 || id >= n_rows) {
    if (threadIdx.x == 0) raise_flag(flag, kFlagRowId, id);
    return;
  }
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x)
    out[i * width + c] = load_f32(table, dt, id * width + c);
}

// One block per row: a fixed-shape tree reduction of x^2, then the scaled row.
__global__ void rms_norm_kernel(const float* x, const float* w, float eps, int64_t D, float* y) {
  __shared__ float part[kThreads];
  const float* xr = x + blockIdx.x * D;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) ss += xr[i] * xr[i];
  part[threadIdx.x] = ss;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = 1.0f / sqrtf(part[0] / static_cast<float>(D) + eps);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) y[blockIdx.x * D + i] = xr[i] * inv * w[i];
}

__global__ void add_kernel(const float* a, const float* b, float* y, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = a[i] + b[i];
}

__device__ inline float silu_of(float g) {
  return g / (1.0f + expf(-g));
}

// y[r, c] = silu(gate[r*gs + c]) * up[r*us + c]: swiglu (strides F) and swiglu_stacked (2F).
__global__ void swiglu_kernel(const float* gate, const float* up, int64_t in_stride, int64_t F,
                              float* y, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t r = i / F, c = i % F;
  y[i] = silu_of(gate[r * in_stride + c]) * up[r * in_stride + c];
}

__global__ void silu_kernel(float* x, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] = silu_of(x[i]);
}

// copy_rows, one block per pair; rows copied as 32-bit words (row bytes a multiple of 4) or
// bytes. Between two buffers one Direct pass; within one, two passes (every read before any
// write): Gather the sources into scratch, then Scatter it.
enum class RowPass { Direct, Gather, Scatter };
template <RowPass kPass>
__global__ void copy_rows_kernel(const uint8_t* src, int64_t src_rows, uint8_t* dst,
                                 int64_t dst_rows, int64_t row_bytes, const int32_t* from,
                                 const int32_t* to, uint8_t* scratch, bool words, int* flag) {
  const int64_t i = blockIdx.x;
  const int32_t f = from[i], t = to[i];
  const bool reads = kPass != RowPass::Scatter, writes = kPass != RowPass::Gather;
  const bool bad_from = reads && (f < 0 || f >= src_rows),
             bad_to = writes && (t < 0 || t >= dst_rows);
  if (bad_from || bad_to) {
    if (threadIdx.x == 0) raise_flag(flag, kFlagRowId, bad_from ? f : t);
    return;
  }
  const uint8_t* a = kPass == RowPass::Scatter ? scratch + i * row_bytes : src + f * row_bytes;
  uint8_t* b = kPass == RowPass::Gather ? scratch + i * row_bytes : dst + t * row_bytes;
  if (words) {  // 4-byte rows at 4-byte aligned bases (the host checked)
    const auto* a4 = reinterpret_cast<const uint32_t*>(a);
    auto* b4 = reinterpret_cast<uint32_t*>(b);
    for (int64_t c = threadIdx.x; c < row_bytes / 4; c += blockDim.x) b4[c] = a4[c];
  } else {
    for (int64_t c = threadIdx.x; c < row_bytes; c += blockDim.x) b[c] = a[c];
  }
}

__global__ void add_scalar_i32_kernel(int32_t* x, int64_t n, int32_t delta) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] += delta;
}

__global__ void gelu_tanh_kernel(float* x, int64_t n, float c) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] = gelu_tanh_value(x[i], c);
}

// y[r, c] = gelu_tanh(gate_up[r, c]) * gate_up[r, F + c] (T5 v1.1's gated GELU).
__global__ void geglu_stacked_kernel(const float* gate_up, int64_t F, float c, float* y,
                                     int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t r = i / F, col = i % F;
  y[i] = gelu_tanh_value(gate_up[r * 2 * F + col], c) * gate_up[r * 2 * F + F + col];
}

}  // namespace

Tensor CudaBackend::to_f32(const Tensor& t) {
  check(t.layout == Layout::RowMajor, "internal: to_f32 of a packed weight");
  check(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16,
        [&] { return std::string("internal: to_f32 of ") + dtype_name(t.dtype); });
  Tensor out = empty(DType::F32, t.shape);
  const int64_t n = t.numel();
  if (n == 0) return out;
  to_f32_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(t.data, t.dtype, out.ptr<float>(), n);
  TESSERA_CUDA_LAUNCHED("to_f32");
  return out;
}

void CudaBackend::get_rows(const Tensor& table, const Tensor& ids, Tensor& out) {
  check(table.layout == Layout::RowMajor, "internal: get_rows of a packed weight");
  require_f32(out, "get_rows output");
  check(ids.dtype == DType::I32, "internal: get_rows ids must be i32");
  check(table.dtype == DType::F32 || table.dtype == DType::F16 || table.dtype == DType::BF16,
        "internal: get_rows table must be f32, f16 or bf16");
  const int64_t n = ids.numel(), width = table.dim(-1), n_rows = table.dim(0);
  check(out.numel() == n * width, "internal: get_rows shape");
  if (n == 0 || width == 0) return;
  // The ids live on the device: a bad one is reported at the next synchronize().
  get_rows_kernel<<<static_cast<unsigned>(n), 128, 0, stream_>>>(
      table.data, table.dtype, n_rows, width, ids.ptr<int32_t>(), out.ptr<float>(), error_flag_);
  TESSERA_CUDA_LAUNCHED("get_rows");
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y) {
  require_f32(x, "rms_norm input");
  require_f32(w, "rms_norm weight");
  const int64_t D = x.dim(-1), rows = D ? x.numel() / D : 0;
  check(w.numel() == D && y.numel() == x.numel(), "internal: rms_norm shapes");
  if (rows == 0) return;
  rms_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream_>>>(
      x.ptr<float>(), w.ptr<float>(), eps, D, y.ptr<float>());
  TESSERA_CUDA_LAUNCHED("rms_norm");
}

void CudaBackend::add(const Tensor& a, const Tensor& b, Tensor& y) {
  require_same_numel(a, b, "add");
  require_same_numel(a, y, "add");
  const int64_t n = a.numel();
  if (n == 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(a.ptr<float>(), b.ptr<float>(),
                                                      y.ptr<float>(), n);
  TESSERA_CUDA_LAUNCHED("add");
}

void CudaBackend::swiglu(const Tensor& gate, const Tensor& up, Tensor& y) {
  require_same_numel(gate, up, "swiglu");
  require_same_numel(gate, y, "swiglu");
  const int64_t n = gate.numel();
  if (n == 0) return;
  swiglu_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(gate.ptr<float>(), up.ptr<float>(), n, n,
                                                         y.ptr<float>(), n);
  TESSERA_CUDA_LAUNCHED("swiglu");
}

void CudaBackend::swiglu_stacked(const Tensor& gate_up, Tensor& y) {
  const int64_t F = y.dim(-1), n = y.numel();
  check(gate_up.dim(-1) == 2 * F && gate_up.numel() == 2 * n,
        "internal: swiglu_stacked needs [rows, 2F] into [rows, F]");
  if (n == 0) return;
  const float* g = gate_up.ptr<float>();
  swiglu_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(g, g + F, 2 * F, F, y.ptr<float>(), n);
  TESSERA_CUDA_LAUNCHED("swiglu_stacked");
}

void CudaBackend::geglu_stacked(const Tensor& gate_up, Tensor& y) {
  const int64_t F = y.dim(-1), n = y.numel();
  check(gate_up.dim(-1) == 2 * F && gate_up.numel() == 2 * n,
        "internal: geglu_stacked needs [rows, 2F] into [rows, F]");
  if (n == 0) return;
  const float c = std::sqrt(2.0f / static_cast<float>(M_PI));
  geglu_stacked_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(gate_up.ptr<float>(), F, c,
                                                                y.ptr<float>(), n);
  TESSERA_CUDA_LAUNCHED("geglu_stacked");
}

void CudaBackend::copy_rows(const Tensor& src, const Tensor& from, Tensor& dst, const Tensor& to) {
  check(src.shape.size() == 2 && dst.shape.size() == 2 && from.dtype == DType::I32 &&
            to.dtype == DType::I32 && from.numel() == to.numel(),
        "internal: copy_rows shapes");
  const int64_t src_rows = src.dim(0), dst_rows = dst.dim(0), n = from.numel();
  if (n == 0) return;
  // As the CPU backend: pairs to copy need rows on both sides, of one size.
  const int64_t row_bytes = src_rows ? static_cast<int64_t>(src.nbytes()) / src_rows : 0;
  check(src_rows > 0 && dst_rows > 0 && static_cast<int64_t>(dst.nbytes()) / dst_rows == row_bytes,
        "internal: copy_rows between rows of different sizes");
  const auto* in = static_cast<const uint8_t*>(src.data);
  auto* out = static_cast<uint8_t*>(dst.data);
  // Words when every row starts 4-byte aligned (a U8 view at an odd offset would fault);
  // scratch from empty() is aligned.
  const bool words = ((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out) |
                       static_cast<uintptr_t>(row_bytes)) &
                      3) == 0;
  const bool overlap = in < out + dst.nbytes() && out < in + src.nbytes();
  const unsigned blocks = static_cast<unsigned>(n);
  if (!overlap) {
    copy_rows_kernel<RowPass::Direct>
        <<<blocks, 128, 0, stream_>>>(in, src_rows, out, dst_rows, row_bytes, from.ptr<int32_t>(),
                                      to.ptr<int32_t>(), nullptr, words, error_flag_);
    TESSERA_CUDA_LAUNCHED("copy_rows");
    return;
  }
  Tensor scratch = empty(DType::U8, {n * row_bytes});
  auto* staged = static_cast<uint8_t*>(scratch.data);
  copy_rows_kernel<RowPass::Gather>
      <<<blocks, 128, 0, stream_>>>(in, src_rows, out, dst_rows, row_bytes, from.ptr<int32_t>(),
                                    to.ptr<int32_t>(), staged, words, error_flag_);
  TESSERA_CUDA_LAUNCHED("copy_rows gather");
  copy_rows_kernel<RowPass::Scatter>
      <<<blocks, 128, 0, stream_>>>(in, src_rows, out, dst_rows, row_bytes, from.ptr<int32_t>(),
                                    to.ptr<int32_t>(), staged, words, error_flag_);
  TESSERA_CUDA_LAUNCHED("copy_rows scatter");
}

void CudaBackend::add_scalar_i32(Tensor& x, int32_t delta) {
  check(x.dtype == DType::I32, "internal: add_scalar_i32 on a non-I32 tensor");
  const int64_t n = x.numel();
  if (n == 0) return;
  add_scalar_i32_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x.ptr<int32_t>(), n, delta);
  TESSERA_CUDA_LAUNCHED("add_scalar_i32");
}

void CudaBackend::gelu_tanh(Tensor& x) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const float c = std::sqrt(2.0f / static_cast<float>(M_PI));
  gelu_tanh_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x.ptr<float>(), n, c);
  TESSERA_CUDA_LAUNCHED("gelu_tanh");
}

void CudaBackend::silu(Tensor& x) {
  const int64_t n = x.numel();
  if (n == 0) return;
  silu_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x.ptr<float>(), n);
  TESSERA_CUDA_LAUNCHED("silu");
}

}  // namespace tessera::cuda
