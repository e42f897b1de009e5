// A drafter proposes, for every image, a draft tree below its last committed token and the
// distribution each draft token was drawn from (q). It learns the target's outputs of every
// round: the verified distributions and, when it asks for them, the target's hidden states (the
// features draft heads such as EAGLE's, Medusa's or Hawk's read).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "models/autoregressive_model.h"
#include "speculative/chain_commit.h"
#include "speculative/draft.h"
#include "speculative/verify.h"
#include "tensor/tensor.h"

namespace tessera::speculative {

// The target's step outputs for one image's verified rows (row 0: the root's next token; row
// j + 1: the token after draft node j).
struct TargetRound {
  std::function<std::span<const float>(int)> dist;  // target distribution of row r
  // A round verified on the device (BackendVerifier): the round's target distributions there,
  // row r of this image at row device_row0 + r of device_dist, valid until the next round's
  // verification; and, for a drafter that carries drafts (Jacobi), each node row's carry-over
  // draw made there (carried[r - 1]: row r's, jacobi_carry.h). Null and empty on the host loop.
  const Tensor* device_dist = nullptr;
  int64_t device_row0 = 0;
  std::span<const int32_t> carried;
  // [rows, dim] backend tensors of the conditional and (with CFG) unconditional half when
  // hidden_state() asks for them, else undefined; valid until the next target forward.
  Tensor hidden, hidden_uncond;
};

// The target's prefill of the images start() receives: with hidden_state(), the hidden states of
// every prefix row, [slots * rows, dim]: the images' conditional slots in order, then (with CFG)
// their unconditional ones, `rows` prefix positions each (the last one predicts the first token).
struct TargetPrefill {
  Tensor hidden;
  int rows = 0;
};

// --draft-len auto's node budget for trees a drafter shapes itself (EAGLE-2's dynamic trees):
// given the image and its candidates' values, best first, the number of them to keep.
using NodeBudget = std::function<int(const ImageState& image, std::span<const double> values)>;

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;
  // Draft depth per round for --draft-len L.
  virtual int draft_depth(int draft_len) const = 0;
  // Most nodes of one round's tree for --draft-len L (the target verifies root + nodes in one
  // forward: its session is sized by this). Chains: the depth.
  virtual int max_nodes(int draft_len) const { return draft_depth(draft_len); }
  // Which hidden state of the target start() and finish_round() receive (None: none).
  virtual HiddenState hidden_state() const { return HiddenState::None; }
  // Whether the drafts a round leaves unverified are re-drafted by the target and carried into
  // the next window (Jacobi iteration): --draft-len auto's policy then models the window
  // (DraftLengthPolicy, JacobiAcceptance) instead of the depths alone.
  virtual bool carries_drafts() const { return false; }
  // How many drafts the next window of `image` starts with that were carried over.
  virtual int carried_drafts(const ImageState&) const { return 0; }
  // Images whose prefill just drew their first token (images join between steps).
  virtual void start(std::span<ImageState* const> images, const TargetPrefill& prefill) = 0;
  // Writes a tree of depth <= max_depth[j] and at most max_nodes(draft_len) nodes for each image
  // active[j] (max_depth 0: empty tree).
  virtual void propose(std::span<ImageState* const> active, std::span<const int> max_depth,
                       std::vector<DraftTree>& trees) = 0;
  // The speculative device loop (issue 42): for the next propose(), a drafter that can draws its
  // chains where its logits are and leaves them there, each node naming its row of
  // device_rows() (DraftNode::q_row) instead of holding q and with token kTokenOnDevice: nothing
  // comes back until the round's verdicts bring the tokens (BackendVerifier::complete). Set only
  // for rounds the backend verifies; other drafters ignore it and fill q on the host. A drafter
  // may keep other work where its logits are under it too (a dynamic tree's ranking).
  virtual void set_device_drafts(bool on) { (void)on; }
  // The last propose()'s device drafts (null: none).
  virtual const DeviceDraftRows* device_rows() const { return nullptr; }
  // Rounds drafted on the device so far, and of them those whose forwards ran as a replayed graph.
  struct DeviceDrafts {
    int64_t rounds = 0, replayed = 0;
  };
  virtual DeviceDrafts device_drafts() const { return {}; }
  // Drafters of dynamic trees keep, of each round's candidates, as many as `budget` says (within
  // their own cap); others ignore it (a static tree is cut by depth).
  virtual void set_node_budget(NodeBudget budget) { (void)budget; }
  // After verification: `outcome` of `tree`; image.tokens already holds this round's tokens.
  virtual void finish_round(ImageState& image, const DraftTree& tree, const VerifyOutcome& outcome,
                            const TargetRound& target) = 0;
  // The image leaves the generation (done or removed): drop its state.
  virtual void release(const ImageState& image) = 0;
  virtual int64_t batched_forwards() const { return 0; }

  // Bursts of chain rounds on the device (speculative/chain_commit.h; SpeculativeDecoder): whether
  // this drafter's device chains can repeat without the host (a chain drawn on the device, its
  // inputs a function of each image's committed count and round, nothing learnt from a round).
  virtual bool can_burst() const { return false; }
  // After a propose: whether it drew every active image's chain so that it can repeat, and then
  // the words of its inputs the commit moves for the next round (image i: the i-th active image).
  virtual bool burst_fields(std::vector<RoundField>& out) const { return (void)out, false; }
  // That chain again from the inputs as the commit left them (a graph replay on a GPU).
  virtual void replay_burst_round() {}
  // After the burst: image's cache lengths as its last round left them, that round having started
  // `tokens` committed tokens after the burst's first. A drafter that carries drafts (a Jacobi
  // window, refilled by each round's commit) then gets the last round's finish_round, its
  // carry-over draws from the last refill.
  virtual void end_burst(const ImageState& image, int tokens) { (void)image, (void)tokens; }
};

}  // namespace tessera::speculative
