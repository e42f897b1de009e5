// Chains verified on the device (issue 42, item 2): one thread per image runs verify_chain
// (speculative/verify_chain.h), the CPU's walk, so both draw the same uniforms and apply the same
// formulas. Compiles without CUDA headers: the stream is the runtime's opaque CUstream_st.
#pragma once

#include <cstdint>

#include "speculative/verify_chains.h"

struct CUstream_st;

namespace tessera::speculative {

// The arguments of verify_chains, as device pointers. Throws tessera::Error on a failed
// launch. Asynchronous on `stream`.
void launch_verify_chains(const float* p, const float* q, const int32_t* tokens,
                          const ChainRoundImage* images, int n_images, int width, int vocab,
                          bool greedy, float* scratch, ChainVerdict* verdicts, CUstream_st* stream);

}  // namespace tessera::speculative
