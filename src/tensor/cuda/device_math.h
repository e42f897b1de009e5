// Scalar math the CUDA kernels share with a CPU unit test (tests/test_cuda_device_math.cpp):
// 16-bit float decoding, GELU's tanh form, the rope pair rotation and the merge of two
// online-softmax partials (split-key attention). Plain C++ on the host, __host__ __device__ under
// nvcc.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/host_device.h"

namespace tessera::cuda {

TESSERA_HD inline float bits_to_f32(uint32_t u) {
  return float_from_bits(u);
}

// bf16 is the high half of an f32.
TESSERA_HD inline float bf16_to_f32(uint16_t h) {
  return bits_to_f32(static_cast<uint32_t>(h) << 16);
}

// IEEE half to f32, subnormals, infinities and NaN included (exact: every half is an f32).
TESSERA_HD inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (man << 13));
  if (exp != 0) return bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
  // Subnormal: man * 2^-24, exact in f32.
  const float v = static_cast<float>(man) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

// GELU's tanh form (LlamaGen's caption MLP; HF's gelu_new, T5 v1.1's gated FFN), with
// c = sqrt(2/pi) as the backend computes it once.
TESSERA_HD inline float gelu_tanh_value(float v, float c) {
  return 0.5f * v * (1.0f + tanhf(c * (v + 0.044715f * v * v * v)));
}

// One interleaved rope pair (x0, x1) rotated by (cos, sin), as the CPU rope does.
TESSERA_HD inline void rope_pair(float& x0, float& x1, float c, float s) {
  const float a = x0, b = x1;
  x0 = a * c - b * s;
  x1 = b * c + a * s;  // the CPU rope's order
}

// The running state of a softmax over a slice of keys: max logit m, sum l of exp(logit - m);
// the weighted value accumulator is scaled alongside by the factors merge() returns.
struct SoftmaxPartial {
  float m;  // -INFINITY for a slice with no visible key
  float l;
};

// Merges partials a and b: the result, and the factors by which a's and b's value sums are
// scaled before they are added. An empty slice (m = -inf) contributes factor 0, never NaN.
struct SoftmaxMerge {
  SoftmaxPartial r;
  float scale_a, scale_b;
};
TESSERA_HD inline SoftmaxMerge softmax_merge(SoftmaxPartial a, SoftmaxPartial b) {
  SoftmaxMerge out;
  const float m = a.m > b.m ? a.m : b.m;
  if (m == -INFINITY) return {{-INFINITY, 0.0f}, 0.0f, 0.0f};
  out.scale_a = a.m == -INFINITY ? 0.0f : expf(a.m - m);
  out.scale_b = b.m == -INFINITY ? 0.0f : expf(b.m - m);
  out.r = {m, a.l * out.scale_a + b.l * out.scale_b};
  return out;
}

}  // namespace tessera::cuda
