// verify_draft (verify.h) for a chain under a ratio rule or LANTERN (rules/chain_rule.h), as one
// TESSERA_HD function on raw rows: the walk a device kernel runs for a round's chains, drawing the
// CPU loop's uniforms (streams.h, sampling/philox.h). tests/test_verify_chain.cpp checks it
// against verify_draft.
#pragma once

#include <cstdint>

#include "common/host_device.h"
#include "sampling/philox.h"
#include "sampling/sampling_rules.h"
#include "speculative/rules/chain_rule.h"
#include "speculative/streams.h"

namespace tessera::speculative {

struct ChainVerdict {
  int accepted = 0;        // drafts accepted, from the first
  int32_t next_token = 0;  // the resampled or bonus token that ends the round
  bool rejected = false;
};

// One image's round. p: n + 1 rows of V (row d: the target distribution after d drafts, as
// verify_draft's dist(d)); q: n rows of V (row d - 1: the distribution draft d was drawn from), or
// null for one-hot drafts; tokens: the n drafts. L: the round's maximum depth (COOL-SD's schedule);
// (seed, image): the image's stream; base_token: the index in the image of the root's next token.
// residual: V floats of scratch. Greedy: a draft survives iff it is the argmax of its row (of the
// relaxed row under LANTERN).
TESSERA_HD inline ChainVerdict verify_chain(const ChainRule& rule, const float* p, const float* q,
                                            const int32_t* tokens, int n, int L, int V, bool greedy,
                                            uint64_t seed, uint64_t image, uint32_t base_token,
                                            int64_t round, float* residual) {
  ChainVerdict v;
  const float* dist = p;  // the distribution the next token is drawn from
  for (int d = 1; d <= n; ++d) {
    const float* pd = p + static_cast<int64_t>(d - 1) * V;
    const float* qd = q ? q + static_cast<int64_t>(d - 1) * V : nullptr;
    const int32_t x = tokens[d - 1];
    const bool lantern = rule.kind == ChainRule::Kind::Lantern;
    bool ok;
    if (greedy) {
      ok = lantern ? lantern_greedy_accept(rule.lantern, pd, x, V, residual)
                   : x == argmax_row(pd, V);
    } else {
      const double u = counter_uniform(seed, image, base_token + static_cast<uint32_t>(d - 1),
                                       stream_id(Stream::Accept, round));
      const double omega = ratio_omega(rule.ratio, d, L);
      const float qx = qd ? qd[x] : 1.0f;
      ok = u < (lantern ? lantern_accept_probability(rule.lantern, pd, x, qx)
                        : ratio_accept_probability(rule.ratio, omega, pd[x], qx));
      if (!ok) {
        // G, normalised as sampler.cpp's normalise does; p where it has no mass.
        if (lantern) lantern_residual(rule.lantern, pd, qd, x, V, residual);
        double total = 0.0;
        for (int y = 0; y < V; ++y) {
          if (!lantern)
            residual[y] =
                ratio_residual(rule.ratio, omega, pd[y], qd ? qd[y] : (y == x ? 1.0f : 0.0f));
          total += residual[y];
        }
        if (total > 0.0) {
          const double inv = 1.0 / total;
          for (int y = 0; y < V; ++y) residual[y] = static_cast<float>(residual[y] * inv);
          dist = residual;
        } else {
          dist = pd;
        }
      }
    }
    if (!ok) {
      v.rejected = true;
      break;
    }
    v.accepted = d;
    dist = p + static_cast<int64_t>(d) * V;
  }
  const uint32_t token_index = base_token + static_cast<uint32_t>(v.accepted);
  if (greedy) {
    v.next_token = argmax_row(p + static_cast<int64_t>(v.accepted) * V, V);
  } else {
    v.next_token = draw_row(
        dist, V, counter_uniform(seed, image, token_index, stream_id(Stream::Resample, round)));
  }
  return v;
}

}  // namespace tessera::speculative
