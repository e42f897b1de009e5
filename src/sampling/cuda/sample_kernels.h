// Vanilla sampling on the device (issue 40, item 4): guidance, temperature, top-k, top-p,
// softmax and the Philox draw for n rows of logits, one block per row, writing each row's token
// on the device so a decode step needs no host round trip (and can be captured in a CUDA graph).
// The rules are sampling/sampling_rules.h and sampling/philox.h, shared with the CPU sampler.
// Compiles without CUDA headers: the stream is the runtime's opaque CUstream_st.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace tessera {

// Per-row parameters, in device memory (a step under a CUDA graph updates them in place).
struct DeviceSampleParams {
  float cfg_scale = 1.0f;
  float temperature = 1.0f;  // <= 0: greedy (argmax of the guided logits)
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
  uint64_t seed = 0;         // CounterRng(seed, image_index).uniform(token_index, stream)
  uint64_t image_index = 0;
  uint32_t token_index = 0;
  uint32_t stream = 0;
  int guided = 0;  // 1: combine with the uncond row (SamplingParams::guided(token_index))
};

// One block holds a row in shared memory: 64 KiB of f32 at this vocabulary (LlamaGen's 16384).
// Lumina-mGPT's ~65536 would need 256 KiB, above a block's 227 KiB on sm_90: a two-pass variant
// keeping the row in global memory (or bf16 in shared memory) would be needed there.
constexpr int kMaxDeviceSampleVocab = 16384;

// cond: n_rows x vocab f32 logits (device); uncond: the same shape, or null when no row is
// guided. params: n_rows entries (device). tokens: n_rows I32 (device). error_flag (device int)
// is set to 1 when a row has a non-finite guided logit (the CPU throws "the model produced
// non-finite logits (NaN or Inf)"); that row's token is 0. Throws tessera::Error on a bad shape
// or a failed launch. Asynchronous on `stream`.
void launch_sample_rows(const float* cond, const float* uncond, int n_rows, int vocab,
                        const DeviceSampleParams* params, int32_t* tokens, int* error_flag,
                        CUstream_st* stream);

}  // namespace tessera
