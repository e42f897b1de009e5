// Shared pieces of every acceptance rule: the exact-greedy default and the two residuals
// (COOL-SD (Li et al., 2026) §3.1, Eq. 2 and §3.2, Eq. 5).
#include "speculative/rules/acceptance_rule.h"

#include <algorithm>

#include "sampling/sampler.h"

namespace tessera::speculative {

bool AcceptanceRule::greedy_accept(const NodeView& n) const {
  // Exact greedy SD: the draft survives iff it is the target's argmax (first maximal index, as
  // greedy sampling picks it).
  return n.token == tessera::argmax(n.p);
}

void AcceptanceRule::g_star(const NodeView& n, std::span<float> out) const {
  optimal_residual(*this, n, out);
}

void ratio_residual(const RatioRule& r, const NodeView& n, std::span<float> out) {
  const double omega = ratio_omega(r, n.position, n.draft_len);
  const size_t V = n.p.size();
  if (n.q.empty()) {  // a one-hot q only changes the entry at x~
    std::copy(n.p.begin(), n.p.end(), out.begin());
    out[n.token] = ratio_residual(r, omega, n.p[n.token], 1.0f);
    return;
  }
  for (size_t y = 0; y < V; ++y) out[y] = ratio_residual(r, omega, n.p[y], n.q[y]);
}

void exact_residual(const NodeView& n, std::span<float> out) {
  ratio_residual(RatioRule{}, n, out);  // [p - q]+ (COOL-SD Eq. 2)
}

void optimal_residual(const AcceptanceRule& rule, const NodeView& n, std::span<float> out) {
  // G* = [p - q f]+ (COOL-SD Eq. 5): f(y) is the rule's acceptance had the drafter proposed y at
  // this node. Where q(y) = 0 the term is p(y) and f need not (and must not, for cost) be
  // evaluated.
  const size_t V = n.p.size();
  std::copy(n.p.begin(), n.p.end(), out.begin());
  NodeView m = n;
  if (n.q.empty()) {  // one-hot q: only y = x~ has q(y) > 0, and q(x~) = 1
    const double f = rule.accept_probability(n);
    out[n.token] = static_cast<float>(std::max(0.0, static_cast<double>(n.p[n.token]) - f));
    return;
  }
  for (size_t y = 0; y < V; ++y) {
    const double qy = n.q[y];
    if (qy <= 0.0) continue;
    m.token = static_cast<int>(y);
    const double f = rule.accept_probability(m);
    out[y] = static_cast<float>(std::max(0.0, static_cast<double>(n.p[y]) - qy * f));
  }
}

}  // namespace tessera::speculative
