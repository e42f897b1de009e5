// Drafts with a smaller autoregressive model over the same vocabulary (classic speculative
// decoding, Leviathan et al. 2023 / Chen et al. 2023; COOL-SD Alg. 1 line 2): a chain of L tokens,
// each drawn from the draft model's distribution after the same CFG, temperature, top-k and top-p
// as the target's. The draft model runs both CFG halves like the target, in its own session.
#pragma once

#include <map>
#include <memory>

#include "decode/session.h"
#include "sampling/sampler.h"
#include "speculative/drafters/drafter.h"

namespace tessera::speculative {

class ModelDrafter : public Drafter {
 public:
  // max_images: images in flight at once (the session's slots).
  ModelDrafter(const AutoregressiveModel& model, const SamplingParams& params, int max_depth,
               int max_images);
  std::string name() const override { return "draft model"; }
  int draft_depth(int draft_len) const override { return draft_len; }
  void start(std::span<ImageState* const> images) override;
  void propose(std::span<ImageState* const> active, std::span<const int> max_depth,
               std::vector<DraftTree>& trees) override;
  void finish_round(ImageState&, const DraftTree&, const VerifyOutcome&,
                    const TargetRound&) override {}
  void release(const ImageState& image) override;
  int64_t batched_forwards() const override { return session_.forwards(); }

 private:
  struct Slots {
    int cond = -1, uncond = -1;
  };
  const AutoregressiveModel& model_;
  SamplingParams params_;
  Session session_;
  std::map<int, Slots> slots_;  // by image id
  std::vector<float> logits_;
};

}  // namespace tessera::speculative
