// A burst of chain rounds on the device (issue 42, item 1): after each round's verification the
// commit appends every image's committed tokens (its accepted drafts, then the resampled or bonus
// token) to a history on the device, and rewrites in place the next round's inputs that depend on
// them, so that the round after runs without the host. Those inputs are words in the buffers of
// the draft model's session and io, the target's session and the verifier (RoundField, each
// listed by the component that owns it), and each is a function of the image's committed count n
// and round r that moves in one of three ways: a position, a cached length or a token index moves
// with n (by the tokens committed); a round count or a draw's stream with r (by a constant); a
// token input is the history's token at n - 1 or n - 2. The CPU runs the same functions in a loop
// (the tests' burst must be the host loop's rounds bit for bit); a GPU one block.
#pragma once

#include <cstdint>

#include "common/host_device.h"
#include "speculative/verify_rows.h"
#include "tensor/backend.h"

namespace tessera::speculative {

// One word of a round's inputs on the device, for image `image` of the burst. A word has one
// field (a GPU applies the fields in parallel): a move by both the commit and a constant is one
// kCommitted field with that constant as `add`.
struct RoundField {
  enum Kind : int32_t {
    kCommitted = 0,  // += the tokens the image committed this round, + add
    kConstant = 1,   // += add (a round count: 1; a draw's stream: 1 << 12, streams.h)
    kToken = 2,      // = the image's token at n + add after the commit (add: -1, -2)
  };
  int32_t* word = nullptr;
  int32_t image = 0;
  int32_t kind = kCommitted;
  int32_t add = 0;
  int32_t pad = 0;
};

// Image j's commit: its chain's accepted drafts (node c's token at nodes[c].token) and the
// verdict's next token appended to its history row at its committed count n (state), which
// grows by them. Returns the tokens committed.
TESSERA_HD inline int32_t commit_chain_image(const DraftVerdict& v, const WalkNode* nodes,
                                             int32_t* history, int32_t& n) {
  for (int32_t c = 0; c < v.accepted; ++c) history[n + c] = nodes[c].token;
  history[n + v.accepted] = v.next_token;
  n += v.accepted + 1;
  return v.accepted + 1;
}

// One field after its image's commit: committed tokens, its history row and count.
TESSERA_HD inline void apply_round_field(const RoundField& f, int32_t committed,
                                         const int32_t* history, int32_t n) {
  if (f.kind == RoundField::kCommitted)
    *f.word += committed + f.add;
  else if (f.kind == RoundField::kConstant)
    *f.word += f.add;
  else
    *f.word = history[n + f.add];
}

// The commit of one round of m images, each a chain of `width` nodes: verdicts (U8 of m
// DraftVerdict) and nodes (U8 of m * width WalkNode, image j's from j * width) as the verifier
// left them; state: I32 [m], the committed counts, updated; history: I32 [m, n_tokens], appended;
// committed: I32 [m], this round's tokens per image (the burst's record); fields: U8 of n_fields
// RoundField, each word once, applied after every image's commit; round_flag: I32 [1], the
// round's flag of a failed draw or non-finite row (the next round's overwrites it), or-ed into
// burst_flag. Once burst_flag is set nothing is committed or moved (committed: 0), so that the
// burst's later rounds replay inputs it has seen (a GPU's walk draws -1 from a zeroed row, which
// the next round would feed) and the host reports the flag. Asynchronous on a GPU.
void commit_chain_round(Backend& be, const Tensor& verdicts, const Tensor& nodes, int m, int width,
                        Tensor& state, Tensor& history, Tensor& committed, const Tensor& fields,
                        int n_fields, const Tensor& round_flag, Tensor& burst_flag);

}  // namespace tessera::speculative
