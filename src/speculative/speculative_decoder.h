// The draft-and-verify loop shared by every speculative method (docs/methods.md), as a Decoder:
// each step is one round for every image in flight. Per round and image the drafter proposes a
// draft below the last committed token (the root); one batched target forward over
// [root, draft...] (both CFG halves; a tree under an ancestor mask) gives the target
// distribution at every node; verify_draft walks the draft with the method's rule; the target's
// KV slots are cut back (chains) or compacted (trees) to the accepted path. Images keep their own
// lengths and may join or leave between steps; a result depends only on (models, settings, seed,
// image index), not on the batch it was generated in.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "decode/decoder.h"
#include "speculative/backend_verifier.h"
#include "speculative/draft_length.h"
#include "speculative/drafters/drafter.h"
#include "speculative/rules/acceptance_rule.h"

namespace tessera::speculative {

struct LoopSettings {
  const AcceptanceRule* rule = nullptr;  // every image's unless set_rule gives it its own
  Drafter* drafter = nullptr;
  int draft_len = 5;  // --draft-len (the drafter turns it into a depth); auto: the maximum
  // --draft-len auto: chooses each round's depth from the image's past acceptance (null: every
  // round drafts draft_len's depth).
  const DraftLengthPolicy* policy = nullptr;
  // --draft-len auto: the rounds a chosen depth is held for (DraftLengthPolicy::choose_held), so
  // that the device loop's bursts, which repeat one chain, cover auto's rounds too. 0: the burst
  // length (DecoderSettings::device_burst) on the device loop for a drafter whose chains burst,
  // else 1 (a choice every round).
  int hold_depth = 0;
  int max_rounds = 0;  // > 0: afterwards the target finishes the image alone
};

class SpeculativeDecoder final : public Decoder {
 public:
  SpeculativeDecoder(const AutoregressiveModel& target, int max_images,
                     const DecoderSettings& settings, const LoopSettings& loop,
                     GenerateStats& stats);
  ~SpeculativeDecoder() override;
  void remove(int id) override;
  // Image `id` (added, not yet removed) verifies with `rule` (null: the loop's) and draws its
  // resampled tokens from the rule's distribution: methods that share a drafter differ only in
  // their rule, so their images share every forward. The rule must outlive the image.
  void set_rule(int id, const AcceptanceRule* rule);
  // The rounds --draft-len auto holds a chosen depth for at most (LoopSettings::hold_depth,
  // resolved).
  int hold() const { return hold_; }

 protected:
  void prefill(std::vector<ImageState*>& fresh) override;
  void round(std::vector<ImageState*>& active) override;

 private:
  LoopSettings loop_;
  int depth_cap_ = 0;
  int node_cap_ = 0;  // most draft nodes per image and round (the session's width - 1)
  int hold_ = 1;      // LoopSettings::hold_depth, resolved
  // The settings an image's target distributions are verified with: its own, but greedy
  // verification sees the untempered distribution (unfiltered unless the rule keeps the filters).
  SamplingParams verify_params(const SamplingParams& image, const AcceptanceRule& rule) const;
  const AcceptanceRule& rule_of(const ImageState& im) const;
  // Whether this round verifies on the backend (verifier_): every image's rule has a walk
  // descriptor (a ratio rule or LANTERN); then its drafts, chains or trees, are staged.
  bool stage_on_backend(const std::vector<ImageState*>& active, int rows);
  // The device loop's target pass over the staged drafts and their verification, as one graph
  // per launch (GraphKey: the forward's inputs and the verifier's buffers), captured at the first
  // round of its shape and replayed by the later ones; returns the forward's outputs.
  ForwardOutputs verify_pass(const StepBatch& b);
  // The device loop's verifier (DecoderSettings::device_loop); null: the host walk.
  std::unique_ptr<BackendVerifier> verifier_;
  GraphCache graphs_;
  // Each graph's forward outputs (views of the session's workspace, where its replays write), by
  // key: a replay runs none of the host code that returned them.
  std::map<std::string, ForwardOutputs> pass_outputs_;
  // Bursts of chain rounds on the device (chain_commit.h): how many rounds the next may run (1:
  // none), and the burst after its first round's pass.
  int burst_rounds(const std::vector<ImageState*>& active) const;
  void run_burst(std::vector<ImageState*>& active, int burst);
  // The host's side of an image's verified round: its tokens and statistics.
  void append_tokens(ImageState& im, const DraftTree& tree, const VerifyOutcome& out);
  void count_round(ImageState& im, const DraftTree& tree, int depth, int kept);
  bool consecutive_positions_ = false;  // token t at position(0) + t (a burst moves positions)
  std::vector<RoundField> fields_;
  Tensor burst_buffer_;
  std::vector<uint8_t> burst_host_;
  // The last pass, for a burst to run again.
  struct Pass {
    GraphKey key;
    std::function<void()> ops;
    ForwardInputs in;
    VerifyLaunch launch;
  };
  Pass pass_;
  std::vector<DraftToVerify> to_verify_;
  std::vector<std::optional<WalkRuleSource>> walk_rules_;  // per active image, this round
  std::vector<const AcceptanceRule*> rules_;               // by image id; null: the loop's
  std::vector<int> max_depth_;
  std::vector<int> round_len_;  // the L of the acceptance rule (COOL-SD's schedule): the cap
  std::vector<ImageAcceptance> acceptance_;  // by image id (--draft-len auto)
  std::vector<int> carried_;  // per active image this round: drafts carried into its window
  std::vector<DraftTree> trees_;
  std::vector<int> depths_;  // per active image: this round's tree depth
  std::vector<int> keep_;    // cache positions of a tree's accepted path
  std::vector<float> dists_;
  std::vector<uint8_t> computed_;
};

// Generates one token grid per condition (image i uses random stream image_indices[i]).
std::vector<std::vector<int32_t>> generate_speculative(
    const AutoregressiveModel& target, const std::vector<const Condition*>& conds,
    const std::vector<uint64_t>& image_indices, const SamplingParams& params, uint64_t seed,
    const LoopSettings& loop, const std::function<void(int64_t)>& on_tokens, GenerateStats& stats);

}  // namespace tessera::speculative
