// Token draws where the logits are (issue 40, item 4): one token per row of logits, written into
// backend tensors, with each row's settings in a backend tensor too, so a vanilla decode step
// needs no host round trip and replays as a graph whose counters advance on the device. The CPU
// backend runs sampler.cpp's rules on its host tensors (the tokens of the host loop, bit for
// bit); a CUDA backend launches sampling/cuda/sample_kernels.cu on its stream (the same rules,
// sampling_rules.h and philox.h, with sums reduced in another order).
#pragma once

#include <cstdint>

#include "sampling/sampler.h"
#include "tensor/backend.h"

namespace tessera {

// One row's settings as the device reads them (plain data: the bytes of a U8 backend tensor).
struct DeviceSampleParams {
  float cfg_scale = 1.0f;
  float cfg_interval = -1.0f;  // SamplingParams::cfg_interval (guided_at)
  float temperature = 1.0f;    // <= 0: greedy (argmax of the guided logits)
  int top_k = 0;               // 0 = off
  float top_p = 1.0f;          // 1 = off
  int uses_cfg = 0;            // 1: the row has an unconditional twin (guided_at decides per token)
  uint64_t seed = 0;           // CounterRng(seed, image_index).uniform(token_index, stream)
  uint64_t image_index = 0;
  uint32_t token_index = 0;
  uint32_t stream = 0;
};

DeviceSampleParams device_sample_params(const SamplingParams& p, uint64_t seed,
                                        uint64_t image_index, uint32_t token_index);
SamplingParams sampling_params(const DeviceSampleParams& d);

// One CUDA block holds a row in shared memory: 64 KiB of f32 at this vocabulary (LlamaGen's
// 16384). Lumina-mGPT's ~65536 would need 256 KiB, above a block's 227 KiB on sm_90: a two-pass
// variant keeping the row in global memory (or bf16 in shared memory) would be needed there.
constexpr int kMaxDeviceSampleVocab = 16384;
// Whether sample_rows runs on `be` for this vocabulary (the CPU: any).
inline bool can_sample_rows(const Backend& be, int vocab) {
  return be.host_memory() || vocab <= kMaxDeviceSampleVocab;
}

// Where sample_rows writes row r's token t (t = its params' token_index).
struct SampleRowsOut {
  Tensor tokens;  // I32: at [r], and at [mirror + r] when mirror > 0 (CFG's twin row)
  int mirror = 0;
  Tensor history;  // optional I32 [rows, history_stride]: also at [r * stride + t]
  int history_stride = 0;
  bool advance = false;  // then token_index += 1 in the row's params (the next step's token)
};

// cond: [n_rows, vocab] f32 logits; uncond: the unconditional rows, or null (no row guided);
// params: U8 [n_rows * sizeof(DeviceSampleParams)]. A row with a non-finite guided logit: the CPU
// throws Error (sampler.cpp's message and the token index); a device writes token 0 and sets
// error_flag (I32 [1]), which the caller reads after synchronising (device_sample_failed).
void sample_rows(Backend& be, const Tensor& cond, const Tensor* uncond, int n_rows, Tensor& params,
                 const SampleRowsOut& out, Tensor& error_flag);

// target_distribution (sampler.h) of n_rows rows where the logits are: row r guided (when its
// params say so at its token_index), tempered and filtered with params[r] (greedy: one-hot at the
// argmax), normalised, into probs [n_rows, vocab] (F32). cond, uncond and params as sample_rows'.
// A row with a non-finite guided logit: the CPU throws Error with the token index; a device zeroes
// the row and sets error_flag. Speculative verification reads these rows on the device (issue 42).
void distribution_rows(Backend& be, const Tensor& cond, const Tensor* uncond, int n_rows,
                       const Tensor& params, Tensor& probs, Tensor& error_flag);

// sample_rows' draw from distributions already computed where they are (probs [n_rows, vocab],
// as distribution_rows writes them with the same params): row r's token is the argmax when its
// params are greedy, else sample_index of the row with its params' uniform, written as
// sample_rows writes it (out). On the CPU it is sample_rows' token bit for bit; on a device it
// saves recomputing the row's guidance, filters and softmax. An all-zero row (a device's flagged
// non-finite logits) draws token 0 and sets error_flag.
void draw_rows(Backend& be, const Tensor& probs, int n_rows, Tensor& params,
               const SampleRowsOut& out, Tensor& error_flag);

// The k most likely tokens of each of n_rows rows of probabilities (probs [n_rows, vocab] F32),
// best first in argmax's order (larger first, ties to the lower id) and only tokens with mass:
// ids I32 [n_rows * k], row r's at [r * k ...], -1 past the row's tokens with mass. Draft heads'
// deterministic candidates (Medusa's top-k per head, EAGLE-2's expansions) chosen where the
// logits are, so that k ids per row come back instead of the row. mass (optional, F32 [n_rows *
// k]): each id's probability, 0 past them (EAGLE-2 scores its candidates by them). inputs
// (optional, I32 like ids): the ids as a forward's inputs take them, 0 for -1 (Medusa's tree on the
// device loop, whose tokens the target pass reads where they are).
void top_rows(Backend& be, const Tensor& probs, int n_rows, int k, Tensor& ids,
              Tensor* mass = nullptr, Tensor* inputs = nullptr);

// A static tree's children drawn without replacement where the distributions are (EAGLE #74's
// sampling of a node's children, as ModelDrafter's host trees draw them): for each of n_rows rows
// P of probs ([n_rows, vocab] F32), its k children in order, child c with params[r * k + c]:
// q_0 = P (as it is) and q_c = q_{c-1} without child c-1's token, renormalised; child c's
// token is sample_index(q_c, its params' uniform), or q_c's argmax when its params are greedy.
// Writes q_c to q[r * k + c] ([n_rows * k, vocab] F32) and the token to tokens[r * k + c] (I32);
// once no token has mass the row's remaining tokens are -1 (their q rows 0). On the CPU
// the host trees' tokens bit for bit; a device sums in another order. An all-zero P (a device's
// flagged non-finite logits) gives -1 tokens too. inputs (optional, I32 like tokens): the tokens
// as a forward's inputs take them, 0 for -1 (a padding row's token), so that the next depth's
// forward reads them where they are.
void draw_children_rows(Backend& be, const Tensor& probs, int n_rows, int k, const Tensor& params,
                        Tensor& q, Tensor& tokens, Tensor* inputs = nullptr);

// Each row's Σ_y q(y)² (the chance two draws from q agree: a sampled draft's expected
// acceptance by q itself, Hawk's node confidence) as a double, summed in order from y = 0 on the
// CPU and block-wide on a device: sums F64 [n_rows] from probs [n_rows, vocab] F32.
void row_square_sums(Backend& be, const Tensor& probs, int n_rows, Tensor& sums);

// Error's text for a set error_flag.
const char* device_sample_failed();

}  // namespace tessera
