// The measured cost of one forward of k new positions per sequence, after a realistic prefix in
// the KV cache: what a speculative round's verification costs (k = draft depth + 1) and what a
// draft model's step costs (k = 1). tessera bench --verify-cost prints it; --draft-len auto
// calibrates its choice with it (cost_cache.h).
#pragma once

#include <vector>

#include "models/autoregressive_model.h"

namespace tessera {

struct ForwardCostSettings {
  int max_k = 32;    // k = 1..max_k new positions per sequence
  bool cfg = false;  // two sequences (conditional and unconditional halves), as with CFG
  int context = -1;  // tokens already in the cache before the k new ones; < 0: half the image
  int repeats = 3;   // timed forwards per k (the minimum is kept: others share the CPU)
};

// seconds[k - 1]: the fastest of `repeats` forwards of k new positions per sequence, every row
// returning logits (as verification reads them), timed in sweeps over k after an untimed one.
std::vector<double> measure_forward_seconds(const AutoregressiveModel& model,
                                            const ForwardCostSettings& s);

}  // namespace tessera
