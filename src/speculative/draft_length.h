// --draft-len auto: the draft depth of each round, chosen to maximise the expected tokens per
// second, E[tokens(L)] / (cost_draft(L) + cost_verify(L)), from measured forward costs and the
// image's own acceptance so far. Model-agnostic: the costs come from the pipeline's calibration
// (pipeline/cost_cache.h), the acceptance from past rounds only, so a lossless rule stays exact
// whatever depth is chosen (the depth of a round is fixed before its drafts are drawn).
#pragma once

#include <span>
#include <vector>

namespace tessera::speculative {

struct RoundCosts {
  // verify[k - 1]: seconds of one target forward of k positions per sequence (the root and
  // k - 1 drafts); its size bounds the depth.
  std::vector<double> verify;
  double draft_step = 0.0;  // seconds per drafted position (a draft-model step; 0 for Jacobi)
};

// Expected tokens of a round of depth L when draft d is accepted with probability a[d - 1]
// given drafts 1..d-1 were (Leviathan et al. 2023, Eq. 1 generalised to per-depth rates): the
// target's own token plus sum_{d<=L} prod_{i<=d} a_i.
double expected_round_tokens(std::span<const double> acceptance, int depth);

// The per-depth acceptance of one image, from its past rounds. Counts decay by `decay` per
// round so that the estimate follows a change in acceptance (e.g. from a detailed region of the
// image to a flat one).
class AcceptanceTracker {
 public:
  explicit AcceptanceTracker(int max_depth = 0, double decay = 0.9);
  void reset();
  // A round that drafted `drafted` tokens and accepted the first `accepted` of them: depths
  // 1..min(accepted + 1, drafted) were verified.
  void observe(int drafted, int accepted);
  // Conditional acceptance per depth 1..max_depth: (accepted + s m) / (verified + s), with the
  // prior mean m the estimate of the depth above (0.5 at depth 1) and strength s = 1, so an
  // unexplored depth is assumed as good as the deepest explored one.
  std::vector<double> estimate() const;

 private:
  double decay_;
  std::vector<double> verified_, accepted_;
};

class DraftLengthPolicy {
 public:
  // max_depth: the deepest draft allowed (at most costs.verify.size() - 1). The verification
  // costs are taken as their running maximum over k (a dip in a measurement is noise).
  DraftLengthPolicy(RoundCosts costs, int max_depth);
  int max_depth() const { return max_depth_; }
  // Seconds of a round of depth L (drafting L tokens, verifying L + 1 positions).
  double round_seconds(int depth) const;
  // The depth in [1, min(max_depth, cap)] with the most expected tokens per second (ties: the
  // shorter).
  int choose(std::span<const double> acceptance, int cap) const;

 private:
  RoundCosts costs_;
  int max_depth_;
};

}  // namespace tessera::speculative
