#include "speculative/draft_length.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "tessera/error.h"

namespace tessera::speculative {

double expected_round_tokens(std::span<const double> acceptance, int depth) {
  double tokens = 1.0, reach = 1.0;
  for (int d = 0; d < depth && d < static_cast<int>(acceptance.size()); ++d) {
    reach *= acceptance[d];
    tokens += reach;
  }
  return tokens;
}

AcceptanceTracker::AcceptanceTracker(int max_depth, double decay)
    : decay_(decay), verified_(max_depth, 0.0), accepted_(max_depth, 0.0) {}

void AcceptanceTracker::reset() {
  std::fill(verified_.begin(), verified_.end(), 0.0);
  std::fill(accepted_.begin(), accepted_.end(), 0.0);
}

void AcceptanceTracker::observe(int drafted, int accepted) {
  const int n = static_cast<int>(verified_.size());
  for (int d = 0; d < n; ++d) {
    verified_[d] *= decay_;
    accepted_[d] *= decay_;
  }
  const int verified = std::min({accepted + 1, drafted, n});
  for (int d = 0; d < verified; ++d) verified_[d] += 1.0;
  for (int d = 0; d < std::min(accepted, n); ++d) accepted_[d] += 1.0;
}

namespace {
// Per depth (accepted + s m) / (verified + s): the prior m is the depth above's estimate (0.5 at
// depth 1) and s = 1, so an unexplored depth is assumed as good as the deepest explored one.
std::vector<double> chained_estimate(const std::vector<double>& verified,
                                     const std::vector<double>& accepted) {
  constexpr double kStrength = 1.0;
  std::vector<double> a(verified.size());
  double prior = 0.5;
  for (size_t d = 0; d < a.size(); ++d) {
    a[d] = (accepted[d] + kStrength * prior) / (verified[d] + kStrength);
    prior = a[d];
  }
  return a;
}
}  // namespace

std::vector<double> AcceptanceTracker::estimate() const {
  return chained_estimate(verified_, accepted_);
}

void set_tree_costs(RoundCosts& costs, std::span<const int> depth, std::span<const int> children) {
  check(depth.size() == children.size(), "internal: tree costs of mismatched sizes");
  int max_depth = 0;
  for (int d : depth) max_depth = std::max(max_depth, d);
  costs.tree_nodes.assign(max_depth, 0);
  costs.tree_rows.assign(max_depth, 0);
  for (size_t u = 0; u < depth.size(); ++u) {
    for (int d = depth[u]; d <= max_depth; ++d) costs.tree_nodes[d - 1]++;
    if (children[u] > 0 && depth[u] < max_depth) costs.tree_rows[depth[u]]++;  // feeds depth + 1
  }
  if (max_depth > 0) costs.tree_rows[0] = 1;  // the root's children: the catch-up's row
}

DraftLengthPolicy::DraftLengthPolicy(RoundCosts costs, int max_depth, bool carries_drafts)
    : costs_(std::move(costs)), max_depth_(max_depth), carries_drafts_(carries_drafts) {
  const bool tree = !costs_.tree_nodes.empty();
  check(!tree || (costs_.tree_rows.size() == costs_.tree_nodes.size() &&
                  max_depth <= static_cast<int>(costs_.tree_nodes.size())),
        "internal: --draft-len auto on a tree cut deeper than the tree");
  check(max_depth >= 1 && round_nodes(max_depth) < static_cast<int>(costs_.verify.size()),
        "internal: --draft-len auto needs the cost of verifying " +
            std::to_string(round_nodes(std::max(max_depth, 1)) + 1) + " positions; " +
            std::to_string(costs_.verify.size()) + " were calibrated");
  // A forward of more positions reads the same weights and does more work: a measured dip is
  // noise (another process's burst during a shorter k), so the costs are made non-decreasing.
  for (size_t k = 1; k < costs_.verify.size(); ++k)
    costs_.verify[k] = std::max(costs_.verify[k], costs_.verify[k - 1]);
}

int DraftLengthPolicy::round_nodes(int depth) const {
  return costs_.tree_nodes.empty() ? depth : costs_.tree_nodes[depth - 1];
}

double DraftLengthPolicy::draft_seconds(int depth) const {
  if (costs_.tree_nodes.empty()) return depth * costs_.draft_step;
  double draft = 0.0;
  for (int d = 1; d <= depth; ++d)
    draft += costs_.draft_step * costs_.verify[costs_.tree_rows[d - 1] - 1] / costs_.verify[0];
  return draft;
}

double DraftLengthPolicy::round_seconds(int depth) const {
  return draft_seconds(depth) + costs_.verify[round_nodes(depth)];
}

int DraftLengthPolicy::choose_nodes(const ImageAcceptance& image, int depth,
                                    std::span<const double> values) const {
  const int top =
      std::min(static_cast<int>(values.size()), static_cast<int>(costs_.verify.size()) - 1);
  if (top < 1) return std::min<int>(1, static_cast<int>(values.size()));
  const double c = image.values.ratio(), draft = draft_seconds(std::max(depth, 1));
  int best = 1;
  double best_rate = -1.0, sum = 0.0;
  for (int n = 1; n <= top; ++n) {
    sum += values[n - 1];
    const double rate = (1.0 + c * sum) / (draft + costs_.verify[n]);
    if (rate > best_rate) {
      best_rate = rate;
      best = n;
    }
  }
  return best;
}

int DraftLengthPolicy::choose_valued(const ImageAcceptance& image, int cap) const {
  const int top = std::min(max_depth_, cap);
  const std::vector<double> acceptance = image.depths.estimate();
  int best = 0;
  double best_rate = -1.0;
  for (int L = 1; L <= top; ++L) {
    const double nodes = std::min<double>(image.kept.mean(L), costs_.tree_nodes[L - 1]);
    // Verification of a fractional node count: between its neighbours' measured costs.
    const int lo = static_cast<int>(nodes);
    const double frac = nodes - lo;
    const double verify =
        costs_.verify[lo] + (lo + 1 < static_cast<int>(costs_.verify.size())
                                 ? frac * (costs_.verify[lo + 1] - costs_.verify[lo])
                                 : 0.0);
    const double rate = expected_round_tokens(acceptance, L) / (draft_seconds(L) + verify);
    if (rate > best_rate) {
      best_rate = rate;
      best = L;
    }
  }
  return best;
}

void KeptNodes::observe(int depth, int nodes) {
  if (depth < 1 || depth > static_cast<int>(nodes_.size())) return;
  nodes_[depth - 1] = decay_ * nodes_[depth - 1] + nodes;
  rounds_[depth - 1] = decay_ * rounds_[depth - 1] + 1.0;
}

double KeptNodes::mean(int depth) const {
  const size_t d = static_cast<size_t>(depth - 1);
  return d < nodes_.size() && rounds_[d] > 0.0 ? nodes_[d] / rounds_[d] : depth;
}

void ValueCalibration::observe(double predicted, int accepted) {
  predicted_ = decay_ * predicted_ + predicted;
  accepted_ = decay_ * accepted_ + accepted;
}

int DraftLengthPolicy::choose(std::span<const double> acceptance, int cap) const {
  const int top = std::min(max_depth_, cap);
  int best = 0;  // cap 0: nothing left to draft
  double best_rate = -1.0;
  for (int L = 1; L <= top; ++L) {
    const double rate = expected_round_tokens(acceptance, L) / round_seconds(L);
    if (rate > best_rate) {
      best_rate = rate;
      best = L;
    }
  }
  return best;
}

int DraftLengthPolicy::choose_jacobi(const JacobiAcceptance& acceptance, int cap, int near) const {
  const int top = std::min(max_depth_, cap);
  if (top < 1) return 0;
  const std::vector<double> carried = acceptance.carried();
  const double fresh = acceptance.fresh();
  const int from = std::clamp(near - 2, 1, top), to = std::clamp(near + 2, 1, top);
  int best = from;
  double best_rate = -1.0;
  for (int D = from; D <= to; ++D) {
    const double rate = jacobi_round_tokens(carried, fresh, D) / round_seconds(D);
    if (rate > best_rate) {
      best_rate = rate;
      best = D;
    }
  }
  return best;
}

ImageAcceptance DraftLengthPolicy::start() const {
  ImageAcceptance a{AcceptanceTracker(max_depth_),
                    JacobiAcceptance(max_depth_),
                    0,
                    ValueCalibration(),
                    KeptNodes(max_depth_),
                    0};
  a.depth = costs_.valued ? choose_valued(a, max_depth_) : choose(a.depths.estimate(), max_depth_);
  return a;
}

int DraftLengthPolicy::choose(ImageAcceptance& image, int cap) const {
  if (cap <= 0) return 0;
  image.depth = carries_drafts_ ? choose_jacobi(image.window, cap, image.depth)
                : costs_.valued ? choose_valued(image, cap)
                                : choose(image.depths.estimate(), cap);
  return image.depth;
}

int DraftLengthPolicy::choose_held(ImageAcceptance& image, int cap, int hold) const {
  const int round = image.rounds++;
  // Near the image's end a cap below the held depth chooses afresh (image.depth stays the
  // round's depth, which a dynamic tree's node budget reads).
  if (image.held > 0 && image.depth <= cap) {
    image.held--;
    return image.depth;
  }
  const int last = image.depth, depth = choose(image, cap);
  // Spans are powers of two, so that every span ends where every longer one may: up to the
  // largest power of two within the hold.
  int top = 1;
  while (2 * top <= hold) top *= 2;
  image.span = depth == last && image.span > 0 ? std::min(2 * image.span, top) : 1;
  // Held up to the next multiple of the span (aligned across images that started together).
  image.held = image.span - 1 - round % image.span;
  return depth;
}

void DraftLengthPolicy::observe(ImageAcceptance& image, int drafted, int carried, int accepted,
                                int nodes, double value_sum) const {
  if (costs_.valued && nodes > 0) {
    image.values.observe(value_sum, accepted);
    image.kept.observe(image.depth, nodes);
  }
  if (carries_drafts_)
    image.window.observe(drafted, carried, accepted);
  else
    image.depths.observe(drafted, accepted);
}

JacobiAcceptance::JacobiAcceptance(int max_depth, double decay)
    : decay_(decay), verified_(max_depth, 0.0), accepted_(max_depth, 0.0) {}

void JacobiAcceptance::observe(int drafted, int carried, int accepted) {
  const int n = static_cast<int>(verified_.size());
  for (int d = 0; d < n; ++d) {
    verified_[d] *= decay_;
    accepted_[d] *= decay_;
  }
  fresh_verified_ *= decay_;
  fresh_accepted_ *= decay_;
  // Depths 1..min(accepted + 1, drafted) were verified, the first `accepted` accepted.
  const int verified = std::min(accepted + 1, drafted);
  for (int d = 1; d <= verified; ++d) {
    const bool ok = d <= accepted;
    if (d <= carried) {
      if (d > n) continue;
      verified_[d - 1] += 1.0;
      accepted_[d - 1] += ok ? 1.0 : 0.0;
    } else {
      fresh_verified_ += 1.0;
      fresh_accepted_ += ok ? 1.0 : 0.0;
    }
  }
}

std::vector<double> JacobiAcceptance::carried() const {
  return chained_estimate(verified_, accepted_);
}

double JacobiAcceptance::fresh() const {
  return fresh_accepted_ / (fresh_verified_ + 1.0);
}

double jacobi_round_tokens(std::span<const double> carried, double fresh, int depth) {
  const int D = depth;
  if (D <= 0) return 1.0;
  // States c = 0..D carried drafts; P[c][c'] and E[a + 1 | c].
  const int S = D + 1, n = static_cast<int>(carried.size());
  std::vector<double> P(static_cast<size_t>(S) * S, 0.0), tokens(S, 0.0);
  for (int c = 0; c < S; ++c) {
    double reach = 1.0;  // P(drafts 1..a accepted)
    for (int a = 0; a < D; ++a) {
      const double acc = a >= c ? fresh : n == 0 ? 0.5 : carried[std::min(a, n - 1)];
      const double stop = reach * (1.0 - acc);  // draft a + 1 rejected: D - a carried on
      P[c * S + (D - a)] += stop;
      tokens[c] += stop * (a + 1);
      reach *= acc;
    }
    P[c * S + 0] += reach;  // all D accepted: the next window starts fresh
    tokens[c] += reach * (D + 1);
  }
  // The stationary distribution: pi (P - I) = 0 and sum(pi) = 1 (replacing the last equation),
  // solved by Gauss-Jordan elimination with partial pivoting on the transposed system.
  const int W = S + 1;
  std::vector<double> A(static_cast<size_t>(S) * W, 0.0);
  for (int i = 0; i < S; ++i)
    for (int j = 0; j < S; ++j) A[i * W + j] = P[j * S + i] - (i == j ? 1.0 : 0.0);
  for (int j = 0; j < W; ++j) A[(S - 1) * W + j] = 1.0;
  for (int col = 0; col < S; ++col) {
    int piv = col;
    for (int r = col + 1; r < S; ++r)
      if (std::fabs(A[r * W + col]) > std::fabs(A[piv * W + col])) piv = r;
    if (piv != col)
      for (int j = 0; j < W; ++j) std::swap(A[col * W + j], A[piv * W + j]);
    const double d = A[col * W + col];
    if (std::fabs(d) < 1e-300) continue;
    for (int r = 0; r < S; ++r) {
      if (r == col) continue;
      const double f = A[r * W + col] / d;
      if (f != 0.0)
        for (int j = col; j < W; ++j) A[r * W + j] -= f * A[col * W + j];
    }
  }
  double expected = 0.0;
  for (int i = 0; i < S; ++i) {
    const double d = A[i * W + i];
    if (std::fabs(d) >= 1e-300) expected += A[i * W + S] / d * tokens[i];
  }
  return expected;
}

}  // namespace tessera::speculative
