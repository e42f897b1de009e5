// A round's drafts verified where the target's logits are (issue 42, items 1 and 2): every row of
// the target pass becomes its target distribution on the backend (distribution_rows), and each
// image's chain or tree is walked there with its rule's descriptor (verify_images); only the
// verdicts come back, one copy a round, instead of the [halves x images x rows, V] logits and a
// host softmax per row. It covers rounds whose images all verify with a ratio rule (exact,
// uniform-rsd, cool-sd, amplify, addition, either resampling) or LANTERN (its neighbour table
// uploaded once); SpeculativeDecoder verifies the other rounds on the host. On the CPU backend it
// gives the host walk's tokens bit for bit (tests/test_backend_verifier.cpp), so the CPU tests
// check the wiring the GPU runs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sampling/sample_rows.h"
#include "speculative/draft.h"
#include "speculative/verify.h"
#include "speculative/verify_images.h"
#include "tensor/backend.h"

namespace tessera::speculative {

// One image's draft (a chain or a tree) of the round.
struct DraftToVerify {
  const DraftTree* tree = nullptr;
  WalkRuleSource rule;
  SamplingParams verifying;  // the settings its target distributions are made with
  uint64_t seed = 0, image_index = 0;
  int64_t round = 0;
  int base_token = 0;  // tokens committed before the round
  int draft_len = 1;   // L, the round's maximum depth
};

class BackendVerifier {
 public:
  BackendVerifier(Backend& backend, int vocab);

  // Before the target pass: the round's drafts, each of `rows` - 1 nodes at most, and their
  // settings go to the backend in one copy (the drafts are known before the pass, so the copy
  // does not wait for it). greedy: temperature 0. device_q: the drafter's distributions on the
  // backend (Drafter::device_q) when its nodes name rows of it (DraftNode::q_row), gathered
  // there; otherwise each node's host q is copied.
  void stage(int rows, std::span<const DraftToVerify> drafts, bool greedy,
             const Tensor* device_q = nullptr);
  // After it: the staged images' verdicts. logits: F32 [halves * m * rows, V] as the target pass
  // wrote them (image j's row r at j * rows + r, the unconditional half after the conditional one
  // when guided). Blocks for the one copy back; throws Error when a logit is not finite.
  const std::vector<DraftVerdict>& verify(const Tensor& logits, bool guided);
  // Row r (0: the root's) of image j's target distributions in the last verify: the round's rows
  // are downloaded at the first call (a drafter that reads them, e.g. Jacobi's carry-over).
  std::span<const float> row(int j, int r);

  // Adds to `stats` what verify_draft counts for `tree` with this verdict (proposed and accepted
  // drafts per depth), and returns its outcome (the accepted path, root to leaf).
  static VerifyOutcome outcome(const DraftVerdict& v, const DraftTree& tree, ImageStats& stats);

 private:
  // One backend buffer holds a round's host traffic, each part at an aligned offset: what comes
  // back (the verdicts, then the error flag) first, then what goes (settings per row, the images,
  // the drafted tokens, their distributions). One upload writes it all, one download reads the
  // first part.
  struct Layout {
    size_t verdicts = 0, flag = 0, back = 0;  // back: the bytes downloaded
    size_t params = 0, images = 0, nodes = 0, q_rows = 0, q = 0, total = 0;
  };

  Backend& be_;
  int V_;
  int m_ = 0, rows_ = 0;
  bool greedy_ = false, any_q_ = false, staged_ = false, downloaded_ = false;
  Layout at_;
  // probs: [m * rows, V]; scratch: [m, V] (residuals); q: [m * width, V], the drafter's rows
  // gathered from its device_q.
  Tensor buffer_, probs_, scratch_, gathered_q_;
  Tensor q_;                   // the round's q rows: in buffer_ or gathered_q_
  std::vector<uint8_t> host_;  // the buffer's bytes on the host
  std::vector<float> probs_host_;
  std::vector<DraftVerdict> verdicts_;
  // LANTERN's tables on the backend, each uploaded once (the pointer keeps its rows alive).
  std::vector<std::pair<std::shared_ptr<const LatentNeighbours>, Tensor>> tables_;
  const int32_t* table_on_backend(const std::shared_ptr<const LatentNeighbours>& table);
};

}  // namespace tessera::speculative
