// GSD's grouped acceptance (So et al., 2025, §4, Eq. 4, Alg. 3; published code junhyukso/GSD) as
// plain data and TESSERA_HD functions on a raw row: the cluster C(x~) around the drafted token
// in the target's probability ranking, filtered by probability gap and embedding distance, and
// f = min(1, p(C)/q(C)). The CPU rule (gsd_rule.cpp) finds C in one pass, the device loop's walk
// (speculative/verify_rows.h) in passes spread over its lanes; both add the same members in the
// same order (gsd_add_member).
#pragma once

#include <cstdint>
#include <type_traits>
#if !defined(__CUDA_ARCH__)
#include <algorithm>
#include <vector>
#endif

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

// The largest G//2 the one-pass form holds (its rankings live in fixed arrays); the host rule
// finds a wider window with heaps (gsd_rule.cpp), the walk's passes form has no bound.
inline constexpr int kGsdMaxHalf = 64;

// y sorts below z in GSD's ascending ranking (Alg. 3 line 2; ties by smaller id first, a strict
// total order, as a stable sort over ids 0..V-1).
TESSERA_HD inline bool gsd_below(const float* p, int y, int z) {
  return p[y] < p[z] || (p[y] == p[z] && y < z);
}

// Adds member y of C(x~) to the cluster's masses (*pc, *qc) iff its gap |p(y) - p(x~)| <= δ and
// its squared distance to x~'s embedding <= d (the code: < both). x~ itself starts them.
TESSERA_HD inline void gsd_add_member(const GsdRuleData& r, const float* p, const float* q, int x,
                                      int y, double* pc, double* qc) {
  // Alg. 3 lines 9-10: pop if |p(y) - p(x~)| > δ or M_d[x~, y] > d (the code keeps y only if both
  // are strictly below).
  const double px = p[x];
  const double gap_signed = sub_rn(static_cast<double>(p[y]), px);
  const double gap = gap_signed < 0.0 ? -gap_signed : gap_signed;
  if (r.reference ? !(gap < r.delta) : gap > r.delta) return;
  const float* ex = r.embedding + static_cast<int64_t>(x) * r.dim;
  const float* ey = r.embedding + static_cast<int64_t>(y) * r.dim;
  double d2 = 0.0;
  for (int c = 0; c < r.dim; ++c) {
    const double diff = sub_rn(static_cast<double>(ex[c]), static_cast<double>(ey[c]));
    d2 = d2 + mul_rn(diff, diff);
  }
  if (r.reference ? !(d2 < r.d) : d2 > r.d) return;
  *pc = *pc + static_cast<double>(p[y]);
  if (q) *qc = *qc + static_cast<double>(q[y]);
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
  // The members nearest first, those below x~ before those above (every caller's order).
  double pc = p[x], qc = q ? static_cast<double>(q[x]) : 1.0;
  for (int k = 0; k < nd + nu; ++k)
    gsd_add_member(r, p, q, x, k < nd ? down[k] : up[k - nd], &pc, &qc);
  return ratio_accept(pc, qc);  // Alg. 3 line 16: accept iff u <= min(1, p'(C)/q'(C))
}

// The same f(x~) on `lanes` (walk_lanes.h), the device walk's: each neighbour found by one
// lanes.best pass over the row (the nearest below x~ not yet taken, then the next; likewise above),
// G - 1 passes in all, each spread over the lanes where the one-pass form runs on one.
template <class Lanes>
TESSERA_HD double gsd_accept_probability_on(const Lanes& lanes, const GsdRuleData& r,
                                            const float* p, const float* q, int x, int V) {
  // One thread: the one-pass form (the same members in the same order) makes one pass, not G - 1.
  if constexpr (std::is_same_v<std::decay_t<Lanes>, SerialLanes>)
    if (r.g / 2 <= kGsdMaxHalf) return gsd_accept_probability(r, p, q, x, V);
  const int half = r.g / 2 > 0 ? r.g / 2 : 0;
  const int n_down = half, n_up = half > 0 ? half - 1 : 0;
  double pc = p[x], qc = q ? static_cast<double>(q[x]) : 1.0;
  // Each member added as it is found: nothing is stored, and G is not bounded here.
  for (int k = 0, last = x; k < n_down; ++k) {  // last: below every token taken so far
    const int y = lanes.best(
        V, [&](int y) { return gsd_below(p, y, last); },
        [&](int a, int b) { return gsd_below(p, b, a); });  // the highest first
    if (y < 0) {
      if (r.reference) return 0.0;  // the code's negative slice start: NaN, rejected
      break;
    }
    gsd_add_member(r, p, q, x, y, &pc, &qc);
    last = y;
  }
  for (int k = 0, last = x; k < n_up; ++k) {  // last: above every token taken so far
    const int y = lanes.best(
        V, [&](int y) { return gsd_below(p, last, y); },
        [&](int a, int b) { return gsd_below(p, a, b); });  // the lowest first
    if (y < 0) break;
    gsd_add_member(r, p, q, x, y, &pc, &qc);
    last = y;
  }
  return ratio_accept(pc, qc);  // Alg. 3 line 16: accept iff u <= min(1, p'(C)/q'(C))
}

// G* = [p - q f]+ (COOL-SD §3.2, Eq. 5) needs f(y) for every y with q(y) > 0, each a cluster
// around y in the same ranking. Ranking the row once makes each f(y) O(G) (its window is a slice
// of the order) where a pass a token would be O(V) (O(V^2) a row). The ranking lives in the walk's
// float scratch: ids and positions as floats, exact up to 2^24 (kGsdMaxRankedVocab).
inline constexpr int kGsdMaxRankedVocab = 1 << 24;

// The length the ranking is sorted in: the smallest power of two >= V (a bitonic sort's); V is at
// most kGsdMaxRankedVocab where a ranking is made (larger V: the bound's, never used).
TESSERA_HD inline int gsd_rank_span(int V) {
  int n = 1;
  while (n < V && n < kGsdMaxRankedVocab) n <<= 1;
  return n;
}

// The scratch gsd_rank_row needs: the order, then the positions.
TESSERA_HD inline int64_t gsd_rank_scratch(int V) {
  return 2 * static_cast<int64_t>(gsd_rank_span(V));
}

// Id a sorts after id b in the ascending ranking of p's V tokens; ids >= V pad the sort's span
// and sort after every token.
TESSERA_HD inline bool gsd_ranked_after(const float* p, int V, int a, int b) {
  if (a >= V || b >= V) return a >= V && (b < V || a > b);
  return gsd_below(p, b, a);
}

// order[i]: the id at position i of GSD's ascending ranking of p (Alg. 3 line 2, gsd_below), for
// i < V; rank[y]: y's position. order holds gsd_rank_span(V) entries, rank V. A bitonic sort on
// `lanes` (walk_lanes.h): each pass compares disjoint pairs (i, i ^ j), so no two lanes touch one
// entry, and under a strict total order the result is the one sorted order however the passes
// are split. One host thread sorts with std::sort instead (the same order; O(V log V), where the
// bitonic passes run serially would be O(V log^2 V)).
template <class Lanes>
TESSERA_HD void gsd_rank_row(const Lanes& lanes, const float* p, int V, float* order, float* rank) {
  const int n = gsd_rank_span(V);
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<std::decay_t<Lanes>, SerialLanes>) {
    std::vector<int> ids(static_cast<size_t>(V));
    for (int y = 0; y < V; ++y) ids[y] = y;
    std::sort(ids.begin(), ids.end(), [p](int a, int b) { return gsd_below(p, a, b); });
    for (int i = 0; i < n; ++i) order[i] = static_cast<float>(i < V ? ids[i] : i);
    for (int i = 0; i < V; ++i) rank[ids[i]] = static_cast<float>(i);
    return;
  }
#endif
  lanes.each(n, [&](int i) { order[i] = static_cast<float>(i); });
  for (int k = 2; k <= n; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1)
      lanes.each(n, [&](int i) {
        const int l = i ^ j;
        if (l <= i) return;
        const int a = static_cast<int>(order[i]), b = static_cast<int>(order[l]);
        // Ascending where bit k of i is clear, descending where it is set.
        if (gsd_ranked_after(p, V, a, b) == ((i & k) == 0)) {
          order[i] = static_cast<float>(b);
          order[l] = static_cast<float>(a);
        }
      });
  lanes.each(V, [&](int i) { rank[static_cast<int>(order[i])] = static_cast<float>(i); });
}

// gsd_accept_probability of token x from the row's ranking (gsd_rank_row): its window is the
// slice of the order around x's position, the members added nearest first, those below x~ before
// those above, as every form adds them, so f is the same bits. No bound on G.
TESSERA_HD inline double gsd_accept_probability_ranked(const GsdRuleData& r, const float* p,
                                                       const float* q, int x, int V,
                                                       const float* order, const float* rank) {
  const int half = r.g / 2 > 0 ? r.g / 2 : 0;
  const int n_down = half, n_up = half > 0 ? half - 1 : 0;
  const int at = static_cast<int>(rank[x]);
  const int nd = n_down < at ? n_down : at, nu = n_up < V - 1 - at ? n_up : V - 1 - at;
  if (r.reference && nd < n_down) return 0.0;  // the code's negative slice start: NaN, rejected
  double pc = p[x], qc = q ? static_cast<double>(q[x]) : 1.0;
  for (int k = 0; k < nd; ++k)
    gsd_add_member(r, p, q, x, static_cast<int>(order[at - 1 - k]), &pc, &qc);
  for (int k = 0; k < nu; ++k)
    gsd_add_member(r, p, q, x, static_cast<int>(order[at + 1 + k]), &pc, &qc);
  return ratio_accept(pc, qc);  // Alg. 3 line 16: accept iff u <= min(1, p'(C)/q'(C))
}

}  // namespace tessera::speculative
