// Factories for every acceptance rule of tessera (docs/methods.md). Each rule cites the paper and
// equation it implements in its own file.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "speculative/latent_neighbours.h"
#include "speculative/rules/acceptance_rule.h"

namespace tessera::speculative {

// exact: f = min(1, p/q), G = Norm([p - q]+) (COOL-SD (Li et al., 2026) §3.1, Eq. 1-2). Used by
// `sd` and `sjd`.
std::unique_ptr<AcceptanceRule> make_exact_rule();

// LANTERN (Jang et al., 2025) §4.3, Alg. 1-2 and LANTERN++ (λ-rule).
//
// LANTERN++'s λ budget has two published conventions (docs/methods.md, "lantern++"):
//   Paper: Σ_{A∖x~} p < λ p(x~) (COOL-SD (Li et al., 2026) §3.1, restating LANTERN++), default.
//   Code:  Σ_{A∖x~} p <= (λ - 1) p(x~), i.e. p(x~) + S <= λ p(x~) (jadohu/LANTERN's
//          evaluate_posterior, --lantern_delta > 1). The same λ allows one p(x~) less.
enum class LambdaRule { Paper, Code };
struct LanternParams {
  int k = 1000;         // neighbours considered
  float delta = 0.1f;   // TV budget δ (LANTERN)
  float lambda = 0.0f;  // > 0: LANTERN++ λ-rule instead of the δ budget
  LambdaRule lambda_rule = LambdaRule::Paper;
  bool reference = false;  // the published code's behaviour instead of the paper's (see below)
};
// Paper (reference = false): B_k = {x~} + its k-1 nearest neighbours; A(k,δ) = the longest
// distance-ordered prefix of B_k \ {x~} with cumulative target mass S < δ (λ-rule: S < λ p(x~), or
// S <= (λ-1) p(x~) with LambdaRule::Code); f = min(1, (p(x~) + S)/q(x~)); G = Norm([p_{k,δ} - q]+)
// where p_{k,δ} moves A's mass onto x~.
// Reference (jadohu/LANTERN): the k nearest neighbours excluding x~, `<=` instead of `<`, and the
// code's residual: q with the k+1 nearest neighbours zeroed (when A is non-empty), then
// Norm([p - q']+) with p unmodified; for one-hot q, p with x~ and those neighbours zeroed. Greedy
// decoding verifies against the unfiltered CFG softmax (no top-k/top-p), as the code does.
std::unique_ptr<AcceptanceRule> make_lantern_rule(const LanternParams& params,
                                                  std::shared_ptr<const LatentNeighbours> nb);
// The distorted target p_{k,δ}(.|x~) and |A| (tests, docs).
// |A| counts the accepted neighbours (x~ itself excluded); set_size may be null.
void lantern_distorted_target(const LanternParams& params, const LatentNeighbours& nb,
                              std::span<const float> p, int token, std::span<float> out,
                              int* set_size);

// GSD (So et al., 2025) §4, Eq. 4, Alg. 3/5. Cluster C(x~) = tokens at sorted positions
// [r - G/2, r + G/2) around the position r of x~ in the target's ascending-sorted p (G/2 less
// probable tokens, G/2 - 1 more probable; clipped at the ends), minus those with
// |p(y) - p(x~)| > δ or embedding distance dist(x~, y) > d; f = min(1, p(C)/q(C));
// G = Norm([p - q]+) (as SJD). Reference (junhyukso/GSD's code): strict `<` filters, and no
// cluster (f = 0) when r < G/2 (the code's negative slice start).
struct GsdParams {
  int g = 10;
  float d = 0.5f;
  float delta = 0.15f;
  bool reference = false;
};
// `embedding` [V, dim] row-major (host): the target's input token embeddings (published code) or
// the VQ codebook; the distance is the squared Euclidean distance (as the published code).
std::unique_ptr<AcceptanceRule> make_gsd_rule(const GsdParams& params,
                                              std::shared_ptr<const std::vector<float>> embedding,
                                              int dim);

// Relaxed ratio rules, all with vanilla residual Norm([p - q]+):
//   uniform-rsd: f = min(1, δ p/q) (COOL-SD (Li et al., 2026) §3.2, Eq. 7 with ω_i = δ)
//   cool-sd:     f = min(1, ω_i p/q), ω_i = δ exp(-ν i - μ), Σ_{i=1..L} exp(-ν i - μ) = L (Eq. 10;
//                ν < 0: cool_sd_default_nu(L))
//   amplify:     f = min(1, k p/q)       (GSD (So et al., 2025) §5, naive lossy baseline)
//   addition:    f = min(1, (p + ε)/q)   (GSD §5, naive lossy baseline)
std::unique_ptr<AcceptanceRule> make_uniform_rsd_rule(float delta);
std::unique_ptr<AcceptanceRule> make_cool_sd_rule(float delta, float nu);
std::unique_ptr<AcceptanceRule> make_amplify_rule(float k);
std::unique_ptr<AcceptanceRule> make_addition_rule(float eps);

// Medusa's typical acceptance (Cai et al., 2024, §2.3.1; FasterDecoding/Medusa evaluate_posterior):
// f = 1 iff p(x~) > min(ε, α exp(-H(p))), H(p) = -Σ p log(p + 1e-5), else 0 (q is not read);
// G = p unmodified (Medusa has no residual). Lossy.
std::unique_ptr<AcceptanceRule> make_typical_rule(float eps, float alpha);
// min(ε, α exp(-H(p))), the threshold above (tests, docs).
double typical_threshold(std::span<const float> p, float eps, float alpha);

// A ratio rule (ratio_rule.h: cool_sd_omega, cool_sd_default_nu, ...) by its descriptor; the
// makers above are these.
std::unique_ptr<AcceptanceRule> make_ratio_rule(std::string name, const RatioRule& rule);

// Wraps a rule so that its resampling distribution is G* (COOL-SD Eq. 5) ("--resample optimal").
std::unique_ptr<AcceptanceRule> with_optimal_resampling(std::unique_ptr<AcceptanceRule> rule);

}  // namespace tessera::speculative
