// glibc's libmvec (>= 2.35) has SIMD variants of expf and erff under the vector function ABI;
// declaring them `omp declare simd` makes the compiler call them in `omp simd` loops (a scalar
// expf or erff costs ~20 ns). A SIMD variant and the scalar function may differ in the last ulp,
// so a caller passes every element through the same SIMD loop (simd_blocks below: tails padded
// to whole blocks): a value's result must not depend on its position in a tensor (batch
// invariance).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/thread_pool.h"

#if TESSERA_HAVE_LIBMVEC
extern "C" {
#pragma omp declare simd notinbranch
float expf(float);
#pragma omp declare simd notinbranch
float erff(float);
}
#endif

namespace tessera {

constexpr int64_t kSimdBlock = 16;

// One whole block: out[i] = f(a[i], b[i]) for i < kSimdBlock (b may be unused; out may be a).
// It must be [[gnu::noinline]], so that the blocks and the tail run one copy of its code.
using SimdBlockFn = void (*)(const float* a, const float* b, float* out);

// Runs `block` over n elements in whole blocks, the last partial block copied into zero-padded
// buffers first: every element goes through the same SIMD code, whatever its position.
inline void simd_blocks(const char* name, SimdBlockFn block, const float* a, const float* b,
                        float* out, int64_t n, bool parallel) {
  const int64_t blocks = n / kSimdBlock, done = blocks * kSimdBlock;
  parallel_for(
      name, blocks,
      [&](int64_t i) {
        block(a + i * kSimdBlock, b ? b + i * kSimdBlock : nullptr, out + i * kSimdBlock);
      },
      parallel);
  if (n == done) return;
  float at[kSimdBlock] = {}, bt[kSimdBlock] = {}, ot[kSimdBlock];
  std::copy(a + done, a + n, at);
  if (b) std::copy(b + done, b + n, bt);
  block(at, bt, ot);
  std::copy(ot, ot + (n - done), out + done);
}

}  // namespace tessera
