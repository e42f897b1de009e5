// GSD's grouped acceptance (So et al., 2025, §4, Eq. 4, Alg. 3; published code junhyukso/GSD) as
// plain data and TESSERA_HD functions on a raw row: the cluster C(x~) around the drafted token
// in the target's probability ranking, filtered by probability gap and embedding distance, and
// f = min(1, p(C)/q(C)). The CPU rule (gsd_rule.cpp) finds C in one pass, the device loop's walk
// (speculative/verify_rows.h) in passes spread over its lanes; both find the same members in the
// same order and sum them with gsd_cluster_ratio.
#pragma once

#include <cstdint>

#include "common/host_device.h"
#include "common/rounding.h"
#include "speculative/rules/ratio_rule.h"
#include "speculative/walk_lanes.h"

namespace tessera::speculative {

struct GsdRuleData {
  int32_t g = 10;         // G: the window of the ranking around x~ (G//2 below, G//2 - 1 above)
  float d = 0.5f;         // embedding distance bound (squared Euclidean)
  float delta = 0.15f;    // probability gap bound
  int32_t reference = 0;  // 1: the published code's strict bounds and its empty slice
  const float* embedding = nullptr;  // [rows, dim], row-major; the verifier uploads it once
  int32_t rows = 0, dim = 0;
};

// The largest G//2 the shared function holds (its rankings live in fixed arrays); a rule with a
// larger G verifies on the host only.
inline constexpr int kGsdMaxHalf = 64;

// y sorts below z in GSD's ascending ranking (Alg. 3 line 2; ties by smaller id first, a strict
// total order, as a stable sort over ids 0..V-1).
TESSERA_HD inline bool gsd_below(const float* p, int y, int z) {
  return p[y] < p[z] || (p[y] == p[z] && y < z);
}

// f(x~) = min(1, p(C)/q(C)) from C's members other than x~ (the tokens just below x~ in the
// ranking, nearest first: down[0..nd); then those just above, nearest first: up[0..nu)), each
// kept iff its gap |p(y) - p(x~)| <= δ and its squared distance to x~'s embedding <= d (the code:
// < both); x~ always is. Every caller sums the same terms in the same order.
TESSERA_HD inline double gsd_cluster_ratio(const GsdRuleData& r, const float* p, const float* q,
                                           int x, const int* down, int nd, const int* up, int nu) {
  const double px = p[x], delta = r.delta, dmax = r.d;
  const float* ex = r.embedding + static_cast<int64_t>(x) * r.dim;
  double pc = px, qc = q ? static_cast<double>(q[x]) : 1.0;
  for (int k = 0; k < nd + nu; ++k) {
    const int y = k < nd ? down[k] : up[k - nd];
    // Alg. 3 lines 9-10: pop if |p(y) - p(x~)| > δ or M_d[x~, y] > d (the code keeps y only if
    // both are strictly below).
    const double gap_signed = sub_rn(static_cast<double>(p[y]), px);
    const double gap = gap_signed < 0.0 ? -gap_signed : gap_signed;
    if (r.reference ? !(gap < delta) : gap > delta) continue;
    const float* ey = r.embedding + static_cast<int64_t>(y) * r.dim;
    double d2 = 0.0;
    for (int c = 0; c < r.dim; ++c) {
      const double diff = sub_rn(static_cast<double>(ex[c]), static_cast<double>(ey[c]));
      d2 = d2 + mul_rn(diff, diff);
    }
    if (r.reference ? !(d2 < dmax) : d2 > dmax) continue;
    pc = pc + static_cast<double>(p[y]);
    if (q) qc = qc + static_cast<double>(q[y]);
  }
  return ratio_accept(pc, qc);  // Alg. 3 line 16: accept iff u <= min(1, p'(C)/q'(C))
}

// f(x~) for the drafted token x of row p (V entries), q its draft distribution or null (one-hot at
// x, Jacobi's fresh drafts). The slice [r - G//2, r + G//2) around x~'s rank r holds the G//2
// tokens just below it and the G//2 - 1 just above (fewer at the ends). The reference form rejects
// when the code's slice start r - 7 is negative (Python's empty slice: 0/0). Requires G//2 <=
// kGsdMaxHalf. One pass over the row keeping both lists sorted (the host rule's).
TESSERA_HD inline double gsd_accept_probability(const GsdRuleData& r, const float* p,
                                                const float* q, int x, int V) {
  const int half = r.g / 2 > 0 ? r.g / 2 : 0;
  const int n_down = half, n_up = half > 0 ? half - 1 : 0;
  // down: the kept tokens below x~, nearest (highest) first; up: above it, nearest (lowest) first.
  int down[kGsdMaxHalf], up[kGsdMaxHalf];
  int nd = 0, nu = 0;
  for (int y = 0; y < V; ++y) {
    if (y == x) continue;
    if (gsd_below(p, y, x)) {
      if (n_down == 0 || (nd == n_down && !gsd_below(p, down[nd - 1], y))) continue;
      int i = nd < n_down ? nd++ : nd - 1;
      for (; i > 0 && gsd_below(p, down[i - 1], y); --i) down[i] = down[i - 1];
      down[i] = y;
    } else {
      if (n_up == 0 || (nu == n_up && !gsd_below(p, y, up[nu - 1]))) continue;
      int i = nu < n_up ? nu++ : nu - 1;
      for (; i > 0 && gsd_below(p, y, up[i - 1]); --i) up[i] = up[i - 1];
      up[i] = y;
    }
  }
  if (r.reference && nd < n_down) return 0.0;  // the code's negative slice start: NaN, rejected
  return gsd_cluster_ratio(r, p, q, x, down, nd, up, nu);
}

// The same f(x~) on `lanes` (walk_lanes.h), the device walk's: each neighbour found by one
// lanes.best pass over the row (the nearest below x~ not yet taken, then the next; likewise above),
// G - 1 passes in all, each spread over the lanes where the one-pass form runs on one.
template <class Lanes>
TESSERA_HD double gsd_accept_probability_on(const Lanes& lanes, const GsdRuleData& r,
                                            const float* p, const float* q, int x, int V) {
  const int half = r.g / 2 > 0 ? r.g / 2 : 0;
  const int n_down = half, n_up = half > 0 ? half - 1 : 0;
  int down[kGsdMaxHalf], up[kGsdMaxHalf];
  int nd = 0, nu = 0;
  while (nd < n_down) {
    const int last = nd > 0 ? down[nd - 1] : x;  // below every token taken so far
    const int y = lanes.best(
        V, [&](int y) { return y != x && gsd_below(p, y, last); },
        [&](int a, int b) { return gsd_below(p, b, a); });  // the highest first
    if (y < 0) break;
    down[nd++] = y;
  }
  if (r.reference && nd < n_down) return 0.0;  // the code's negative slice start: NaN, rejected
  while (nu < n_up) {
    const int last = nu > 0 ? up[nu - 1] : x;  // above every token taken so far
    const int y = lanes.best(
        V, [&](int y) { return y != x && gsd_below(p, last, y); },
        [&](int a, int b) { return gsd_below(p, a, b); });  // the lowest first
    if (y < 0) break;
    up[nu++] = y;
  }
  return gsd_cluster_ratio(r, p, q, x, down, nd, up, nu);
}

}  // namespace tessera::speculative
