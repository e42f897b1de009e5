// cuBLASLt for linear at large M (opt-in; see linear_cublaslt.h). Row-major y = x · w^T is the
// column-major y^T [N, M] = (w viewed as col-major [K, N])^T · (x viewed as col-major [K, M]).
#include <cstdlib>
#include <cstring>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/linear_cublaslt.h"

namespace tessera::cuda {

bool cublaslt_linear_requested() {
  static const bool on = [] {
    const char* v = std::getenv("TESSERA_CUDA_GEMM");
    return v && std::strcmp(v, "cublaslt") == 0;
  }();
  return on;
}

namespace {
// Destroys the descriptors however the call ends (a failed check throws).
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  ~LtDescs() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};
}  // namespace

void linear_cublaslt(cublasLtHandle_t lt, cudaStream_t stream, const float* x, int64_t M, int64_t K,
                     const float* w, int64_t N, const float* bias, float* y) {
  LtDescs d;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans = CUBLAS_OP_T, no_trans = CUBLAS_OP_N;
  TESSERA_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof trans));
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans,
                                                      sizeof no_trans));
  if (bias) {
    // The bias epilogue adds a vector of C's row count (N) to every column: bias per output.
    const cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
    TESSERA_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                        &bias, sizeof bias));
  }
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.a, CUDA_R_32F, K, N, K));
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.b, CUDA_R_32F, K, M, K));
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.c, CUDA_R_32F, N, M, N));
  const float one = 1.0f, zero = 0.0f;
  // No algorithm given: cuBLASLt runs its own heuristic; no workspace.
  TESSERA_CUBLAS_CHECK(cublasLtMatmul(lt, d.op, &one, w, d.a, x, d.b, &zero, y, d.c, y, d.c,
                                      nullptr, nullptr, 0, stream));
}

}  // namespace tessera::cuda
