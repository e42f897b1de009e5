// A drafter that records what the speculative loop asked of it and what came of it, round by
// round and image by image (test_draft_length_loop.cpp, test_spec_loop.cpp): the depth of every
// round, the image's cap, the drafts carried into the window, the drafts accepted. It wraps the
// drafter that does the drafting; with `reject`, it turns every draft into one the target rejects.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "delegating_drafter.h"
#include "speculative/drafters/drafter.h"

namespace tessera::test {

// One round of one image as the drafter saw it.
struct RoundRecord {
  int cap = 0;       // tokens the image may still draft (min(loop cap, tokens left - 1))
  int depth = 0;     // the depth asked of the drafter
  int carried = 0;   // drafts carried into the window (Jacobi), at most `depth`
  int drafted = 0;   // tree size returned
  int accepted = 0;  // drafts accepted
};

// Wraps a drafter and records every image's rounds. With `reject`, each draft node is replaced by
// a token the target cannot sample (q and p both zero there under top-k: the inner drafter is the
// target itself), drafted with certainty (one-hot q): verification rejects it, always.
class RecordingDrafter : public DelegatingDrafter {
 public:
  RecordingDrafter(speculative::Drafter& inner, int depth_cap, int n_tokens, bool reject)
      : DelegatingDrafter(inner), depth_cap_(depth_cap), n_tokens_(n_tokens), reject_(reject) {}
  void propose(std::span<ImageState* const> active, std::span<const int> max_depth,
               std::vector<speculative::DraftTree>& trees) override {
    std::vector<int> carried;
    for (ImageState* im : active) carried.push_back(inner_.carried_drafts(*im));
    inner_.propose(active, max_depth, trees);
    for (size_t j = 0; j < active.size(); ++j) {
      const ImageState& im = *active[j];
      RoundRecord r;
      r.cap = std::min(depth_cap_, n_tokens_ - static_cast<int>(im.tokens.size()) - 1);
      r.depth = max_depth[j];
      r.carried = std::min(carried[j], r.depth);
      rounds[im.id].push_back(r);
      if (!reject_) continue;
      for (speculative::DraftNode& n : trees[j]) {
        const auto impossible = std::find(n.q.begin(), n.q.end(), 0.0f);
        ASSERT_NE(impossible, n.q.end()) << "needs a top-k below the vocabulary";
        n.token = static_cast<int32_t>(impossible - n.q.begin());
        std::fill(n.q.begin(), n.q.end(), 0.0f);
        n.q[n.token] = 1.0f;
      }
    }
  }
  void finish_round(ImageState& image, const speculative::DraftTree& tree,
                    const speculative::VerifyOutcome& outcome,
                    const speculative::TargetRound& target) override {
    RoundRecord& r = rounds[image.id].back();
    r.drafted = static_cast<int>(tree.size());
    r.accepted = static_cast<int>(outcome.accepted.size());
    inner_.finish_round(image, tree, outcome, target);
  }

  std::map<int, std::vector<RoundRecord>> rounds;  // by image id

 private:
  int depth_cap_, n_tokens_;
  bool reject_;
};

}  // namespace tessera::test
