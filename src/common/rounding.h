// Sums, differences and products rounded one by one, as the CPU rounds them: the build turns
// contraction off for C++ (-ffp-contract=off in CMakeLists.txt; GCC would fuse a * b + c into an
// fma from -O2), nvcc would fuse by default, so TESSERA_HD formulas that must give the CPU's bits
// on a device spell their roundings out with these.
#pragma once

#include "common/host_device.h"

namespace tessera {

TESSERA_HD inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
TESSERA_HD inline float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
TESSERA_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
TESSERA_HD inline double sub_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
TESSERA_HD inline double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

}  // namespace tessera
