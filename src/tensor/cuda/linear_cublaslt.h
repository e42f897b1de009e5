// The opt-in cuBLASLt path of CudaBackend::linear for large M (TESSERA_CUDA_GEMM=cublaslt, used
// above 64 rows, f32 weights): faster at prefill sizes, but cuBLASLt picks its algorithm, and so
// the summation order, by shape: an image's result may then depend on its batch (it gives up the
// batch invariance of backend.h's linear contract), so it is never the default.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::cuda {

// Whether the environment asks for it (read once).
bool cublaslt_linear_requested();

// y[M,N] = x[M,K] · w[N,K]^T (+ bias[N]), all f32 row-major, queued on `stream`.
void linear_cublaslt(cublasLtHandle_t lt, cudaStream_t stream, const float* x, int64_t M, int64_t K,
                     const float* w, int64_t N, const float* bias, float* y);

}  // namespace tessera::cuda
