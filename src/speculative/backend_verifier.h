// A round's drafts verified where the target's logits are (issue 42, items 1 and 2): every row of
// the target pass becomes its target distribution on the backend (distribution_rows), and each
// image's chain or tree is walked there with its rule's descriptor (verify_images); only the
// verdicts come back, one copy a round, instead of the [halves x images x rows, V] logits and a
// host softmax per row. It covers rounds whose images all verify with a ratio rule (exact,
// uniform-rsd, cool-sd, amplify, addition, either resampling), LANTERN (its neighbour table
// uploaded once), GSD (its embedding uploaded once) or Medusa's typical acceptance;
// SpeculativeDecoder verifies the other rounds on the host. On the CPU backend it
// gives the host walk's tokens bit for bit (tests/test_backend_verifier.cpp), so the CPU tests
// check the wiring the GPU runs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sampling/sample_rows.h"
#include "speculative/chain_commit.h"
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
  bool carry = false;  // also the Jacobi carry-over draws of its node rows (carried())
};

// The device ops of a staged round (BackendVerifier::write_drafts and verify_on_device): the
// tensors and sizes they launch with, fixed by stage(). Taken by value into a captured graph, they
// are what its replays run with; rounds whose launches are equal (add_to) replay one graph, each
// reading the buffers its own stage() wrote.
struct VerifyLaunch {
  int m = 0, rows = 0;
  bool greedy = false, guided = false;
  Tensor probs, scratch, flag, params, nodes, images, verdicts, carried, q;
  // The drafter's q rows gathered into q (undefined: q was uploaded).
  Tensor q_from, q_index;
  // The drafts' device tokens and their copies into the walk's nodes (and the draws' flag into
  // this buffer's), and into the target pass's inputs (undefined: none).
  Tensor tokens, words, nodes_from, nodes_to, drafts, inputs_from, inputs_to;
  void add_to(GraphKey& key) const;
};

class BackendVerifier {
 public:
  BackendVerifier(Backend& backend, int vocab);

  // Before the target pass: the round's drafts, each of `rows` - 1 nodes at most, and their
  // settings go to the backend in one copy (the drafts are known before the pass, so the copy
  // does not wait for it). greedy: temperature 0. device: the drafter's rows on the backend
  // (Drafter::device_rows) when its nodes name rows of it (DraftNode::q_row): their q rows are
  // gathered there, and tokens still on the device (kTokenOnDevice) are copied there into the
  // walk's nodes; otherwise each node's host q is copied. halves: the target pass's (2 guided).
  void stage(int rows, std::span<const DraftToVerify> drafts, bool greedy,
             const DeviceDraftRows* device = nullptr, int halves = 1);
  // Whether the staged drafts have tokens on the device: the target pass's inputs then need
  // write_drafts, and the trees complete() after read.
  bool tokens_on_device() const { return tokens_on_device_; }
  // After the target pass: the staged images' verdicts. logits: F32 [halves * m * rows, V] as the
  // pass wrote them (image j's row r at j * rows + r, the unconditional half after the
  // conditional one when guided). Blocks for the one copy back; throws Error when a logit is not
  // finite. For drafts whose tokens stay on the device, use the parts below.
  const std::vector<DraftVerdict>& verify(const Tensor& logits, bool guided);
  // The same in parts, for a round whose target pass and verification run as one captured graph
  // (SpeculativeDecoder::verify_pass): the staged launch; its device ops, which allocate,
  // transfer and wait for nothing (gather_drafts and write_drafts before the target pass,
  // verify_on_device after it); then read, the one copy back.
  VerifyLaunch launch(bool guided) const;
  // The drafts' rows on the device brought to the walk: their q gathered, their tokens copied into
  // its nodes.
  static void gather_drafts(Backend& be, const VerifyLaunch& launch);
  // The drafts' device tokens written into the target pass's inputs (I32 [halves * m * rows],
  // image j's row r at (h * m + j) * rows + r: node d's token at row d + 1), once
  // Session::prepare has written the rest.
  static void write_drafts(Backend& be, const VerifyLaunch& launch, Tensor& input_tokens);
  static void verify_on_device(Backend& be, const VerifyLaunch& launch, const Tensor& logits);
  const std::vector<DraftVerdict>& read();
  // A burst (SpeculativeDecoder): the words of the staged round a commit moves for the next round
  // (each row's token index, each image's base token and round), image j the j-th staged draft.
  void burst_fields(std::vector<RoundField>& out) const;
  // A burst of Jacobi windows (chain_commit.h, JacobiWindows): whether the staged round gathers
  // its drafts' q rows from the rows of its own distributions (the last round's, laid out as this
  // round's), so that each round's window can name rows of the round before it; and the words of
  // the staged nodes a window's refill sets (each node's token, flags and q row), image j's node c
  // from window word (j * width + c) * kWindowWords + the word's.
  bool gathers_own_rows() const;
  void window_fields(std::vector<RoundField>& out) const;
  // A burst's end: the staged round done without read() (its flag was read with the history).
  void unstage() { staged_ = false; }
  // Row r (0: the root's) of image j's target distributions in the last verify: the round's rows
  // are downloaded at the first call (a drafter that reads them, e.g. Jacobi's carry-over).
  std::span<const float> row(int j, int r);
  // After verify: gives image j's nodes drawn on the device their tokens (come back with the
  // verdicts); a node drawn without a token, and the nodes below it, become kTokenMissing.
  void complete(int j, DraftTree& tree) const;
  // After verify: image j's carry-over draws (DraftToVerify::carry; row r's at r - 1), come back
  // with the verdicts; and the round's distributions on the backend, image j's row r at
  // j * rows + r, valid until the next verify (TargetRound::device_dist).
  std::span<const int32_t> carried(int j) const;
  const Tensor& distributions() const { return probs_round_; }

  // Adds to `stats` what verify_draft counts for `tree` with this verdict (proposed and accepted
  // drafts per depth), and returns its outcome (the accepted path, root to leaf).
  static VerifyOutcome outcome(const DraftVerdict& v, const DraftTree& tree, ImageStats& stats);

 private:
  // One backend buffer holds a round's host traffic, each part at an aligned offset: what comes
  // back (the verdicts, the error flag, the carry-over draws when asked for, and the nodes when
  // their tokens were drawn on the device) first, then what goes (settings per row, the images, the
  // drafts' rows on the device and the pairs that copy their tokens, their distributions). One
  // upload writes it all, one download reads the first part.
  struct Layout {
    size_t verdicts = 0, flag = 0, carried = 0, nodes = 0, back = 0;  // back: bytes downloaded
    size_t params = 0, images = 0, q_rows = 0, moves = 0, q = 0, total = 0;
    // Token copies (from a device row, to an I32 index): into the nodes and flag of this buffer,
    // then into the target pass's inputs.
    int64_t node_moves = 0, input_moves = 0;
  };

  Backend& be_;
  int V_;
  int m_ = 0, rows_ = 0;
  bool greedy_ = false, any_q_ = false, staged_ = false, downloaded_ = false;
  bool tokens_on_device_ = false, any_carry_ = false;
  std::vector<int32_t> draft_counts_;  // the staged drafts' nodes, by image
  Tensor device_tokens_;               // the drafter's tokens [n + 1, 1] while tokens_on_device_
  Tensor device_inputs_;  // and as the target's inputs take them (DeviceDraftRows::inputs)
  Tensor q_from_;         // the drafter's q rows this round gathers (DeviceDraftRows::q)
  Layout at_;
  // probs: [m * rows, V]; scratch: [m, V] (residuals); q: [m * width, V], the drafter's rows
  // gathered from its DeviceDraftRows::q.
  Tensor buffer_, probs_, scratch_, gathered_q_;
  Tensor probs_round_;         // the staged round's rows of probs_
  Tensor q_;                   // the round's q rows: in buffer_ or gathered_q_
  std::vector<uint8_t> host_;  // the buffer's bytes on the host
  std::vector<float> probs_host_;
  std::vector<DraftVerdict> verdicts_;
  // LANTERN's tables on the backend, each uploaded once (the pointer keeps its rows alive).
  std::vector<std::pair<std::shared_ptr<const LatentNeighbours>, Tensor>> tables_;
  const int32_t* table_on_backend(const std::shared_ptr<const LatentNeighbours>& table);
  // GSD's embeddings likewise.
  std::vector<std::pair<std::shared_ptr<const std::vector<float>>, Tensor>> embeddings_;
  const float* embedding_on_backend(const std::shared_ptr<const std::vector<float>>& embedding,
                                    int dim);
  // The staged token copies' source rows (to: false) or destination indices (true), of the node
  // moves or the input moves (inputs).
  Tensor moves(bool to, bool inputs) const;
};

}  // namespace tessera::speculative
