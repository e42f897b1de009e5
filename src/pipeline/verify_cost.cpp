#include "pipeline/verify_cost.h"

#include <limits>

#include "common/clock.h"
#include "sampling/sample_rows.h"
#include "speculative/backend_verifier.h"
#include "speculative/rules/rules.h"
#include "tessera/error.h"

namespace tessera {

std::vector<double> measure_verify_seconds(Backend& backend, int vocab,
                                           const VerifyCostSettings& s) {
  check(s.max_k >= 1 && s.repeats >= 1, "verify cost: k and repeats must be at least 1");
  if (!can_sample_rows(backend, vocab)) return {};
  const int K = s.max_k, V = vocab, halves = s.cfg ? 2 : 1;
  // Per chain of k drafts: k + 1 conditional rows, flat but for each draft's token far below
  // the rest (the target all but never draws it), then as many flat unconditional ones.
  std::vector<int32_t> token(K);
  for (int j = 0; j < K; ++j) token[j] = static_cast<int32_t>((7919LL * j + 1) % V);
  std::vector<float> logits;
  Tensor target = backend.empty(DType::F32, {halves * (K + 1), V});
  // q one-hot at each draft's token, as rows on the backend (a device-drafted chain's).
  std::vector<float> q(static_cast<size_t>(K) * V, 0.0f);
  for (int j = 0; j < K; ++j) q[static_cast<size_t>(j) * V + token[j]] = 1.0f;
  speculative::DeviceDraftRows rows;
  rows.q = backend.upload(q.data(), DType::F32, {K, V});
  const auto rule = speculative::make_exact_rule();
  speculative::BackendVerifier verifier(backend, V);
  SamplingParams p;
  p.cfg_scale = s.cfg ? 4.0f : 1.0f;
  std::vector<double> seconds(K, std::numeric_limits<double>::infinity());
  for (int r = 0; r <= s.repeats; ++r)
    for (int k = 1; k <= K; ++k) {
      speculative::DraftTree tree(k);
      for (int j = 0; j < k; ++j) {
        tree[j].token = token[j];
        tree[j].parent = j - 1;
        tree[j].depth = j + 1;
        tree[j].q_row = j;
      }
      speculative::DraftToVerify c;
      c.tree = &tree;
      c.rule = *rule->walk_rule();
      c.verifying = p;
      c.seed = 1;
      c.round = r * K + k;
      c.draft_len = k;
      logits.assign(static_cast<size_t>(halves) * (k + 1) * V, 0.0f);
      for (int j = 0; j < k; ++j) logits[static_cast<size_t>(j) * V + token[j]] = -30.0f;
      Tensor used = target.rows(0, int64_t{halves} * (k + 1));
      backend.upload_into(logits.data(), used);
      backend.synchronize();  // the upload is not the verification's
      const double t0 = now_s();
      verifier.stage(k + 1, {&c, 1}, false, &rows, halves);
      const speculative::DraftVerdict v = verifier.verify(used, s.cfg).at(0);
      const double dt = now_s() - t0;
      check(v.accepted == 0 && v.rejected, "internal: the verify cost's first draft was accepted");
      if (r > 0) seconds[k - 1] = std::min(seconds[k - 1], dt);
    }
  return seconds;
}

}  // namespace tessera
