#include "speculative/draft_length.h"

#include <algorithm>
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

std::vector<double> AcceptanceTracker::estimate() const {
  constexpr double kStrength = 1.0;
  std::vector<double> a(verified_.size());
  double prior = 0.5;
  for (size_t d = 0; d < a.size(); ++d) {
    a[d] = (accepted_[d] + kStrength * prior) / (verified_[d] + kStrength);
    prior = a[d];
  }
  return a;
}

DraftLengthPolicy::DraftLengthPolicy(RoundCosts costs, int max_depth)
    : costs_(std::move(costs)), max_depth_(max_depth) {
  check(max_depth >= 1 && max_depth < static_cast<int>(costs_.verify.size()),
        "internal: --draft-len auto needs the cost of verifying " + std::to_string(max_depth + 1) +
            " positions; " + std::to_string(costs_.verify.size()) + " were calibrated");
  // A forward of more positions reads the same weights and does more work: a measured dip is
  // noise (another process's burst during a shorter k), so the costs are made non-decreasing.
  for (size_t k = 1; k < costs_.verify.size(); ++k)
    costs_.verify[k] = std::max(costs_.verify[k], costs_.verify[k - 1]);
}

double DraftLengthPolicy::round_seconds(int depth) const {
  return depth * costs_.draft_step + costs_.verify[depth];
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

}  // namespace tessera::speculative
