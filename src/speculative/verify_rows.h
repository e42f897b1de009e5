// verify_draft (verify.h) on raw rows, as one TESSERA_HD function: a chain or a tree under a ratio
// rule or LANTERN (rules/walk_rule.h), the walk a device kernel runs for a round's drafts,
// drawing the CPU loop's uniforms (streams.h, sampling/philox.h). Children of the current node
// are tested in order; a rejected child turns p into the rule's residual and, when it was drawn
// without replacement, leaves q without its token for the next sibling (SpecInfer's recursive
// rejection sampling), exactly as verify_draft does. tests/test_verify_rows.cpp checks it against
// verify_draft on random chains and trees.
#pragma once

#include <cstdint>

#include "common/host_device.h"
#include "sampling/philox.h"
#include "sampling/sampling_rules.h"
#include "speculative/rules/walk_rule.h"
#include "speculative/streams.h"
#include "speculative/walk_lanes.h"

namespace tessera::speculative {

// One draft node as plain data (DraftNode without its q): parents come before their children,
// siblings in the order they are tested.
struct WalkNode {
  enum Flags : int32_t { kWithReplacement = 1, kOneHot = 2 };
  int32_t token = 0;
  int32_t parent = -1;  // index of the parent node; -1: the root
  int32_t depth = 1;    // 1: a child of the root
  int32_t flags = 0;    // kWithReplacement (DraftNode::with_replacement); kOneHot (no q: q = e_x)
};

struct DraftVerdict {
  int32_t accepted = 0;    // drafts accepted (the depth reached)
  int32_t last = -1;       // the last accepted node (-1: none); its parents are the path
  int32_t next_token = 0;  // the resampled or bonus token that ends the round
  int32_t rejected = 0;    // 1: the round ended with a rejection
};

// The scratch floats verify_rows needs: the current residual, the next one, q without the rejected
// siblings, and GSD's ranking of a row for its G* (gsd_rank_row).
TESSERA_HD inline int64_t verify_scratch(int V) {
  return 3 * static_cast<int64_t>(V) + gsd_rank_scratch(V);
}

// G* = [p - q f]+ (COOL-SD §3.2, Eq. 5) for LANTERN, GSD or typical acceptance, unnormalised,
// into out[V], as optimal_residual (acceptance_rule.h) computes it: f(y), the rule's acceptance had
// y been drafted, only where q(y) > 0 (q null: one-hot at x, q(x) = 1); p(y) elsewhere. fx: the
// caller's f(x) from its test on the same p; typical acceptance's threshold depends on p alone,
// also the caller's. GSD ranks p once into rank_scratch (gsd_rank_scratch(V) floats).
template <class Lanes>
TESSERA_HD void optimal_residual_row(const Lanes& lanes, const WalkRule& rule, const float* p,
                                     const float* q, int x, int V, double threshold, double fx,
                                     float* rank_scratch, float* out) {
  const bool typical = rule.kind == WalkRule::Kind::Typical, gsd = rule.kind == WalkRule::Kind::Gsd;
  float* const order = rank_scratch;
  float* const rank = rank_scratch + gsd_rank_span(V);
  if (gsd && q) gsd_rank_row(lanes, p, V, order, rank);
  lanes.each(V, [&](int y) {
    const float qy = q ? q[y] : (y == x ? 1.0f : 0.0f);
    if (qy <= 0.0f) {
      out[y] = p[y];
      return;
    }
    const double f =
        typical ? typical_accept_above(p[y], threshold)
        : gsd   ? (q ? gsd_accept_probability_ranked(rule.gsd, p, q, y, V, order, rank) : fx)
                : lantern_accept_probability(rule.lantern, p, y, qy);
    const double d = sub_rn(static_cast<double>(p[y]), mul_rn(static_cast<double>(qy), f));
    out[y] = static_cast<float>(d > 0.0 ? d : 0.0);
  });
}

// One image's round on `lanes` (walk_lanes.h: every lane follows the same walk; each pass over a
// row is spread over them). p: n + 1 rows of V (row 0: the root's target distribution, row c + 1:
// node c's, as verify_draft's dist); q: n rows of V (row c: the distribution node c was drawn
// from, read unless the node is kOneHot), or null for an image whose drafts are all one-hot;
// nodes: the n drafts. L: the round's maximum depth (COOL-SD's schedule); (seed, image): the
// image's stream; base_token: the index in the image of the root's next token. scratch:
// verify_scratch(V) floats. Greedy: a draft survives iff it is the argmax of its row (of the
// relaxed row under LANTERN).
template <class Lanes>
TESSERA_HD inline DraftVerdict verify_rows_on(const Lanes& lanes, const WalkRule& rule,
                                              const float* p, const float* q, const WalkNode* nodes,
                                              int n, int L, int V, bool greedy, uint64_t seed,
                                              uint64_t image, uint32_t base_token, int64_t round,
                                              float* scratch) {
  DraftVerdict v;
  const bool lantern = rule.kind == WalkRule::Kind::Lantern, gsd = rule.kind == WalkRule::Kind::Gsd,
             typical = rule.kind == WalkRule::Kind::Typical;
  float* q_work = scratch + 2 * static_cast<int64_t>(V);
  const float* dist = p;  // the current target (or residual) distribution
  int node = -1, depth = 1;
  for (;;) {
    bool accepted = false;
    int sibling = 0;
    bool q_worked = false;  // q_work holds q without this depth's rejected siblings
    for (int c = 0; c < n; ++c) {
      if (nodes[c].parent != node) continue;
      const WalkNode nc = nodes[c];
      const int32_t x = nc.token;
      // A device loop's static or Medusa tree's child past the tokens with mass
      // (draw_children_rows' or top_rows' -1): it and its later siblings are not in the tree.
      if (x < 0) break;
      const float* own_q =
          q && !(nc.flags & WalkNode::kOneHot) ? q + static_cast<int64_t>(c) * V : nullptr;
      const float* qc = (nc.flags & WalkNode::kWithReplacement) || !q_worked ? own_q : q_work;
      bool ok;
      if (greedy) {
        // verify_draft's greedy walk never modifies p: dist is a row of p, scratch is free.
        ok = lantern ? lantern_greedy_accept(lanes, rule.lantern, dist, x, V, scratch)
                     : x == lanes.argmax(dist, V);
      } else {
        const double u = counter_uniform(seed, image, base_token + static_cast<uint32_t>(depth - 1),
                                         stream_id(Stream::Accept, round, sibling));
        const double omega = ratio_omega(rule.ratio, depth, L);
        const float qx = qc ? qc[x] : 1.0f;
        // Typical acceptance's threshold on this p, for the test and G* alike.
        const double threshold =
            typical ? typical_threshold_on(lanes, dist, V, rule.typical.eps, rule.typical.alpha)
                    : 0.0;
        const double f = lantern   ? lantern_accept_probability(rule.lantern, dist, x, qx)
                         : gsd     ? gsd_accept_probability_on(lanes, rule.gsd, dist, qc, x, V)
                         : typical ? typical_accept_above(dist[x], threshold)
                                   : ratio_accept_probability(rule.ratio, omega, dist[x], qx);
        ok = u < f;
        if (!ok) {
          // p <- G (the rule's resampling distribution), normalised; p where G has no mass.
          float* residual = dist == scratch ? scratch + V : scratch;
          if (rule.optimal && (lantern || typical || gsd)) {
            optimal_residual_row(lanes, rule, dist, qc, x, V, threshold, f,
                                 scratch + 3 * static_cast<int64_t>(V), residual);
          } else if (lantern) {
            lantern_residual(lanes, rule.lantern, dist, qc, x, V, residual);
          } else if (typical) {  // Medusa resamples from the target itself
            lanes.each(V, [&](int y) { residual[y] = dist[y]; });
          } else {
            lanes.each(V, [&](int y) {
              residual[y] =
                  ratio_residual(rule.ratio, omega, dist[y], qc ? qc[y] : (y == x ? 1.0f : 0.0f));
            });
          }
          if (normalise_on(lanes, residual, V)) dist = residual;
          // The next sibling was drawn from q without this token (without replacement); one-hot
          // drafts and drafts drawn with replacement carry their own q.
          if (own_q && !(nc.flags & WalkNode::kWithReplacement)) {
            if (!q_worked) lanes.each(V, [&](int y) { q_work[y] = own_q[y]; });
            q_worked = true;
            lanes.one([&] { q_work[x] = 0.0f; });
            if (!normalise_on(lanes, q_work, V)) lanes.each(V, [&](int y) { q_work[y] = 0.0f; });
          }
        }
      }
      if (ok) {
        v.accepted = depth;
        v.last = c;
        node = c;
        dist = p + static_cast<int64_t>(c + 1) * V;
        accepted = true;
        break;
      }
      ++sibling;
    }
    if (!accepted) {
      v.rejected = sibling > 0;
      break;
    }
    ++depth;
  }
  const uint32_t token_index = base_token + static_cast<uint32_t>(v.accepted);
  if (greedy) {
    v.next_token = lanes.argmax(p + static_cast<int64_t>(v.last + 1) * V, V);
  } else {
    v.next_token = lanes.draw(
        dist, V, counter_uniform(seed, image, token_index, stream_id(Stream::Resample, round)));
  }
  return v;
}

// The walk in one thread (the CPU's).
TESSERA_HD inline DraftVerdict verify_rows(const WalkRule& rule, const float* p, const float* q,
                                           const WalkNode* nodes, int n, int L, int V, bool greedy,
                                           uint64_t seed, uint64_t image, uint32_t base_token,
                                           int64_t round, float* scratch) {
  return verify_rows_on(SerialLanes{}, rule, p, q, nodes, n, L, V, greedy, seed, image, base_token,
                        round, scratch);
}

}  // namespace tessera::speculative
