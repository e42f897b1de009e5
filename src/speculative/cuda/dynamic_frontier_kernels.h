// EAGLE-2's dynamic tree on a GPU (speculative/dynamic_frontier.h): a block per image runs the
// shared functions, the serial parts on thread 0, the places and mask columns across the block.
// Compiles without CUDA headers: the stream is the runtime's opaque CUstream_st.
#pragma once

#include <cstdint>

#include "speculative/dynamic_frontier.h"

struct CUstream_st;

namespace tessera::speculative {

// The arguments of expand_frontiers, feed_frontiers and best_candidates as device pointers.
// Throw tessera::Error on a failed launch. Asynchronous on `stream`.
void launch_expand_frontiers(DynamicImage* images, DynamicCandidate* candidates, int32_t* frontier,
                             const int32_t* ids, const float* mass, const int32_t* flag, int m,
                             int K, int C, int rows, int depth, CUstream_st* stream);
void launch_feed_frontiers(DynamicImage* images, DynamicCandidate* candidates,
                           const int32_t* frontier, int m, int halves, int K, int C, int d,
                           int tree_rows, int prev_rows, int32_t* tokens, int32_t* feature_rows,
                           uint8_t* mask, int stride, CUstream_st* stream);
void launch_best_candidates(DynamicImage* images, const DynamicCandidate* candidates,
                            int32_t* ranks, DynamicCandidate* best, int m, int C, int total,
                            CUstream_st* stream);

}  // namespace tessera::speculative
