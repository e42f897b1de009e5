// Drafts with a smaller LlamaGen-architecture model over the same VQ vocabulary (classic
// speculative decoding, Leviathan et al. / Chen et al.; seed 004 Alg. 1 line 2): a chain of L
// tokens, each drawn from the draft model's distribution after the same CFG, temperature, top-k
// and top-p as the target's. The draft model runs both CFG halves like the target.
#pragma once

#include <memory>

#include "models/llamagen.h"
#include "sampling/sampler.h"
#include "speculative/drafters/drafter.h"

namespace tessera::speculative {

class ModelDrafter : public Drafter {
 public:
  ModelDrafter(const LlamaGen& model, const SamplingParams& params, int max_depth);
  std::string name() const override { return "draft model"; }
  int draft_depth(int draft_len) const override { return draft_len; }
  void start(const std::vector<const Condition*>& conds, std::vector<ImageState>& images) override;
  void propose(std::span<ImageState* const> active, std::span<const int> max_depth,
               std::vector<DraftTree>& trees) override;
  void finish_round(ImageState&, const DraftTree&, const VerifyOutcome&,
                    const std::function<std::span<const float>(int)>&) override {}
  int64_t batched_forwards() const override { return forwards_; }

 private:
  const LlamaGen& model_;
  SamplingParams params_;
  std::unique_ptr<KVCache> cache_;
  int max_depth_ = 0;
  int n_ = 0;  // images in the batch
  int64_t forwards_ = 0;
};

}  // namespace tessera::speculative
