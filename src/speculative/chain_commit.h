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
//
// A Jacobi window (SJD; GSD on it) is a chain the target drafts for itself: the commit also
// refills each image's next window (refill_jacobi_window) as JacobiDrafter::propose would, from
// the round's carry-over draws and fresh uniform tokens, into the burst's window words, which
// kWindow fields copy into the verifier's nodes and the target pass's inputs.
#pragma once

#include <cstdint>

#include "common/host_device.h"
#include "sampling/philox.h"
#include "speculative/streams.h"
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
    kWindow = 3,     // = the burst's window word `add` after the commit (a Jacobi window's)
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

// One field after its image's commit: committed tokens, its history row and count, and the
// burst's window words (null without a Jacobi window).
TESSERA_HD inline void apply_round_field(const RoundField& f, int32_t committed,
                                         const int32_t* history, int32_t n, const int32_t* window) {
  if (f.kind == RoundField::kCommitted)
    *f.word += committed + f.add;
  else if (f.kind == RoundField::kConstant)
    *f.word += f.add;
  else if (f.kind == RoundField::kToken)
    *f.word = history[n + f.add];
  else
    *f.word = window[f.add];
}

// An image's Jacobi window in a burst: its stream, the round last verified (moved by each
// refill), its depth k and its first row in a round's target distributions.
struct WindowImage {
  uint64_t seed = 0, image = 0;
  int64_t round = 0;
  int32_t depth = 0;
  int32_t row0 = 0;
};

// The words of one window slot (kWindow's `add` is (j * width + c) * kWindowWords + the word's).
enum WindowWord : int32_t { kWindowToken = 0, kWindowFlags = 1, kWindowRow = 2, kWindowWords = 3 };

// The next window of an image whose round ended with verdict v at committed count n (after the
// commit), as JacobiDrafter::propose makes it (SJD, GSD Alg. 4): after a rejection at depth
// v.accepted + 1 its first k - v.accepted drafts are the carry-over draws of the rows past the
// rejection (carried[r - 1]: row r's), their q that row of the round's distributions; the others
// fresh, uniform over the vocabulary with one-hot q. out: k * kWindowWords words.
TESSERA_HD inline void refill_jacobi_window(const DraftVerdict& v, const int32_t* carried,
                                            WindowImage& w, int32_t n, int vocab, int32_t* out) {
  const int32_t kept = w.depth - v.accepted;  // 0 when the whole window was accepted
  ++w.round;
  for (int32_t c = 0; c < w.depth; ++c) {
    int32_t* slot = out + c * kWindowWords;
    if (c < kept) {
      slot[kWindowToken] = carried[v.accepted + c];
      slot[kWindowFlags] = 0;
      slot[kWindowRow] = w.row0 + v.accepted + 1 + c;
    } else {
      const double u = counter_uniform(w.seed, w.image, static_cast<uint32_t>(n + c),
                                       stream_id(Stream::JacobiInit, w.round));
      const int32_t t = static_cast<int32_t>(u * vocab);
      slot[kWindowToken] = t < vocab - 1 ? t : vocab - 1;
      slot[kWindowFlags] = WalkNode::kOneHot;
      slot[kWindowRow] = 0;  // gathered, never read
    }
  }
}

// A burst's Jacobi windows, refilled by each round's commit: carried, the verifier's carry-over
// draws (I32 [m * width], image j's row r at j * width + r - 1); images, U8 of m WindowImage;
// words, I32 [m * width * kWindowWords], image j's slot c at (j * width + c) * kWindowWords.
struct JacobiWindows {
  Tensor carried, images, words;
  int vocab = 0;
};

// The commit of one round of m images, each a chain of `width` nodes: verdicts (U8 of m
// DraftVerdict) and nodes (U8 of m * width WalkNode, image j's from j * width) as the verifier
// left them; state: I32 [m], the committed counts, updated; history: I32 [m, n_tokens], appended;
// committed: I32 [m], this round's tokens per image (the burst's record); fields: U8 of n_fields
// RoundField, each word once, applied after every image's commit; round_flag: I32 [1], the
// round's flag of a failed draw or non-finite row (the next round's overwrites it), or-ed into
// burst_flag. Once burst_flag is set nothing is committed or moved (committed: 0), so that the
// burst's later rounds replay inputs it has seen (a GPU's walk draws -1 from a zeroed row, which
// the next round would feed) and the host reports the flag. windows: each image's Jacobi window
// refilled after its commit, before the fields (null: none, and no kWindow field). Asynchronous on
// a GPU.
void commit_chain_round(Backend& be, const Tensor& verdicts, const Tensor& nodes, int m, int width,
                        Tensor& state, Tensor& history, Tensor& committed, const Tensor& fields,
                        int n_fields, const Tensor& round_flag, Tensor& burst_flag,
                        JacobiWindows* windows = nullptr);

}  // namespace tessera::speculative
