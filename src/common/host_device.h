// TESSERA_HD marks functions that nvcc compiles for both host and device (a no-op for g++).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TESSERA_HD __host__ __device__
#else
#define TESSERA_HD
#endif

namespace tessera {

// The float whose bits are u (an intrinsic on the device, memcpy on the host).
TESSERA_HD inline float float_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

}  // namespace tessera
