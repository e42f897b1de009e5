// Chains and trees verified on the device (issue 42, item 2): one block per image runs
// verify_rows_on (speculative/verify_rows.h), the CPU's walk with each pass over a row spread over
// the block's threads, so both draw the same uniforms and apply the same formulas (the block's
// sums in a fixed order of their own). Compiles without CUDA headers: the stream is the runtime's
// opaque CUstream_st.
#pragma once

#include <cstdint>

#include "speculative/verify_images.h"

struct CUstream_st;

namespace tessera::speculative {

// The arguments of verify_images, as device pointers (carried may be null). Throws
// tessera::Error on a failed launch. Asynchronous on `stream`.
void launch_verify_images(const float* p, const float* q, const WalkNode* nodes,
                          const RoundImage* images, int n_images, int width, int vocab, bool greedy,
                          float* scratch, DraftVerdict* verdicts, int32_t* carried,
                          CUstream_st* stream);

}  // namespace tessera::speculative
