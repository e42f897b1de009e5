// A burst's commit on a GPU (speculative/chain_commit.h): one block, a thread per image, then a
// thread per field. Compiles without CUDA headers: the stream is the runtime's opaque CUstream_st.
#pragma once

#include <cstdint>

#include "speculative/chain_commit.h"

struct CUstream_st;

namespace tessera::speculative {

// commit_chain_round's arguments as device pointers (carried, window_images and window_words
// null: no Jacobi windows). Throws tessera::Error on a failed launch.
void launch_commit_chain_round(const DraftVerdict* verdicts, const WalkNode* nodes, int m,
                               int width, int32_t* state, int32_t* history, int n_tokens,
                               int32_t* committed, const RoundField* fields, int n_fields,
                               const int32_t* round_flag, int32_t* burst_flag,
                               const int32_t* carried, WindowImage* window_images,
                               int32_t* window_words, int vocab, CUstream_st* stream);

}  // namespace tessera::speculative
