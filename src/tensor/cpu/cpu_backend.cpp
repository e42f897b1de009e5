// CPU backend: memory and element-wise ops. Linear, attention and image-decoder kernels live in
// their own files next to this one.
#include "tensor/cpu/cpu_backend.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/thread_pool.h"
#include "common/vector_math.h"
#include "tensor/cpu/host_memory.h"
#include "tensor/cpu/linear_panels.h"
#include "tensor/cuda/device_math.h"
#include "tessera/error.h"

extern "C" void openblas_set_num_threads(int);

namespace tessera {

namespace {
void require_f32(const Tensor& t, const char* what) {
  check(t.dtype == DType::F32, [&] {
    return std::string("internal: ") + what + " must be f32, got " + dtype_name(t.dtype);
  });
}
// Only linear reads packed weights (Backend::pack_linear_weight).
void require_row_major(const Tensor& t, const char* what) {
  check(t.layout == Layout::RowMajor,
        [&] { return std::string("internal: ") + what + " of a packed weight"; });
}
}  // namespace

void cpu::require_same_numel(const Tensor& a, const Tensor& b, const char* what) {
  check(a.numel() == b.numel(), [&] {
    return std::string("internal: ") + what + ": " + shape_str(a.shape) + " vs " +
           shape_str(b.shape);
  });
}

CpuBackend::CpuBackend() {
  // OpenBLAS runs inside the pool's threads (conv_kernels.cpp), never with its own pool.
  openblas_set_num_threads(1);
  set_threads(available_cpus());
}

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
}

int CpuBackend::set_threads(int n) {
  // More threads than CPUs only adds contention (each region waits for its slowest thread):
  // clamp to the CPUs we have.
  threads_ = std::clamp(n, 1, available_cpus());
  cpu_pool().set_threads(threads_);
  return threads_;
}

int64_t CpuBackend::available_memory() const {
  return available_host_memory();
}

Tensor CpuBackend::empty(DType dtype, Shape shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.backend = this;
  const size_t bytes = (t.nbytes() + 63) / 64 * 64;
  // Large requests are checked first: with overcommit, malloc would succeed and the first touch
  // of the pages would bring the OOM killer instead of an error.
  if (bytes >= (size_t{256} << 20)) {
    const int64_t avail = available_memory();
    check(static_cast<int64_t>(bytes) <= avail,
          "out of memory: a " + std::to_string(bytes >> 20) + " MiB tensor " + shape_str(t.shape) +
              " does not fit in the " + std::to_string(avail >> 20) + " MiB available");
  }
  void* p = bytes ? std::aligned_alloc(64, bytes) : nullptr;
  check(bytes == 0 || p != nullptr, "out of memory allocating " + std::to_string(bytes) + " bytes");
  t.data = p;
  t.owner = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  return t;
}

Tensor CpuBackend::zeros(DType dtype, Shape shape) {
  Tensor t = empty(dtype, std::move(shape));
  if (t.nbytes()) std::memset(t.data, 0, t.nbytes());
  return t;
}

Tensor CpuBackend::upload(const void* host, DType dtype, Shape shape) {
  Tensor t = empty(dtype, std::move(shape));
  if (t.nbytes()) std::memcpy(t.data, host, t.nbytes());
  return t;
}

void CpuBackend::download(const Tensor& t, void* host) {
  require_row_major(t, "download");
  if (t.nbytes()) std::memcpy(host, t.data, t.nbytes());
}

void CpuBackend::upload_into(const void* host, Tensor& dst) {
  if (dst.nbytes()) std::memcpy(dst.data, host, dst.nbytes());
}

Tensor CpuBackend::adopt_host(const void* host, DType dtype, Shape shape,
                              std::shared_ptr<void> owner) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = const_cast<void*>(host);
  t.owner = std::move(owner);
  t.backend = this;
  return t;
}

Tensor CpuBackend::to_f32(const Tensor& t) {
  require_row_major(t, "to_f32");
  Tensor out = empty(DType::F32, t.shape);
  convert_to_f32(t.dtype, t.data, out.ptr<float>(), static_cast<size_t>(t.numel()));
  return out;
}

void CpuBackend::copy(const Tensor& src, Tensor& dst) {
  require_row_major(src, "copy");
  check(src.dtype == dst.dtype && src.numel() == dst.numel(), "internal: copy mismatch");
  if (src.nbytes()) std::memmove(dst.data, src.data, src.nbytes());
}

void CpuBackend::linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  require_f32(x, "linear input");
  require_f32(y, "linear output");
  const int64_t K = w.dim(-1), N = w.dim(0);
  check(x.dim(-1) == K && y.dim(-1) == N && x.numel() / K == y.numel() / N, [&] {
    return "internal: linear shapes x" + shape_str(x.shape) + " w" + shape_str(w.shape) + " y" +
           shape_str(y.shape);
  });
  check(!bias || bias->dtype == DType::F32, "internal: linear bias must be f32");
  const auto run = w.layout == Layout::Packed ? cpu::linear_panels : cpu::linear;
  run(x.ptr<float>(), x.numel() / K, K, w.data, w.dtype, N, bias ? bias->ptr<float>() : nullptr,
      y.ptr<float>());
}

void CpuBackend::linear_swiglu(const Tensor& x, const Tensor& w13, Tensor& gate_up, Tensor& y) {
  require_f32(x, "linear_swiglu input");
  require_f32(gate_up, "linear_swiglu scratch");
  require_f32(y, "linear_swiglu output");
  const int64_t K = w13.dim(-1), N = w13.dim(0), F = N / 2,
                rows = x.numel() / std::max<int64_t>(K, 1);
  check(N % 2 == 0 && x.dim(-1) == K && gate_up.numel() == rows * N && y.numel() == rows * F, [&] {
    return "internal: linear_swiglu shapes x" + shape_str(x.shape) + " w13" + shape_str(w13.shape) +
           " y" + shape_str(y.shape);
  });
  if (w13.layout != Layout::Packed ||
      !cpu::linear_swiglu_panels(x.ptr<float>(), rows, K, w13.data, w13.dtype, F,
                                 gate_up.ptr<float>(), y.ptr<float>()))
    Backend::linear_swiglu(x, w13, gate_up, y);
}

bool CpuBackend::linear_rounds_bf16_activations() const {
  return std::string(cpu::linear_isa()) == "amx";
}

Tensor CpuBackend::pack_linear_weight(const Tensor& w) {
  check(w.ndim() == 2 && w.layout == Layout::RowMajor &&
            (w.dtype == DType::F32 || w.dtype == DType::F16 || w.dtype == DType::BF16),
        "internal: pack_linear_weight takes a row-major f32/f16/bf16 matrix, got " +
            std::string(dtype_name(w.dtype)) + " " + shape_str(w.shape));
  const int64_t N = w.dim(0), K = w.dim(1);
  // Sized as an [N rounded up to whole panels, K] tensor, so the allocation checks apply.
  Tensor p = empty(w.dtype, {cpu::panel_count(N) * cpu::kPanelRows, cpu::panel_depth(w.dtype, K)});
  cpu::pack_panels(w.data, w.dtype, N, K, p.data);
  p.shape = w.shape;
  p.layout = Layout::Packed;
  return p;
}

void CpuBackend::get_rows(const Tensor& table, const Tensor& id_tensor, Tensor& out) {
  require_row_major(table, "get_rows");
  require_f32(out, "get_rows output");
  check(id_tensor.dtype == DType::I32, "internal: get_rows ids must be i32");
  const int32_t* ids = id_tensor.ptr<int32_t>();
  const int64_t n = id_tensor.numel();
  const int64_t width = table.dim(-1), n_rows = table.dim(0);
  check(out.numel() == n * width, "internal: get_rows shape");
  const size_t es = dtype_size(table.dtype);
  for (int64_t i = 0; i < n; ++i) {
    check(ids[i] >= 0 && ids[i] < n_rows, [&] {
      return "internal: row id " + std::to_string(ids[i]) + " out of range [0, " +
             std::to_string(n_rows) + ")";
    });
    convert_to_f32(table.dtype, static_cast<const char*>(table.data) + ids[i] * width * es,
                   out.ptr<float>() + i * width, static_cast<size_t>(width));
  }
}

void CpuBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y) {
  require_f32(x, "rms_norm input");
  require_f32(w, "rms_norm weight");
  const int64_t D = x.dim(-1), rows = x.numel() / D;
  const float* xp = x.ptr<float>();
  const float* wp = w.ptr<float>();
  float* yp = y.ptr<float>();
  parallel_for(
      "rms_norm", rows,
      [&](int64_t r) {
        const float* xr = xp + r * D;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int64_t i = 0; i < D; ++i) ss += xr[i] * xr[i];
        const float inv = 1.0f / std::sqrt(ss / static_cast<float>(D) + eps);
        for (int64_t i = 0; i < D; ++i) yp[r * D + i] = xr[i] * inv * wp[i];
      },
      rows > 8);
}

void CpuBackend::add(const Tensor& a, const Tensor& b, Tensor& y) {
  cpu::require_same_numel(a, b, "add");
  cpu::require_same_numel(a, y, "add");
  const float* ap = a.ptr<float>();
  const float* bp = b.ptr<float>();
  float* yp = y.ptr<float>();
  const int64_t n = a.numel();
  parallel_for(
      "add", n, [&](int64_t i) { yp[i] = ap[i] + bp[i]; }, n > 65536);
}

// silu(g) * u for one block through libmvec's SIMD expf (vector_math.h); glibc's scalar expf had
// 1-2.5% of a verification run's samples in `perf`.
[[gnu::noinline]] void cpu::swiglu_block(const float* g, const float* u, float* y) {
#pragma omp simd
  for (int64_t i = 0; i < kSimdBlock; ++i) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

namespace {
using cpu::swiglu_block;

[[gnu::noinline]] void silu_block(const float* x, const float*, float* y) {
#pragma omp simd
  for (int64_t i = 0; i < kSimdBlock; ++i) y[i] = x[i] / (1.0f + expf(-x[i]));
}
}  // namespace

void CpuBackend::swiglu(const Tensor& gate, const Tensor& up, Tensor& y) {
  cpu::require_same_numel(gate, up, "swiglu");
  // Parallel from a decode step's size up (2 rows x ffn_dim): the exp makes it worth a fork.
  simd_blocks("swiglu", swiglu_block, gate.ptr<float>(), up.ptr<float>(), y.ptr<float>(),
              gate.numel(), gate.numel() >= 4096);
}

void CpuBackend::swiglu_stacked(const Tensor& gate_up, Tensor& y) {
  const int64_t F = y.dim(-1), rows = F ? y.numel() / F : 0;
  check(gate_up.dim(-1) == 2 * F && gate_up.numel() == 2 * y.numel(),
        "internal: swiglu_stacked needs [rows, 2F] into [rows, F]");
  const float* g = gate_up.ptr<float>();
  float* out = y.ptr<float>();
  const int64_t blocks = F / kSimdBlock;
  if (blocks * kSimdBlock == F) {
    // Whole blocks in every row: one loop over (row, block), parallel from a decode step's size up
    // (as swiglu).
    parallel_for(
        "swiglu", rows * blocks,
        [&](int64_t i) {
          const int64_t r = i / blocks, b = (i % blocks) * kSimdBlock;
          swiglu_block(g + r * 2 * F + b, g + r * 2 * F + F + b, out + r * F + b);
        },
        rows * F >= 4096);
    return;
  }
  for (int64_t r = 0; r < rows; ++r)  // a tail per row: simd_blocks pads it
    simd_blocks("swiglu", swiglu_block, g + r * 2 * F, g + r * 2 * F + F, out + r * F, F, false);
}

void CpuBackend::copy_rows(const Tensor& src, const Tensor& from, Tensor& dst, const Tensor& to) {
  check(src.shape.size() == 2 && dst.shape.size() == 2 && from.dtype == DType::I32 &&
            to.dtype == DType::I32 && from.numel() == to.numel(),
        "internal: copy_rows shapes");
  const int64_t src_rows = src.dim(0), dst_rows = dst.dim(0), n = from.numel();
  const size_t row_bytes = src_rows ? src.nbytes() / static_cast<size_t>(src_rows) : 0;
  check(n == 0 || (src_rows > 0 && dst_rows > 0 &&
                   dst.nbytes() / static_cast<size_t>(dst_rows) == row_bytes),
        "internal: copy_rows between rows of different sizes");
  const int32_t* f = from.ptr<int32_t>();
  const int32_t* d = to.ptr<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    check(f[i] >= 0 && f[i] < src_rows && d[i] >= 0 && d[i] < dst_rows,
          "internal: copy_rows row out of range");
  // Every source read before any destination is written.
  std::vector<uint8_t> staged(static_cast<size_t>(n) * row_bytes);
  const auto* in = static_cast<const uint8_t*>(src.data);
  auto* out = static_cast<uint8_t*>(dst.data);
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(staged.data() + i * row_bytes, in + f[i] * row_bytes, row_bytes);
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(out + d[i] * row_bytes, staged.data() + i * row_bytes, row_bytes);
}

void CpuBackend::add_scalar_i32(Tensor& x, int32_t delta) {
  check(x.dtype == DType::I32, "internal: add_scalar_i32 on a non-I32 tensor");
  int32_t* p = x.ptr<int32_t>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] += delta;
}

void CpuBackend::gelu_tanh(Tensor& x) {
  float* p = x.ptr<float>();
  const int64_t n = x.numel();
  const float c = std::sqrt(2.0f / static_cast<float>(M_PI));
  parallel_for(
      "gelu_tanh", n, [&](int64_t i) { p[i] = cuda::gelu_tanh_value(p[i], c); }, n > 65536);
}

void CpuBackend::geglu_stacked(const Tensor& gate_up, Tensor& y) {
  const int64_t F = y.dim(-1), rows = F ? y.numel() / F : 0;
  check(gate_up.dim(-1) == 2 * F && gate_up.numel() == 2 * y.numel(),
        "internal: geglu_stacked needs [rows, 2F] into [rows, F]");
  const float* g = gate_up.ptr<float>();
  float* out = y.ptr<float>();
  const float c = std::sqrt(2.0f / static_cast<float>(M_PI));
  parallel_for(
      "geglu", rows * F,
      [&](int64_t i) {
        const int64_t r = i / F, col = i % F;
        out[i] = cuda::gelu_tanh_value(g[r * 2 * F + col], c) * g[r * 2 * F + F + col];
      },
      rows * F > 65536);
}

void CpuBackend::silu(Tensor& x) {
  // In place, in SIMD blocks as SwiGLU (the diffusion head's adaLN inputs).
  simd_blocks("silu", silu_block, x.ptr<float>(), nullptr, x.ptr<float>(), x.numel(),
              x.numel() >= 4096);
}

}  // namespace tessera
