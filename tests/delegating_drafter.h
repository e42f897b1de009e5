// A drafter that hands every call to another: the base of the tests' wrappers, which override
// the calls they record, check or mutate (test_eagle_drafter.cpp, test_medusa_drafter.cpp,
// test_hawk_drafter.cpp).
#pragma once

#include "speculative/drafters/drafter.h"

namespace tessera::test {

class DelegatingDrafter : public speculative::Drafter {
 public:
  explicit DelegatingDrafter(speculative::Drafter& inner) : inner_(inner) {}
  std::string name() const override { return inner_.name(); }
  int draft_depth(int len) const override { return inner_.draft_depth(len); }
  int max_nodes(int len) const override { return inner_.max_nodes(len); }
  HiddenState hidden_state() const override { return inner_.hidden_state(); }
  bool carries_drafts() const override { return inner_.carries_drafts(); }
  int carried_drafts(const ImageState& im) const override { return inner_.carried_drafts(im); }
  void start(std::span<ImageState* const> images,
             const speculative::TargetPrefill& prefill) override {
    inner_.start(images, prefill);
  }
  void propose(std::span<ImageState* const> active, std::span<const int> max_depth,
               std::vector<speculative::DraftTree>& trees) override {
    inner_.propose(active, max_depth, trees);
  }
  void set_node_budget(speculative::NodeBudget budget) override {
    inner_.set_node_budget(std::move(budget));
  }
  void set_device_drafts(bool on) override { inner_.set_device_drafts(on); }
  const speculative::DeviceDraftRows* device_rows() const override { return inner_.device_rows(); }
  DeviceDrafts device_drafts() const override { return inner_.device_drafts(); }
  void finish_round(ImageState& im, const speculative::DraftTree& tree,
                    const speculative::VerifyOutcome& out,
                    const speculative::TargetRound& target) override {
    inner_.finish_round(im, tree, out, target);
  }
  void release(const ImageState& im) override { inner_.release(im); }
  int64_t batched_forwards() const override { return inner_.batched_forwards(); }

 protected:
  speculative::Drafter& inner_;
};

}  // namespace tessera::test
