// The target's post-norm hidden states over a teacher-forced sequence: what the drafters that
// read the target (EAGLE, Medusa) are fed, recomputed outside the speculative loop.
#pragma once

#include <algorithm>
#include <span>
#include <vector>

#include "decode/session.h"
#include "models/llamagen.h"
#include "tessera/tessera.h"

namespace tessera {

// The target's post-norm features for `cond` (or, uncond_half, the unconditional half the
// engine pairs with it: LlamaGen t2i hides the caption's padding keys in both) and tokens x_0 ..
// x_{n-2}: every prefix row's, then those of x_0 .. x_{n-2}; [T + n - 1, dim] (the row of the
// last prefix position predicts x_0).
inline std::vector<float> target_features(const LlamaGen& target, const Condition& cond,
                                          std::span<const int32_t> tokens, int n,
                                          bool uncond_half = false) {
  SessionOptions o;
  o.n_slots = 2;
  o.max_new = std::max(n, 1);
  o.max_outputs_per_seq = o.max_new;
  o.hidden_states = HiddenState::PostNorm;
  Session s(target, o);
  const int32_t slots[2] = {s.acquire_slot(), s.acquire_slot()};
  const Condition* c = &cond;
  std::vector<float> all, rest;
  s.read(s.prefill(std::span(&c, 1), true, slots).hidden, all);
  const size_t half = all.size() / 2;
  std::vector<float> out(all.begin() + (uncond_half ? half : 0),
                         all.begin() + (uncond_half ? 2 * half : half));
  if (n > 1) {
    StepBatch b;
    b.n_new = n - 1;
    b.slots = {slots[uncond_half ? 1 : 0]};
    for (int k = 0; k < n - 1; ++k) {
      b.tokens.push_back(tokens[k]);
      b.positions.push_back(target.token_position(k));
      b.output_at.push_back(k);
    }
    b.output_hidden = true;
    s.read(s.forward(b).hidden, rest);
    out.insert(out.end(), rest.begin(), rest.end());
  }
  return out;
}

}  // namespace tessera
