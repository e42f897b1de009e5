// LANTERN (Jang et al., 2025) §4.2-4.3, Alg. 1-2 and LANTERN++'s λ-rule (as restated in COOL-SD
// (Li et al., 2026) §3.1, and as jadohu/LANTERN's models/ea_model_llamagen.py evaluate_posterior
// implements it), in the paper's form and in jadohu/LANTERN's code form.
#include <algorithm>
#include <vector>

#include "sampling/sampler.h"
#include "speculative/rules/rules.h"
#include "tessera/error.h"

namespace tessera::speculative {
namespace {

// A(k,δ): the accepted prefix of x~'s distance-ordered neighbours and its target mass S.
struct NeighbourSet {
  std::span<const int32_t> members;  // A, nearest first (x~ excluded)
  double mass = 0.0;                 // S = p(A) = TV(p_{k,δ}, p)
};

// The rule's descriptor over `nb`'s table (host rows): what lantern_set walks, here and on the
// device.
LanternRuleData lantern_data(const LanternParams& params, const LatentNeighbours& nb) {
  LanternRuleData r;
  // Paper: B_k holds x~ itself, so k-1 others (LANTERN Alg. 2 line 4). Code: k others
  // (nearest_latents[x~, :k]); its residual zeroes the k + 1 nearest.
  r.others = params.reference ? params.k : params.k - 1;
  r.zeroed = params.k + 1;
  r.delta = params.delta;
  r.lambda = params.lambda;
  r.lambda_code = params.lambda_rule == LambdaRule::Code;
  r.reference = params.reference;
  r.table = nb.table().data();
  r.table_k = nb.k_max();
  return r;
}

NeighbourSet accepted_set(const LanternParams& params, const LatentNeighbours& nb,
                          std::span<const float> p, int token) {
  if (static_cast<size_t>(nb.vocab()) != p.size())
    throw Error("LANTERN: the neighbour table has " + std::to_string(nb.vocab()) +
                " codes but the target distribution has " + std::to_string(p.size()));
  nb.nearest(token, 0);  // the token is a code of the table
  NeighbourSet a;
  int members = 0;
  a.mass = lantern_set(lantern_data(params, nb), p.data(), token, &members);
  a.members = nb.nearest(token, members);
  return a;
}

class LanternRule final : public AcceptanceRule {
 public:
  LanternRule(const LanternParams& params, std::shared_ptr<const LatentNeighbours> nb)
      : params_(params), nb_(std::move(nb)) {
    check(nb_ != nullptr, "LANTERN: no latent neighbour table");
  }

  std::string name() const override {
    return std::string(params_.lambda > 0.0f ? "lantern++" : "lantern") +
           (params_.reference ? "-ref" : "");
  }

  double accept_probability(const NodeView& n) const override {
    const NeighbourSet a = accepted_set(params_, *nb_, n.p, n.token);
    const double relaxed = static_cast<double>(n.p[n.token]) + a.mass;  // p~(x~) = p_{k,δ}(x~)
    return ratio_accept(relaxed, n.q_of(n.token));                      // LANTERN §4.3
  }

  void residual(const NodeView& n, std::span<float> out) const override {
    if (!params_.reference) {
      // Paper: [p_{k,δ} - q]+ (LANTERN Alg. 1): the exact residual of the distorted target.
      std::vector<float> distorted(n.p.size());
      lantern_distorted_target(params_, *nb_, n.p, n.token, distorted, nullptr);
      NodeView m = n;
      m.p = distorted;
      exact_residual(m, out);
      return;
    }
    // Reference code (jadohu/LANTERN's evaluate_posterior, sampling branch): the k+1 nearest codes
    // are zeroed whenever A is non-empty, a superset of A when |A| < k+1 (limited by k_max).
    const NeighbourSet a = accepted_set(params_, *nb_, n.p, n.token);
    const std::span<const int32_t> zeroed =
        a.members.empty() ? std::span<const int32_t>() : nb_->nearest(n.token, params_.k + 1);
    exact_residual(n, out);  // relu(p - q), p unmodified
    if (n.q.empty()) {
      // Dynamic tree (evaluate_posterior): gtp[x~] = 0, gtp[nearest[x~, :k+1]] = 0.
      out[n.token] = 0.0f;
      for (int32_t b : zeroed) out[b] = 0.0f;
      return;
    }
    // Static tree (evaluate_posterior_v1): q[nearest[x~, :k+1]] = 0 without renormalising, so
    // those codes keep their full target mass.
    for (int32_t b : zeroed) out[b] = n.p[b];
  }

  // jadohu/LANTERN's greedy branch: gtp = softmax(CFG logits) without the logits processor.
  bool greedy_filtered() const override { return !params_.reference; }

  std::optional<WalkRuleSource> walk_rule() const override {
    WalkRuleSource s;
    s.rule.kind = WalkRule::Kind::Lantern;
    s.rule.lantern = lantern_data(params_, *nb_);
    s.table = nb_;
    return s;
  }

  bool greedy_accept(const NodeView& n) const override {
    // LANTERN §4.3: accept iff x~ = argmax p_{k,δ}(.|x~). The reference code (evaluate_posterior,
    // greedy branch) only raises gtp[x~] to p~(x~) and leaves A's entries in place; the two differ
    // only on exact ties.
    std::vector<float> d(n.p.size());
    if (params_.reference) {
      const NeighbourSet a = accepted_set(params_, *nb_, n.p, n.token);
      std::copy(n.p.begin(), n.p.end(), d.begin());
      d[n.token] = static_cast<float>(static_cast<double>(n.p[n.token]) + a.mass);
    } else {
      lantern_distorted_target(params_, *nb_, n.p, n.token, d, nullptr);
    }
    return n.token == tessera::argmax(d);
  }

 private:
  LanternParams params_;
  std::shared_ptr<const LatentNeighbours> nb_;
};

}  // namespace

void lantern_distorted_target(const LanternParams& params, const LatentNeighbours& nb,
                              std::span<const float> p, int token, std::span<float> out,
                              int* set_size) {
  // p_{k,δ}(.|x~): A's mass moved onto x~, A's members set to 0 (LANTERN §4.3; COOL-SD §3.1).
  const NeighbourSet a = accepted_set(params, nb, p, token);
  std::copy(p.begin(), p.end(), out.begin());
  for (int32_t b : a.members) out[b] = 0.0f;
  out[token] = static_cast<float>(static_cast<double>(p[token]) + a.mass);
  if (set_size) *set_size = static_cast<int>(a.members.size());
}

std::unique_ptr<AcceptanceRule> make_lantern_rule(const LanternParams& params,
                                                  std::shared_ptr<const LatentNeighbours> nb) {
  return std::make_unique<LanternRule>(params, std::move(nb));
}

}  // namespace tessera::speculative
