// Speculative Jacobi decoding's drafts (SJD, Teng et al., 2025, as summarised in GSD (So et al.,
// 2025) §2.3, Alg. 4, and as the SJD code's scheduler/jacobi_iteration_lumina_mgpt.py does): a
// window of L positions after the root. Positions
// the last round left unverified keep the target's sample from that round as their draft, with
// the target's distribution of that round as q; new positions are initialised uniformly at
// random over the vocabulary with one-hot q. Needs no model: the target verifies and drafts.
// On the device loop the carry-over stays on the device: its draws are made there with the
// verdicts (TargetRound::carried) and q is the verifier's row of that round (DraftNode::q_row into
// device_rows()), so nothing of the window comes back but its tokens; in a burst of rounds the
// window is refilled there too (chain_commit.h).
#pragma once

#include <map>

#include "sampling/sampler.h"
#include "speculative/drafters/drafter.h"

namespace tessera::speculative {

class JacobiDrafter : public Drafter {
 public:
  JacobiDrafter(int vocab_size, const SamplingParams& params);
  std::string name() const override { return "jacobi"; }
  // The window holds the root and L - 1 drafts: at most L tokens per target forward.
  int draft_depth(int draft_len) const override { return draft_len - 1; }
  bool carries_drafts() const override { return true; }
  int carried_drafts(const ImageState& image) const override {
    const auto it = carried_.find(image.id);
    return it == carried_.end() ? 0 : static_cast<int>(it->second.size());
  }
  void start(std::span<ImageState* const>, const TargetPrefill&) override {}
  void propose(std::span<ImageState* const> active, std::span<const int> max_depth,
               std::vector<DraftTree>& trees) override;
  void finish_round(ImageState& image, const DraftTree& tree, const VerifyOutcome& outcome,
                    const TargetRound& target) override;
  void release(const ImageState& image) override { carried_.erase(image.id); }
  void set_device_drafts(bool on) override { device_drafts_ = on; }
  const DeviceDraftRows* device_rows() const override { return rows_.q.data ? &rows_ : nullptr; }
  // Bursts (chain_commit.h): the window needs no model, so its rounds repeat on the device as
  // long as the verifier walks them there; each round's commit refills the next window
  // (refill_jacobi_window), and the decoder hands the burst's last round to finish_round.
  bool can_burst() const override { return true; }
  bool burst_fields(std::vector<RoundField>& out) const override {
    return (void)out, device_drafts_;
  }

 private:
  struct Carried {
    int32_t token;
    std::vector<float> q;
    int64_t q_row = -1;  // the device loop: q is this row of device_dist_ instead
  };
  int V_;
  SamplingParams params_;
  std::map<int, std::vector<Carried>> carried_;  // by image id
  bool device_drafts_ = false;
  Tensor device_dist_;    // the last device round's target distributions (the carried q rows)
  DeviceDraftRows rows_;  // device_dist_ while the last propose() named rows of it
};

}  // namespace tessera::speculative
