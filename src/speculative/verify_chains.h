// A round's chains verified where the target's distributions are (issue 42, item 2): every image's
// chain walked with its rule's descriptor (a ratio rule or LANTERN) by verify_chain
// (verify_chain.h), on the CPU backend in a loop, on a CUDA backend by
// speculative/cuda/verify_kernels.cu (one thread per image, the same function), so that a round's
// acceptance needs no host copy of the distributions.
#pragma once

#include <cstdint>

#include "speculative/verify_chain.h"
#include "tensor/backend.h"

namespace tessera::speculative {

// One image of the round (plain data: the bytes of a U8 backend tensor). Each image has its own
// rule (methods that draft alike share a round, SpeculativeDecoder::set_rule) and its own round
// count (images join between rounds).
struct ChainRoundImage {
  ChainRule rule;                      // a LANTERN table pointer is the backend's
  uint64_t seed = 0, image_index = 0;  // its random stream (CounterRng(seed, image_index))
  int64_t round = 0;                   // the image's round (its stream ids, streams.h)
  uint32_t base_token = 0;             // index in the image of the root's next token
  int32_t drafts = 0;                  // chain length n (<= the round's width)
  int32_t draft_len = 1;               // L, the round's maximum depth (COOL-SD's schedule)
  int32_t one_hot = 0;                 // 1: one-hot drafts (its rows of q are not read)
};

// p: F32 [images * (width + 1), V], image i's rows from i * (width + 1) (row d: the target
// distribution after d drafts); q: F32 [images * width, V] (row i * width + d - 1: draft d's
// distribution), or null when every image's drafts are one-hot; tokens: I32 [images * width];
// images: U8 of n_images ChainRoundImage; scratch: F32 [images, V]; verdicts: U8 of n_images
// ChainVerdict, written. Asynchronous on a device backend.
void verify_chains(Backend& be, const Tensor& p, const Tensor* q, const Tensor& tokens,
                   const Tensor& images, int n_images, int width, bool greedy, Tensor& scratch,
                   Tensor& verdicts);

}  // namespace tessera::speculative
