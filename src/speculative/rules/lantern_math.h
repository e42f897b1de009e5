// LANTERN's relaxation (Jang et al., 2025, §4.2-4.3, Alg. 1-2; LANTERN++'s λ-rule) as plain data
// and TESSERA_HD functions on raw rows: the accepted neighbour set A(k,δ) walked over the latent
// neighbour table, the relaxed acceptance, the residual and the greedy test. The CPU rule
// (lantern_rule.cpp) walks A with lantern_set, and the device loop's walk
// (speculative/verify_rows.h) uses all of them, so both apply one formula; the table is a
// [V, table_k] int32 array wherever the rows are (LatentNeighbours's, or its upload).
#pragma once

#include <cstdint>

#include "common/host_device.h"
#include "sampling/sampling_rules.h"
#include "speculative/rules/ratio_rule.h"

namespace tessera::speculative {

struct LanternRuleData {
  int32_t others = 0;              // neighbours walked: k - 1 (paper: B_k holds x~) or k (code)
  int32_t zeroed = 0;              // the code's residual zeroes the k + 1 nearest (reference)
  float delta = 0.1f;              // δ budget (when lambda <= 0)
  float lambda = 0.0f;             // > 0: λ budget, λ p(x~) (paper) or (λ - 1) p(x~) (code rule)
  int32_t lambda_code = 0;         // 1: the code's λ convention
  int32_t reference = 0;           // 1: jadohu/LANTERN's `<=`, residual and greedy test
  const int32_t* table = nullptr;  // [V, table_k]: each code's nearest others, nearest first
  int32_t table_k = 0;
};

// A: the longest distance-ordered prefix of x~'s `others` nearest codes whose target mass stays
// within the budget (LANTERN Alg. 2). Returns S = p(A) and sets *members = |A|.
TESSERA_HD inline double lantern_set(const LanternRuleData& r, const float* p, int x,
                                     int* members) {
  const int walk = r.others < r.table_k ? (r.others > 0 ? r.others : 0) : r.table_k;
  const int32_t* nearest = r.table + static_cast<int64_t>(x) * r.table_k;
  const double px = p[x];
  // δ-rule: S < δ (Alg. 2 line 8). λ-rule: S < λ p(x~) (COOL-SD §3.1), or the code's
  // p(x~) + S <= λ p(x~), i.e. S <= (λ-1) p(x~).
  const double lambda = r.lambda_code ? static_cast<double>(r.lambda) - 1.0 : r.lambda;
  const double budget = r.lambda > 0.0f ? mul_rn(lambda, px) : static_cast<double>(r.delta);
  const bool code_test = r.reference || (r.lambda > 0.0f && r.lambda_code);
  double mass = 0.0;
  int n = 0;
  for (; n < walk; ++n) {
    // Moving b's mass onto x~ costs p(b) of total variation; p(b) = 0 costs nothing.
    const double s = mass + static_cast<double>(p[nearest[n]]);
    if (!(code_test ? s <= budget : s < budget)) break;  // code `<=`, paper `<`
    mass = s;
  }
  *members = n;
  return mass;
}

// f = min(1, (p(x~) + S) / q(x~)) (LANTERN §4.3); q_x: q(x~) (1 for a one-hot draft).
TESSERA_HD inline double lantern_accept_probability(const LanternRuleData& r, const float* p, int x,
                                                    float q_x) {
  int members = 0;
  const double s = lantern_set(r, p, x, &members);
  return ratio_accept(static_cast<double>(p[x]) + s, static_cast<double>(q_x));
}

// The residual after rejecting x~, unnormalised, into out[V], a pass on `lanes` (walk_lanes.h).
// q: the draft's row, or null for a one-hot draft. Paper: [p_{k,δ} - q]+ with p_{k,δ} = p with
// A's mass moved onto x~ (Alg. 1). Code: [p - q]+ with p unmodified, then, when A is non-empty,
// the k + 1 nearest codes keep their full target mass (q zeroed there, static trees), or for a
// one-hot draft x~ and those codes get none (dynamic trees).
template <class Lanes>
TESSERA_HD void lantern_residual(const Lanes& lanes, const LanternRuleData& r, const float* p,
                                 const float* q, int x, int V, float* out) {
  int members = 0;  // every lane walks A (reads only, O(k))
  const double s = lantern_set(r, p, x, &members);
  const int32_t* nearest = r.table + static_cast<int64_t>(x) * r.table_k;
  lanes.each(V, [&](int y) {
    const double qy = q ? static_cast<double>(q[y]) : (y == x ? 1.0 : 0.0);
    const double d = static_cast<double>(p[y]) - qy;
    out[y] = static_cast<float>(d > 0.0 ? d : 0.0);
  });
  if (!r.reference) {
    // p_{k,δ}: A's members hold 0, x~ holds p(x~) + S.
    lanes.one([&] {
      for (int n = 0; n < members; ++n) {
        const int b = nearest[n];
        const double d = 0.0 - (q ? static_cast<double>(q[b]) : 0.0);
        out[b] = static_cast<float>(d > 0.0 ? d : 0.0);
      }
      const double d = static_cast<double>(static_cast<float>(static_cast<double>(p[x]) + s)) -
                       (q ? static_cast<double>(q[x]) : 1.0);
      out[x] = static_cast<float>(d > 0.0 ? d : 0.0);
    });
    return;
  }
  if (members == 0) return;
  const int zeroed = r.zeroed < r.table_k ? r.zeroed : r.table_k;
  lanes.one([&] {
    if (!q) out[x] = 0.0f;
    for (int n = 0; n < zeroed; ++n) out[nearest[n]] = q ? p[nearest[n]] : 0.0f;
  });
}

// Greedy: accept iff x~ is the argmax of p_{k,δ} (paper) or of p with p(x~) raised to p(x~) + S
// (the code, which leaves A's entries in place), the first index winning ties. scratch: V floats.
template <class Lanes>
TESSERA_HD bool lantern_greedy_accept(const Lanes& lanes, const LanternRuleData& r, const float* p,
                                      int x, int V, float* scratch) {
  int members = 0;
  const double s = lantern_set(r, p, x, &members);
  lanes.each(V, [&](int y) { scratch[y] = p[y]; });
  lanes.one([&] {
    if (!r.reference) {
      const int32_t* nearest = r.table + static_cast<int64_t>(x) * r.table_k;
      for (int n = 0; n < members; ++n) scratch[nearest[n]] = 0.0f;
    }
    scratch[x] = static_cast<float>(static_cast<double>(p[x]) + s);
  });
  return lanes.argmax(scratch, V) == x;
}

}  // namespace tessera::speculative
