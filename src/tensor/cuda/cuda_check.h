// Error checks for CUDA runtime and cuBLAS(Lt) calls: a failed call throws tessera::Error naming
// the call and the driver's message (the CLI prints it as one line and exits non-zero).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "tessera/error.h"

namespace tessera::cuda {

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* what) {
  throw Error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}
[[noreturn]] inline void throw_cublas(cublasStatus_t s, const char* what) {
  throw Error(std::string("cuBLAS: ") + what + ": " + cublasGetStatusString(s));
}

}  // namespace tessera::cuda

#define TESSERA_CUDA_CHECK(expr)                                                  \
  do {                                                                            \
    const cudaError_t tessera_cuda_err_ = (expr);                                 \
    if (tessera_cuda_err_ != cudaSuccess) ::tessera::cuda::throw_cuda(tessera_cuda_err_, #expr); \
  } while (0)

#define TESSERA_CUBLAS_CHECK(expr)                                                      \
  do {                                                                                  \
    const cublasStatus_t tessera_cublas_st_ = (expr);                                   \
    if (tessera_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                    \
      ::tessera::cuda::throw_cublas(tessera_cublas_st_, #expr);                         \
  } while (0)

// After a kernel launch: a bad configuration is reported at once (launches are asynchronous).
#define TESSERA_CUDA_LAUNCHED(name) TESSERA_CUDA_CHECK(cudaGetLastError())
