// A round's drafts verified where the target's distributions are (issue 42, item 2): every
// image's chain or tree walked with its rule's descriptor (a ratio rule or LANTERN) by verify_rows
// (verify_rows.h), on the CPU backend in a loop, on a CUDA backend by
// speculative/cuda/verify_kernels.cu (a block per image, the same function over a block's lanes:
// walk_lanes.h), so that a round's acceptance needs no host copy of the distributions.
#pragma once

#include <cstdint>

#include "speculative/verify_rows.h"
#include "tensor/backend.h"

namespace tessera::speculative {

// One image of the round (plain data: the bytes of a U8 backend tensor). Each image has its own
// rule (methods that draft alike share a round, SpeculativeDecoder::set_rule) and its own round
// count (images join between rounds).
struct RoundImage {
  WalkRule rule;                       // a LANTERN table pointer is the backend's
  uint64_t seed = 0, image_index = 0;  // its random stream (CounterRng(seed, image_index))
  int64_t round = 0;                   // the image's round (its stream ids, streams.h)
  uint32_t base_token = 0;             // index in the image of the root's next token
  int32_t drafts = 0;                  // draft nodes n (<= the round's width)
  int32_t draft_len = 1;               // L, the round's maximum depth (COOL-SD's schedule)
  int32_t one_hot = 0;                 // 1: every draft one-hot (its rows of q are not read)
  int32_t carry = 0;  // 1: also each node row's Jacobi carry-over draw (jacobi_carry.h)
};

// p: F32 [images * (width + 1), V], image i's rows from i * (width + 1) (row 0: the root's target
// distribution, row c + 1: node c's); q: F32 [images * width, V] (row i * width + c: node c's
// distribution), or null when every image's drafts are one-hot; nodes: U8 of images * width
// WalkNode (image i's from i * width); images: U8 of n_images RoundImage; scratch: F32
// [images, verify_scratch(V)]; verdicts: U8 of n_images DraftVerdict, written. carried: I32
// [images * width] or null: for an image with `carry`, row c + 1's carry-over draw at
// i * width + c for each of its nodes c (the others untouched). Asynchronous on a device backend.
void verify_images(Backend& be, const Tensor& p, const Tensor* q, const Tensor& nodes,
                   const Tensor& images, int n_images, int width, bool greedy, Tensor& scratch,
                   Tensor& verdicts, Tensor* carried = nullptr);

}  // namespace tessera::speculative
