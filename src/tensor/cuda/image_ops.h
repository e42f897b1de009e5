// The CUDA kernels of the MAE / diffusion-head, image-decoder and classifier ops (Backend's
// "MAE / diffusion-head", "image decoder" and "classifier" sections): each takes the backend's
// stream and does what the Backend method of the same name documents, with the same checks of
// shapes as the CPU backend (src/tensor/cpu/). All tensors are f32 device tensors unless said.
// CudaBackend (cuda_backend.cu) forwards to these.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace tessera::cuda {

// ---- MAE / diffusion head ----
void layer_norm(cudaStream_t s, const Tensor& x, const Tensor* gamma, const Tensor* beta, float eps,
                Tensor& y);
void gelu_erf(cudaStream_t s, Tensor& x);
void self_attention(cudaStream_t s, const Tensor& qkv, int batch, int n_head, int head_dim,
                    Tensor& out, const SelfAttentionExtras& extras);
void modulate(cudaStream_t s, const Tensor& x, const Tensor& shift, const Tensor& scale, Tensor& y);
void add_gated(cudaStream_t s, Tensor& h, const Tensor& gate, const Tensor& u);
void add_rows_broadcast(cudaStream_t s, Tensor& x, const Tensor& table);

// ---- image decoder (NCHW) ----
void conv2d(cudaStream_t s, cublasHandle_t blas, const Tensor& x, const Tensor& w,
            const Tensor& bias, int pad, Tensor& y);
void group_norm(cudaStream_t s, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                int groups, float eps, bool swish, Tensor& y);
void upsample_nearest2x(cudaStream_t s, const Tensor& x, Tensor& y);
void batched_matmul(cudaStream_t s, cublasHandle_t blas, const Tensor& a, bool trans_a,
                    const Tensor& b, bool trans_b, float alpha, Tensor& c);
void softmax_rows(cudaStream_t s, Tensor& x);
void l2_normalize_rows(cudaStream_t s, Tensor& x, float eps);
void transpose_last2(cudaStream_t s, const Tensor& x, Tensor& y);

// ---- classifier ----
void relu(cudaStream_t s, Tensor& x);
void max_pool2x2(cudaStream_t s, const Tensor& x, Tensor& y);
void avg_pool2x2(cudaStream_t s, const Tensor& x, Tensor& y);

}  // namespace tessera::cuda
