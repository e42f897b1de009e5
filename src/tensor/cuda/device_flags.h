// Errors kernels find in device-resident inputs (ids, positions, KV slots), which the host
// cannot check without a round trip: the first one is recorded in a two-int device flag
// {code, value} and CudaBackend::synchronize() throws it as an Error.
#pragma once

namespace tessera::cuda {

enum FlagCode : int {
  kFlagNone = 0,
  kFlagRowId = 1,         // get_rows: value = the id
  kFlagRopePosition = 2,  // rope: value = the position
  kFlagKvSequence = 3,    // kv_store / attention: value = the cache sequence id
  kFlagKvFull = 4,        // kv_store / attention: value = the slots needed
};

#if defined(__CUDACC__)
__device__ inline void raise_flag(int* flag, int code, int value) {
  if (atomicCAS(flag, 0, code) == 0) flag[1] = value;  // the first error wins
}
#endif

}  // namespace tessera::cuda
