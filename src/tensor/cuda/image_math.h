// Index and scalar math the CUDA image/MAE kernels share with a CPU twin (tests/
// test_cuda_image_math.cpp checks them against CpuBackend on the host): no CUDA headers needed.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/host_device.h"

namespace tessera::cuda {

// Exact GELU as torch.nn.GELU(): 0.5 x (1 + erf(x / sqrt 2)).
TESSERA_HD inline float gelu_erf_value(float x) {
  return 0.5f * x * (1.0f + erff(x * 0.70710678118f));
}

// Output size of a stride-1 convolution along one axis.
TESSERA_HD inline int64_t conv_out_size(int64_t in, int64_t k, int pad) {
  return in + 2 * pad - k + 1;
}

// One im2col element of one image: row r = (c*kh + i)*kw + j of the [C*kh*kw, Ho*Wo] column
// matrix, column p = oy*Wo + ox. Returns the input's offset in the image [C, H, W], or -1 where
// the window lies in the zero padding.
TESSERA_HD inline int64_t im2col_source(int64_t r, int64_t p, int64_t H, int64_t W, int64_t kh,
                                        int64_t kw, int pad, int64_t Wo) {
  const int64_t j = r % kw, i = (r / kw) % kh, c = r / (kw * kh);
  const int64_t oy = p / Wo, ox = p % Wo;
  const int64_t iy = oy + i - pad, ix = ox + j - pad;
  if (iy < 0 || iy >= H || ix < 0 || ix >= W) return -1;
  return (c * H + iy) * W + ix;
}

// Top-left input offset (in a [H, W] plane) of the floor-mode 2x2 pool window of output o of a
// [H/2, W/2] plane; the window is that offset, +1, +W, +W+1.
TESSERA_HD inline int64_t pool2x2_window(int64_t o, int64_t W) {
  const int64_t Wo = W / 2, i = o / Wo, j = o % Wo;
  return (2 * i) * W + 2 * j;
}
// std::max(std::max(a, b), std::max(c, d)) as the CPU, NaN handling included.
TESSERA_HD inline float max2(float a, float b) {
  return a < b ? b : a;
}
TESSERA_HD inline float max4(float a, float b, float c, float d) {
  return max2(max2(a, b), max2(c, d));
}
// Summed in window order, then scaled, as PyTorch's (and CpuBackend's) kernel does.
TESSERA_HD inline float avg4(float a, float b, float c, float d) {
  return (((a + b) + c) + d) * 0.25f;
}

// Group-norm statistics from a group's sum and centred sum of squares over n elements: the
// scale 1/sqrt(var + eps) with the biased variance, as torch.nn.GroupNorm.
TESSERA_HD inline float group_norm_inv_std(double centred_ss, int64_t n, float eps) {
  return static_cast<float>(1.0 / sqrt(centred_ss / static_cast<double>(n) + eps));
}
TESSERA_HD inline float swish(float v) {
  return v / (1.0f + expf(-v));
}

// Nearest 2x upsampling: the input offset (in a [H, W] plane) of output pixel o of [2H, 2W].
TESSERA_HD inline int64_t upsample2x_source(int64_t o, int64_t W) {
  const int64_t i = o / (2 * W), j = o % (2 * W);
  return (i / 2) * W + j / 2;
}

}  // namespace tessera::cuda
