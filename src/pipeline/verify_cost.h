// The measured cost of verifying one image's chain of k drafts where the target's logits are (the
// speculative device loop's BackendVerifier): the round's one upload, the k + 1 target
// distributions, the walk and the verdicts' download, each draft's q a row on the backend as a
// chain drafted there leaves it. Beside measure_forward_seconds (forward_cost.h) it splits a
// round's target side into the forward and its verification: on a GPU the walk runs a block per
// image (verify_images), its O(V) residual at the rejection that ends the round spread over it.
#pragma once

#include <vector>

#include "tensor/backend.h"

namespace tessera {

struct VerifyCostSettings {
  int max_k = 32;    // chains of k = 1..max_k drafts
  bool cfg = false;  // the target's logits come in two halves, guided
  int repeats = 3;   // timed verifications per k (the minimum is kept)
};

// seconds[k - 1]: the fastest of `repeats` verifications of a chain of k drafts whose first draft
// is rejected (its token all but impossible under the target, certain under its q), so that every
// one computes a residual and draws from it, as most rounds end; timed in sweeps over k after an
// untimed one. Empty when the backend cannot compute rows of this vocabulary (can_sample_rows).
std::vector<double> measure_verify_seconds(Backend& backend, int vocab,
                                           const VerifyCostSettings& s);

}  // namespace tessera
