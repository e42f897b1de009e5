// Micro-benchmark of the CPU linear kernel (tessera bench --kernels): y = x · w^T at the shapes of
// decoding and verification, timed on weights that stream from memory as in a real forward.
#pragma once

#include <cstdint>
#include <string>

namespace tessera {

struct LinearKernelTiming {
  double seconds = 0;     // one call, best of the repeats
  double gflops = 0;      // 2*M*K*N / seconds
  double weight_gbs = 0;  // weight bytes / seconds
};

// Times y[M,N] = x[M,K] · w[N,K]^T with `dtype` weights ("f32", "f16", "bf16") on the engine's CPU
// threads. The calls cycle through copies of w that together exceed the last-level cache.
LinearKernelTiming time_linear_kernel(int64_t M, int64_t K, int64_t N, const std::string& dtype,
                                      int repeats);

// The linear kernel's instruction-set path in use: "amx", "avx512", "avx2" or "scalar", the default
// for this CPU (the fastest FMA path; never "amx") unless the environment variable
// TESSERA_LINEAR_ISA names another.
std::string linear_kernel_isa();

}  // namespace tessera
