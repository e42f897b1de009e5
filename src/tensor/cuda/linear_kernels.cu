// linear on the device: y[M,N] = x[M,K] · w[N,K]^T (+ bias), f32 activations, f32/f16/bf16
// weights. One kernel for every M, so that each output's summation order depends on K only
// (batch invariance, backend.h): a warp owns one weight row n; lane l owns the 8 consecutive
// k of each 256-wide K tile at l*8, accumulates them in k order with f32 FMAs, and the 32 lane
// sums are combined by a fixed butterfly. Rows of x are processed in chunks of up to 64, staged
// in shared memory per K tile, so each weight is read once per chunk: for decode and
// verification (M <= 64) once in all, which is what bounds these steps (memory bandwidth); up to
// 16 rows, linear_small_kernel computes the same sums with more loads in flight. Next step, not
// written yet because it cannot be checked without a GPU: a tensor-core (MMA) path for large M with
// the same fixed K order.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tensor/cuda/cuda_backend_impl.h"
#include "tensor/cuda/device_math.h"
#include "tensor/cuda/linear_cublaslt.h"
#include "tessera/error.h"

namespace tessera::cuda {

namespace {

constexpr int kWarps = 8;       // weight rows per block
constexpr int kChunkRows = 64;  // rows of x per block
constexpr int kTile = 256;      // K per tile: 32 lanes x 8
constexpr int kPerLane = 8;

// Eight weights from k (all eight in range: the vector path checks K % 8 == 0 and alignment).
template <DType kW>
__device__ inline void load8(const void* w, int64_t at, float out[kPerLane]) {
  if constexpr (kW == DType::F32) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(w) + at);
    const float4 a = p[0], b = p[1];
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  } else {
    // One 16-byte load of eight 16-bit weights, converted in registers.
    const uint4 v = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(w) + at);
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint16_t lo = static_cast<uint16_t>(words[i] & 0xffffu),
                     hi = static_cast<uint16_t>(words[i] >> 16);
      out[2 * i] = kW == DType::BF16 ? bf16_to_f32(lo) : f16_to_f32(lo);
      out[2 * i + 1] = kW == DType::BF16 ? bf16_to_f32(hi) : f16_to_f32(hi);
    }
  }
}

template <DType kW>
__device__ inline float load1(const void* w, int64_t at) {
  if constexpr (kW == DType::F32) return static_cast<const float*>(w)[at];
  const uint16_t h = static_cast<const uint16_t*>(w)[at];
  return kW == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

template <DType kW, bool kVector>
__global__ void __launch_bounds__(kWarps * 32)
    linear_kernel(const float* x, int64_t M, int64_t K, const void* w, int64_t N, const float* bias,
                  float* y) {
  extern __shared__ float xs[];  // [mc][kTile]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kChunkRows;
  const int mc = static_cast<int>(M - m0 < kChunkRows ? M - m0 : kChunkRows);
  float acc[kChunkRows];
#pragma unroll
  for (int m = 0; m < kChunkRows; ++m) acc[m] = 0.0f;
  for (int64_t kt = 0; kt < K; kt += kTile) {
    __syncthreads();  // the previous tile is consumed
    for (int i = threadIdx.x; i < mc * kTile; i += blockDim.x) {
      const int m = i / kTile, c = i % kTile;
      xs[i] = kt + c < K ? x[(m0 + m) * K + kt + c] : 0.0f;
    }
    __syncthreads();
    const int64_t k = kt + lane * kPerLane;
    if (n >= N || k >= K) continue;
    float wv[kPerLane];
    const int64_t at = n * K + k;
    if constexpr (kVector) {
      load8<kW>(w, at, wv);
    } else {
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) wv[j] = k + j < K ? load1<kW>(w, at + j) : 0.0f;
    }
    const int valid = K - k < kPerLane ? static_cast<int>(K - k) : kPerLane;
#pragma unroll
    for (int m = 0; m < kChunkRows; ++m) {
      if (m >= mc) break;
      const float* xr = xs + m * kTile + lane * kPerLane;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j)
        if (j < valid) acc[m] = fmaf(xr[j], wv[j], acc[m]);
    }
  }
  if (n >= N) return;
#pragma unroll
  for (int m = 0; m < kChunkRows; ++m) {
    if (m >= mc) break;
    float v = acc[m];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == 0) y[(m0 + m) * N + n] = bias ? v + bias[n] : v;
  }
}

// Decode and verification (M <= 16 rows, K % 8 == 0, aligned): the same sums in the same order
// as linear_kernel (each lane's 8 k of each tile, tile after tile, then the butterfly), so an
// output's bits do not depend on which kernel ran. Without linear_kernel's shared-memory staging
// and block barriers: each lane issues its weight loads for kAhead tiles before any FMA and
// reads x from L1, so loads are in flight together (linear_kernel waited on one tile at a time
// and reached 7% of the H200's bandwidth on GPT-XL).
constexpr int kAhead = 4;

template <DType kW, int kRows>
__global__ void __launch_bounds__(kWarps * 32)
    linear_small_kernel(const float* __restrict__ x, int M, int64_t K, const void* __restrict__ w,
                        int64_t N, const float* __restrict__ bias, float* __restrict__ y) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (n >= N) return;  // whole warps leave: no barrier below
  float acc[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) acc[m] = 0.0f;
  for (int64_t kt = 0; kt < K; kt += kAhead * kTile) {
    float wv[kAhead][kPerLane];
#pragma unroll
    for (int t = 0; t < kAhead; ++t) {
      const int64_t k = kt + t * kTile + lane * kPerLane;
      if (k < K) load8<kW>(w, n * K + k, wv[t]);
    }
#pragma unroll
    for (int t = 0; t < kAhead; ++t) {
      const int64_t k = kt + t * kTile + lane * kPerLane;
      if (k >= K) break;  // later tiles start further on
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        if (m >= M) break;
        const float4* xp = reinterpret_cast<const float4*>(x + m * K + k);
        const float4 a = __ldg(xp), b = __ldg(xp + 1);
        const float xv[kPerLane] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) acc[m] = fmaf(xv[j], wv[t][j], acc[m]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    if (m >= M) break;
    float v = acc[m];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == 0) y[m * N + n] = bias ? v + bias[n] : v;
  }
}

template <DType kW, int kRows>
void launch_small(cudaStream_t s, const float* x, int64_t M, int64_t K, const void* w, int64_t N,
                  const float* bias, float* y) {
  const dim3 grid(static_cast<unsigned>((N + kWarps - 1) / kWarps));
  linear_small_kernel<kW, kRows>
      <<<grid, kWarps * 32, 0, s>>>(x, static_cast<int>(M), K, w, N, bias, y);
  TESSERA_CUDA_LAUNCHED("linear_small");
}

template <DType kW, bool kVector>
void launch(cudaStream_t s, const float* x, int64_t M, int64_t K, const void* w, int64_t N,
            const float* bias, float* y) {
  const int mc = static_cast<int>(M < kChunkRows ? M : kChunkRows);
  const size_t smem = static_cast<size_t>(mc) * kTile * sizeof(float);
  // Up to 64 KiB of x: above the 48 KiB a launch gets without asking.
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(linear_kernel<kW, kVector>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kChunkRows * kTile * sizeof(float))));
  const dim3 grid(static_cast<unsigned>((N + kWarps - 1) / kWarps),
                  static_cast<unsigned>((M + kChunkRows - 1) / kChunkRows));
  linear_kernel<kW, kVector><<<grid, kWarps * 32, smem, s>>>(x, M, K, w, N, bias, y);
  TESSERA_CUDA_LAUNCHED("linear");
}

template <DType kW>
void launch_dtype(cudaStream_t s, const float* x, int64_t M, int64_t K, const void* w, int64_t N,
                  const float* bias, float* y) {
  // 16-byte weight loads need every row start 16-byte aligned: K a multiple of 8 elements
  // (f32 rows then start at multiples of 32 bytes, 16-bit ones at 16) and an aligned base.
  const bool vec = K % kPerLane == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
  // The small-M kernel reads x rows as float4 pairs: x's base 16-byte aligned too.
  if (vec && M <= 16 && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    if (M <= 1) return launch_small<kW, 1>(s, x, M, K, w, N, bias, y);
    if (M <= 2) return launch_small<kW, 2>(s, x, M, K, w, N, bias, y);
    if (M <= 4) return launch_small<kW, 4>(s, x, M, K, w, N, bias, y);
    if (M <= 8) return launch_small<kW, 8>(s, x, M, K, w, N, bias, y);
    return launch_small<kW, 16>(s, x, M, K, w, N, bias, y);
  }
  if (vec)
    launch<kW, true>(s, x, M, K, w, N, bias, y);
  else
    launch<kW, false>(s, x, M, K, w, N, bias, y);
}

}  // namespace

void CudaBackend::linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  check(x.dtype == DType::F32, [&] {
    return std::string("internal: linear input must be f32, got ") + dtype_name(x.dtype);
  });
  check(y.dtype == DType::F32, [&] {
    return std::string("internal: linear output must be f32, got ") + dtype_name(y.dtype);
  });
  check(w.layout == Layout::RowMajor, "internal: linear of a packed weight (CUDA packs none)");
  const int64_t K = w.dim(-1), N = w.dim(0);
  check(x.dim(-1) == K && y.dim(-1) == N && x.numel() / K == y.numel() / N, [&] {
    return "internal: linear shapes x" + shape_str(x.shape) + " w" + shape_str(w.shape) + " y" +
           shape_str(y.shape);
  });
  check(!bias || bias->dtype == DType::F32, "internal: linear bias must be f32");
  const int64_t M = K ? x.numel() / K : 0;
  if (M == 0 || N == 0) return;  // K = 0 runs the kernel: empty sums, y = bias or 0
  const float* b = bias ? bias->ptr<float>() : nullptr;
  if (M > kChunkRows && w.dtype == DType::F32 && cublaslt_linear_requested())
    return linear_cublaslt(blas_lt_, stream_, x.ptr<float>(), M, K, w.ptr<float>(), N, b,
                           y.ptr<float>());
  switch (w.dtype) {
    case DType::F32:
      return launch_dtype<DType::F32>(stream_, x.ptr<float>(), M, K, w.data, N, b, y.ptr<float>());
    case DType::F16:
      return launch_dtype<DType::F16>(stream_, x.ptr<float>(), M, K, w.data, N, b, y.ptr<float>());
    case DType::BF16:
      return launch_dtype<DType::BF16>(stream_, x.ptr<float>(), M, K, w.data, N, b, y.ptr<float>());
    default:
      throw Error(std::string("internal: linear weight must be f32, f16 or bf16, got ") +
                  dtype_name(w.dtype));
  }
}

}  // namespace tessera::cuda
