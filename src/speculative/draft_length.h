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
  // A static draft tree (issue 41's node budget; both empty: a chain). tree_nodes[d - 1]: the
  // nodes of the tree cut at depth d, which the target verifies with the root; tree_rows[d - 1]:
  // the rows of the draft forward that gives depth d's nodes (1 for the root's children, then
  // the nodes of depth d - 1 that have children), EAGLE-1's one drafter forward per depth.
  std::vector<int> tree_nodes = {}, tree_rows = {};
  // A dynamic tree (EAGLE-2): tree_nodes are its candidates down to each depth, of which each
  // round keeps as many as pay for their verification (choose_nodes); the depth choice reads the
  // nodes the image's past rounds of that depth kept.
  bool valued = false;
};

// The tree fields of RoundCosts for a tree whose node d (0-based, parents first) has depth
// depth[d] and children[d] children.
void set_tree_costs(RoundCosts& costs, std::span<const int> depth, std::span<const int> children);

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

// --draft-len auto for drafters that carry drafts over (Jacobi iteration: SJD, and GSD on it). A
// Jacobi window starts each round with the drafts the last round left unverified, re-drafted from
// the target's distributions there ("carried"), followed by fresh positions (uniform random
// tokens, accepted with probability p(x) ~ 1/V). A longer window carries more drafts into the next
// round, so its length changes the acceptance at every depth; the per-depth model above sees
// depths only and chose windows of 3-4 positions on the emoji model where 5 were fastest. This
// tracker keeps the acceptance of carried drafts per depth and of fresh drafts, and
// jacobi_round_tokens predicts a window's tokens per round from them.
class JacobiAcceptance {
 public:
  // decay: the weight of the last round's counts per round (the loop uses 0.98: carried drafts
  // at deep depths are verified rarely, and 0.9 left their estimates to a handful of rounds).
  explicit JacobiAcceptance(int max_depth = 0, double decay = 0.98);
  // A round that drafted `drafted` tokens, the first `carried` of them carried over, and whose
  // first `accepted` drafts were accepted.
  void observe(int drafted, int carried, int accepted);
  // A carried draft's acceptance at depths 1..max_depth given the drafts before it were
  // accepted: (accepted + s m) / (verified + s) with the prior m the depth above's estimate (0.5
  // at depth 1) and s = 1, as AcceptanceTracker.
  std::vector<double> carried() const;
  // A fresh draft's acceptance over all depths (prior 0, strength 1).
  double fresh() const;

 private:
  double decay_;
  std::vector<double> verified_, accepted_;
  double fresh_verified_ = 0.0, fresh_accepted_ = 0.0;
};

// How a drafter's own estimates of acceptance compare with what verification accepts: EAGLE-2
// (arXiv:2406.16858 §4.1) ranks a dynamic tree's nodes by their value, the product of the draft
// confidences along the path, as an estimate of the chance the node is accepted. Under exact
// verification with top-k children a node is accepted with the product of the target's p along
// its path, so the expected accepted drafts of a tree are the sum of those products; the drafter's
// values estimate it, and this ratio, from the image's past rounds, corrects the estimate (p is
// not q; a relaxed rule accepts more).
class ValueCalibration {
 public:
  explicit ValueCalibration(double decay = 0.9) : decay_(decay) {}
  // A round whose tree's values summed to `predicted` and that accepted `accepted` drafts.
  void observe(double predicted, int accepted);
  // (accepted + 1) / (predicted + 1): 1 before any round (the values taken at their word).
  double ratio() const { return (accepted_ + 1.0) / (predicted_ + 1.0); }

 private:
  double decay_, predicted_ = 0.0, accepted_ = 0.0;
};

// The nodes a dynamic tree's budget kept in an image's past rounds, per chosen depth: decayed
// means, L at depth L before any round of that depth (a chain's count).
class KeptNodes {
 public:
  explicit KeptNodes(int max_depth = 0, double decay = 0.9)
      : decay_(decay), nodes_(max_depth, 0.0), rounds_(max_depth, 0.0) {}
  void observe(int depth, int nodes);
  double mean(int depth) const;

 private:
  double decay_;
  std::vector<double> nodes_, rounds_;
};

// One image's statistics for --draft-len auto: the model its policy reads (per depth, or the
// window for drafters that carry drafts over), the depth it chose last, and for a dynamic tree
// the calibration of its values and the nodes its rounds kept.
struct ImageAcceptance {
  AcceptanceTracker depths;
  JacobiAcceptance window;
  int depth = 0;
  ValueCalibration values;
  KeptNodes kept;
  int held = 0;    // rounds `depth` is still held for (choose_held)
  int span = 0;    // the span of the last choice (its rounds: up to the next multiple of it)
  int rounds = 0;  // the image's rounds so far (choose_held's calls)
};

class DraftLengthPolicy {
 public:
  // max_depth: the deepest draft allowed (its nodes at most costs.verify.size() - 1; a tree:
  // at most costs.tree_nodes.size()). The choice of a depth is the node budget of a tree: the
  // deepest cut whose expected tokens per second is highest. The verification
  // costs are taken as their running maximum over k (a dip in a measurement is noise).
  // carries_drafts: the drafter carries its unverified drafts into the next window
  // (Drafter::carries_drafts): the choice then reads the window model.
  DraftLengthPolicy(RoundCosts costs, int max_depth, bool carries_drafts = false);
  int max_depth() const { return max_depth_; }
  // Nodes of a round of depth L: L for a chain, the tree's nodes down to depth L.
  int round_nodes(int depth) const;
  // Seconds of a round of depth L: drafting (L draft forwards; a tree's forward of r rows costs
  // draft_step times the target's measured cost ratio of r positions to one, since both are
  // transformers on the same backend) and verifying the root and the round's nodes.
  double round_seconds(int depth) const;
  double draft_seconds(int depth) const;  // the drafting part
  // A dynamic tree's node budget (issue 41, EAGLE-2's values): `values` are the drafted
  // candidates' values, best first (a parent before its children, so every prefix is a tree),
  // drafted to `depth`. Returns the n in [1, values.size()] (and within the measured costs) with
  // the most expected tokens per second, (1 + c sum_{i<n} values[i]) / (draft_seconds(depth) +
  // the verification of 1 + n positions), c the image's ValueCalibration; ties: the smaller.
  // Lossless rules stay exact: the budget reads this round's draft distributions and past rounds
  // only, never the target's draws.
  int choose_nodes(const ImageAcceptance& image, int depth, std::span<const double> values) const;
  // The depth in [1, min(max_depth, cap)] with the most expected tokens per second (ties: the
  // shorter).
  int choose(std::span<const double> acceptance, int cap) const;
  // The same for a dynamic tree, with the nodes of depth L the image's past rounds kept.
  int choose_valued(const ImageAcceptance& image, int cap) const;
  // For drafters that carry drafts over (JacobiAcceptance below): the depth in [1, min(max_depth,
  // cap)] with the most tokens per second in a window held at that depth, searched within 2 of
  // `near` (the image's last choice; the rate is unimodal in the depth in practice, and a local
  // search keeps the cost per round to a few small linear solves).
  int choose_jacobi(const JacobiAcceptance& acceptance, int cap, int near) const;

  // A new image's statistics; its first window is the per-depth choice from the prior.
  ImageAcceptance start() const;
  // The depth of the image's next round (at most cap), from its past rounds only.
  int choose(ImageAcceptance& image, int cap) const;
  // The same, held for spans of rounds: the device loop's bursts repeat one chain shape
  // (LoopSettings::hold_depth). A choice equal to the last doubles the span, up to the largest
  // power of two within `hold`;
  // another starts a span of one, so that an image's first rounds (on the prior) and a change of
  // acceptance are followed as closely as before; a cap below the held depth chooses afresh. A
  // span of s ends where the image's round count reaches a multiple of s, so the images of a
  // batch that started together end their spans together, and a burst (which ends where the
  // first image's span does) is not cut short by another image's offset. The rounds are the
  // image's own: an image's lengths do not depend on its batch. Past rounds only still: a held
  // depth was chosen before the round's drafts were drawn, so a lossless rule stays exact.
  int choose_held(ImageAcceptance& image, int cap, int hold) const;
  // A round of the image that drafted `drafted` tokens, the first `carried` of them carried over,
  // and accepted the first `accepted`. A dynamic tree's round also gives its `nodes` and the sum
  // of their values (choose_nodes' calibration).
  void observe(ImageAcceptance& image, int drafted, int carried, int accepted, int nodes = 0,
               double value_sum = 0.0) const;

 private:
  RoundCosts costs_;
  int max_depth_;
  bool carries_drafts_;
};

// Expected tokens per round (accepted drafts + the target's token) of a Jacobi window of depth D
// held at D, with carried[d - 1] a carried draft's acceptance at depth d and `fresh` a fresh
// draft's. A round that starts with c carried drafts (depths 1..c) and accepts a < D drafts
// carries D - a into the next round (the target's distributions after the rejected draft); one
// that accepts all D starts the next with none. The tokens are E[a + 1 | c] under the stationary
// distribution of this chain over c in [0, D].
double jacobi_round_tokens(std::span<const double> carried, double fresh, int depth);

}  // namespace tessera::speculative
