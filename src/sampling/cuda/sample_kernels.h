// Vanilla sampling on the device (issue 40, item 4): guidance, temperature, top-k, top-p,
// softmax and the Philox draw for n rows of logits, one block per row, writing each row's token
// on the device so a decode step needs no host round trip (and can be captured in a CUDA graph).
// The same blocks also write whole target distributions for speculative verification on the
// device (issue 42). The rules are sampling/sampling_rules.h and sampling/philox.h, shared with the
// CPU sampler.
// Compiles without CUDA headers: the stream is the runtime's opaque CUstream_st.
#pragma once

#include <cstdint>

#include "sampling/sample_rows.h"

struct CUstream_st;

namespace tessera {

// cond: n_rows x vocab f32 logits (device); uncond: the same shape, or null when no row is
// guided. params: n_rows entries (device). Row r's token goes to tokens[r], to tokens[mirror + r]
// when mirror > 0, and to history[r * history_stride + token_index] when history is given; with
// advance, the row's token_index then grows by one. error_flag (device int) is set to 1 when a row
// has a non-finite guided logit (the CPU throws "the model produced non-finite logits (NaN or
// Inf)") or its token_index is past the history; that row's token is 0. Throws tessera::Error on
// a bad shape or a failed launch. Asynchronous on `stream`.
void launch_sample_rows(const float* cond, const float* uncond, int n_rows, int vocab,
                        DeviceSampleParams* params, int32_t* tokens, int mirror, int32_t* history,
                        int history_stride, bool advance, int* error_flag, CUstream_st* stream);

// target_distribution (sampler.h) for n_rows rows of logits: row r's settings params[r] (greedy:
// one-hot at the argmax), its probabilities to probs[r * vocab ...]. A row with a non-finite
// guided logit sets error_flag and is zeros. Asynchronous on `stream`.
void launch_distribution_rows(const float* cond, const float* uncond, int n_rows, int vocab,
                              const DeviceSampleParams* params, float* probs, int* error_flag,
                              CUstream_st* stream);

// draw_rows (sample_rows.h): launch_sample_rows' draw and writes from probability rows (probs:
// n_rows x vocab) instead of logits; an all-zero row writes token 0 and sets error_flag.
void launch_draw_rows(const float* probs, int n_rows, int vocab, DeviceSampleParams* params,
                      int32_t* tokens, int mirror, int32_t* history, int history_stride,
                      bool advance, int* error_flag, CUstream_st* stream);

// draw_children_rows (sample_rows.h): row r's k children without replacement, their q rows to
// q[(r * k + c) * vocab ...] and tokens to tokens[r * k + c] (-1 once no token has mass), and
// (inputs not null) to inputs[r * k + c] with 0 for -1. Asynchronous on `stream`.
void launch_draw_children_rows(const float* probs, int n_rows, int vocab, int k,
                               const DeviceSampleParams* params, float* q, int32_t* tokens,
                               int32_t* inputs, CUstream_st* stream);

// top_rows (sample_rows.h): row r's k most likely ids with mass into ids[r * k ...], -1 past
// them, (mass not null) their probabilities into mass[r * k ...], 0 past them, and (inputs not
// null) the ids into inputs[r * k ...], 0 for -1. Asynchronous on `stream`.
void launch_top_rows(const float* probs, int n_rows, int vocab, int k, int32_t* ids, float* mass,
                     int32_t* inputs, CUstream_st* stream);

// row_square_sums (sample_rows.h): sums[r] = Σ_y probs[r, y]², a block a row, in double.
// Asynchronous on `stream`.
void launch_row_square_sums(const float* probs, int n_rows, int vocab, double* sums,
                            CUstream_st* stream);

}  // namespace tessera
