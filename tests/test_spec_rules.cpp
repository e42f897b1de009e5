// Acceptance rules of the speculative framework (exact, LANTERN/LANTERN++, GSD, UniformRSD,
// COOL-SD, amplify, addition, G*) on hand-computed cases, and LANTERN's latent neighbour table.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "io/npy.h"
#include "io/safetensors.h"
#include "speculative/latent_neighbours.h"
#include "speculative/rules/gsd_math.h"
#include "speculative/rules/rules.h"
#include "tensor/cpu/cpu_backend.h"
#include "tessera/error.h"

namespace fs = std::filesystem;
using namespace tessera;
using namespace tessera::speculative;

namespace {

using Vec = std::vector<float>;

NodeView node(int token, const Vec& p, const Vec& q = {}, int position = 1, int L = 1) {
  NodeView n;
  n.token = token;
  n.position = position;
  n.draft_len = L;
  n.p = p;
  n.q = q;
  return n;
}

Vec residual_of(const AcceptanceRule& r, const NodeView& n) {
  Vec out(n.p.size(), -1.0f);
  r.residual(n, out);
  return out;
}

void expect_vec_near(const Vec& got, const std::vector<double>& want, double tol = 1e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "index " << i;
}

// 1-D codebook at positions 0, 1, 3, 6, 10, 15: nearest(0) = 1,2,3,4,5; nearest(2) = 1, then 0
// and 3 tie at squared distance 9 (0 first), 4, 5.
std::shared_ptr<const LatentNeighbours> line_neighbours() {
  const Vec cb = {0, 1, 3, 6, 10, 15};
  return std::make_shared<const LatentNeighbours>(
      LatentNeighbours::build(cb, 6, 1, 5, LatentMetric::L2));
}

std::vector<int> to_vec(std::span<const int32_t> s) {
  return {s.begin(), s.end()};
}

// Random distribution with some exact zeros (top-k truncation) and a random concentration.
Vec random_dist(std::mt19937& rng, int V) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double power = 1.0 + 4.0 * u(rng);  // Dirichlet-like, from flat to peaked
  const double zero_frac = 0.5 * u(rng);
  std::vector<double> w(V);
  double s = 0.0;
  for (double& x : w) {
    x = u(rng) < zero_frac ? 0.0 : std::pow(-std::log(1.0 - u(rng)), power);
    s += x;
  }
  if (s == 0.0) {
    w[0] = 1.0;
    s = 1.0;
  }
  Vec p(V);
  for (int i = 0; i < V; ++i) p[i] = static_cast<float>(w[i] / s);
  return p;
}

// A test rule counting its f evaluations (optimal_residual must skip q(y) = 0).
class CountingRule final : public AcceptanceRule {
 public:
  mutable int calls = 0;
  std::string name() const override { return "counting"; }
  double accept_probability(const NodeView& n) const override {
    ++calls;
    return n.token == 0 ? 0.5 : 1.0;
  }
  void residual(const NodeView& n, std::span<float> out) const override { exact_residual(n, out); }
};

}  // namespace

// ---------------------------------------------------------------- exact
TEST(SpecRulesExact, FourTokenExample) {
  const auto r = make_exact_rule();
  EXPECT_EQ(r->name(), "exact");
  const Vec p = {0.1f, 0.2f, 0.3f, 0.4f}, q = {0.4f, 0.3f, 0.2f, 0.1f};
  EXPECT_NEAR(r->accept_probability(node(0, p, q)), 0.25, 1e-6);
  EXPECT_NEAR(r->accept_probability(node(1, p, q)), 2.0 / 3.0, 1e-6);
  EXPECT_DOUBLE_EQ(r->accept_probability(node(2, p, q)), 1.0);
  EXPECT_DOUBLE_EQ(r->accept_probability(node(3, p, q)), 1.0);
  // The residual does not depend on x~.
  expect_vec_near(residual_of(*r, node(0, p, q)), {0, 0, 0.1, 0.3});
  expect_vec_near(residual_of(*r, node(3, p, q)), {0, 0, 0.1, 0.3});
}

TEST(SpecRulesExact, DraftWithZeroDraftMass) {
  const auto r = make_exact_rule();
  const Vec p = {0.5f, 0.2f, 0.3f, 0.0f}, q = {0.5f, 0.5f, 0.0f, 0.0f};
  EXPECT_DOUBLE_EQ(r->accept_probability(node(2, p, q)), 1.0);  // q = 0, p > 0
  EXPECT_DOUBLE_EQ(r->accept_probability(node(3, p, q)), 0.0);  // q = 0, p = 0
}

TEST(SpecRulesExact, OneHotDraft) {
  const auto r = make_exact_rule();
  const Vec p = {0.1f, 0.2f, 0.3f, 0.4f};
  EXPECT_NEAR(r->accept_probability(node(2, p)), 0.3, 1e-7);
  expect_vec_near(residual_of(*r, node(2, p)), {0.1, 0.2, 0.0, 0.4});
}

TEST(SpecRulesExact, ZeroResidualMassWhenDraftEqualsTarget) {
  const auto r = make_exact_rule();
  const Vec p = {0.1f, 0.2f, 0.3f, 0.4f};
  EXPECT_DOUBLE_EQ(r->accept_probability(node(1, p, p)), 1.0);
  expect_vec_near(residual_of(*r, node(1, p, p)), {0, 0, 0, 0}, 0.0);
  const Vec one = {0.0f, 1.0f, 0.0f, 0.0f};  // one-hot p and one-hot q at the same token
  expect_vec_near(residual_of(*r, node(1, one)), {0, 0, 0, 0}, 0.0);
}

TEST(SpecRulesExact, GreedyIsFirstArgmax) {
  const auto r = make_exact_rule();
  const Vec p = {0.2f, 0.3f, 0.3f, 0.2f};
  EXPECT_FALSE(r->greedy_accept(node(0, p)));
  EXPECT_TRUE(r->greedy_accept(node(1, p)));
  EXPECT_FALSE(r->greedy_accept(node(2, p)));  // ties go to the first maximal index
}

// ---------------------------------------------------------------- relaxed ratio rules
TEST(SpecRulesRelaxed, UniformAmplifyAddition) {
  const Vec p = {0.1f, 0.2f, 0.3f, 0.4f}, q = {0.5f, 0.3f, 0.2f, 0.0f};
  const auto u = make_uniform_rsd_rule(1.5f);
  EXPECT_EQ(u->name(), "uniform-rsd");
  EXPECT_NEAR(u->accept_probability(node(0, p, q)), 0.3, 1e-6);  // 1.5 * 0.1 / 0.5
  EXPECT_NEAR(u->accept_probability(node(1, p, q)), 1.0, 1e-6);  // 1.5 * 0.2 / 0.3 = 1
  const auto a = make_amplify_rule(3.0f);
  EXPECT_EQ(a->name(), "amplify");
  EXPECT_NEAR(a->accept_probability(node(0, p, q)), 0.6, 1e-6);
  EXPECT_DOUBLE_EQ(a->accept_probability(node(3, p, q)), 1.0);  // q(x~) = 0
  EXPECT_NEAR(a->accept_probability(node(2, p)), 0.9, 1e-6);    // one-hot q
  const auto e = make_addition_rule(0.1f);
  EXPECT_EQ(e->name(), "addition");
  EXPECT_NEAR(e->accept_probability(node(0, p, q)), 0.4, 1e-6);  // (0.1 + 0.1) / 0.5
  EXPECT_NEAR(e->accept_probability(node(1, p, q)), 1.0, 1e-6);
  EXPECT_NEAR(e->accept_probability(node(0, p)), 0.2, 1e-6);
  // All use the vanilla residual [p - q]+.
  for (const auto* r : {u.get(), a.get(), e.get()})
    expect_vec_near(residual_of(*r, node(0, p, q)), {0, 0, 0.1, 0.4});
}

TEST(SpecRulesRelaxed, CoolSdOmegaSchedule) {
  const double want4[] = {2.144, 1.065, 0.529, 0.263};
  const double want5[] = {2.595, 1.289, 0.640, 0.318, 0.158};
  for (int i = 1; i <= 4; ++i) EXPECT_NEAR(cool_sd_omega(1.0f, 0.7f, i, 4), want4[i - 1], 1e-3);
  for (int i = 1; i <= 5; ++i) EXPECT_NEAR(cool_sd_omega(1.0f, 0.7f, i, 5), want5[i - 1], 1e-3);
  // The ω_i average to δ (Σ exp(-ν i - μ) = L) and scale with δ.
  for (int L : {1, 3, 4, 16}) {
    double s = 0.0;
    for (int i = 1; i <= L; ++i) s += cool_sd_omega(1.1f, 0.7f, i, L);
    EXPECT_NEAR(s / L, 1.1, 1e-6) << "L = " << L;
  }
  EXPECT_NEAR(cool_sd_omega(2.0f, 0.7f, 2, 5), 2.0 * 1.289, 2e-3);
  // i is clamped to [1, L].
  EXPECT_DOUBLE_EQ(cool_sd_omega(1.0f, 0.7f, 0, 4), cool_sd_omega(1.0f, 0.7f, 1, 4));
  EXPECT_DOUBLE_EQ(cool_sd_omega(1.0f, 0.7f, 9, 4), cool_sd_omega(1.0f, 0.7f, 4, 4));
}

TEST(SpecRulesRelaxed, CoolSdRuleUsesPosition) {
  const auto r = make_cool_sd_rule(1.0f, 0.7f);
  EXPECT_EQ(r->name(), "cool-sd");
  const Vec p = {0.1f, 0.9f}, q = {0.5f, 0.5f};
  const double w1 = cool_sd_omega(1.0f, 0.7f, 1, 4), w3 = cool_sd_omega(1.0f, 0.7f, 3, 4);
  EXPECT_NEAR(r->accept_probability(node(0, p, q, 1, 4)), w1 * 0.2, 1e-6);  // 0.4288
  EXPECT_NEAR(r->accept_probability(node(0, p, q, 3, 4)), w3 * 0.2, 1e-6);  // 0.1058
  EXPECT_NEAR(r->accept_probability(node(0, p, q, 1, 4)), 0.4288, 2e-4);
  expect_vec_near(residual_of(*r, node(0, p, q, 3, 4)), {0, 0.4});
}

// ---------------------------------------------------------------- optimal residual G*
TEST(SpecRulesOptimalResidual, OmegaAtLeastOneGivesVanilla) {
  // Proposition 1 of COOL-SD (Li et al., 2026): f >= f_van => G* = [p - q]+.
  std::mt19937 rng(7);
  const auto exact = make_exact_rule();
  for (float w : {1.0f, 1.5f, 4.0f}) {
    const auto r = make_uniform_rsd_rule(w);
    for (int t = 0; t < 20; ++t) {
      const Vec p = random_dist(rng, 12), q = random_dist(rng, 12);
      const NodeView n = node(t % 12, p, q);
      Vec g(12);
      optimal_residual(*r, n, g);
      const Vec v = residual_of(*exact, n);
      for (int y = 0; y < 12; ++y) EXPECT_NEAR(g[y], v[y], 1e-6);
    }
  }
}

TEST(SpecRulesOptimalResidual, OmegaBelowOne) {
  // ω = 0.5: (p - q) where ωp >= q, (1 - ω)p elsewhere.
  const auto r = make_uniform_rsd_rule(0.5f);
  const Vec p = {0.1f, 0.2f, 0.3f, 0.4f}, q = {0.4f, 0.3f, 0.2f, 0.1f};
  Vec g(4);
  optimal_residual(*r, node(0, p, q), g);
  expect_vec_near(g, {0.05, 0.1, 0.15, 0.3});
  // One-hot q: only x~ changes, to [p(x~) - f(x~)]+ = (1 - ω) p(x~) here.
  optimal_residual(*r, node(2, p), g);
  expect_vec_near(g, {0.1, 0.2, 0.15, 0.4});
}

TEST(SpecRulesOptimalResidual, EvaluatesRuleOnlyWhereDraftHasMass) {
  CountingRule r;
  const Vec p = {0.4f, 0.3f, 0.2f, 0.1f}, q = {0.6f, 0.0f, 0.4f, 0.0f};
  Vec g(4);
  optimal_residual(r, node(2, p, q), g);
  EXPECT_EQ(r.calls, 2);
  expect_vec_near(g, {0.1, 0.3, 0.0, 0.1});  // 0.4 - 0.6 * 0.5; 0.2 - 0.4 * 1 < 0
  r.calls = 0;
  optimal_residual(r, node(0, p), g);  // one-hot at 0: f(0) = 0.5
  EXPECT_EQ(r.calls, 1);
  expect_vec_near(g, {0.0, 0.3, 0.2, 0.1});
}

TEST(SpecRulesOptimalResidual, DecoratorForwards) {
  const auto nb = line_neighbours();
  LanternParams lp;
  lp.k = 6;
  lp.delta = 0.15f;
  const auto inner = make_lantern_rule(lp, nb);
  const auto r = with_optimal_resampling(make_lantern_rule(lp, nb));
  EXPECT_EQ(r->name(), inner->name() + "+G*");
  const Vec p = {0.3f, 0.1f, 0.25f, 0.05f, 0.2f, 0.1f};
  const Vec q = {0.1f, 0.1f, 0.5f, 0.1f, 0.1f, 0.1f};
  for (int t = 0; t < 6; ++t) {
    EXPECT_DOUBLE_EQ(r->accept_probability(node(t, p, q)),
                     inner->accept_probability(node(t, p, q)));
    EXPECT_EQ(r->greedy_accept(node(t, p)), inner->greedy_accept(node(t, p)));
  }
  EXPECT_TRUE(r->greedy_accept(node(2, p)));  // LANTERN's greedy rule, not plain argmax
  Vec g(6);
  optimal_residual(*inner, node(2, p, q), g);
  const Vec got = residual_of(*r, node(2, p, q));
  for (int y = 0; y < 6; ++y) EXPECT_FLOAT_EQ(got[y], g[y]);
}

// GSD's G* ranks the row once (GsdRule::g_star, gsd_math.h) where optimal_residual groups around
// every token with q > 0: the same floats, bit for bit, for vocabularies that are and are not a
// power of two (the sort pads them), ties in p (the ranking breaks them by id), p over many orders
// of magnitude (where the order the members are summed in shows), windows within and past the
// one-pass form's bound, both forms (the reference one rejects near the bottom), q with and
// without zeros, and one-hot drafts.
TEST(SpecRulesOptimalResidual, GsdRanksTheRowOnce) {
  std::mt19937 rng(2611);
  std::normal_distribution<float> normal;
  std::bernoulli_distribution cut(0.3), tie(0.4);
  int cases = 0, lowered = 0, rejected_low = 0, partial = 0;
  for (const int V : {1, 2, 3, 5, 16, 24, 100, 300}) {
    const int dim = 2;
    std::vector<float> emb(static_cast<size_t>(V) * dim);
    for (float& x : emb) x = normal(rng);
    const auto shared = std::make_shared<const std::vector<float>>(emb);
    for (const int g : {0, 2, 5, 10, 14, 2 * kGsdMaxHalf + 4})
      for (const bool reference : {false, true})
        for (int t = 0; t < 6; ++t) {
          SCOPED_TRACE("V " + std::to_string(V) + " G " + std::to_string(g) +
                       (reference ? " reference" : "") + " trial " + std::to_string(t));
          const GsdParams gp{
              .g = g, .d = 3.0f, .delta = t % 2 ? 0.02f : 1.0f, .reference = reference};
          const auto r = make_gsd_rule(gp, shared, dim);
          // p on a coarse grid, so that ties are common; q with zeros or without.
          Vec p(V), q(V);
          float pt = 0.0f, qt = 0.0f;
          for (int y = 0; y < V; ++y) {
            pt += p[y] = tie(rng) ? 0.25f
                         : t >= 3 ? std::exp(8.0f * normal(rng))  // wide magnitudes
                                  : std::abs(normal(rng));
            qt += q[y] = t % 3 == 0 && cut(rng) ? 0.0f : std::abs(normal(rng)) + 0.01f;
          }
          for (int y = 0; y < V; ++y) p[y] /= pt, q[y] /= qt;
          const int x = static_cast<int>(rng() % V);
          for (const bool one_hot : {false, true}) {
            const NodeView n = one_hot ? node(x, p) : node(x, p, q);
            Vec want(V, -1.0f), got(V, -2.0f);
            optimal_residual(*r, n, want);
            r->g_star(n, got);
            for (int y = 0; y < V; ++y) ASSERT_EQ(got[y], want[y]) << "y " << y;
            ++cases;
            for (int y = 0; y < V; ++y) lowered += got[y] < p[y];
          }
          // f(y) from the ranking as the grouping pass gives it (the cases G* saw above).
          for (int y = 0; y < V; ++y) {
            const double f = r->accept_probability(node(y, p, q));
            rejected_low += reference && f == 0.0;
            partial += f > 0.0 && f < 1.0;
          }
        }
  }
  EXPECT_EQ(cases, 8 * 6 * 2 * 6 * 2);
  EXPECT_GT(lowered, 2000) << "entries G* lowered below p";
  EXPECT_GT(rejected_low, 100) << "reference windows cut at the bottom";
  EXPECT_GT(partial, 1000) << "tokens with 0 < f < 1";
}

// ---------------------------------------------------------------- LANTERN
TEST(SpecRulesLantern, EmptyNeighbourSetEqualsExact) {
  const auto nb = line_neighbours();
  const auto exact = make_exact_rule();
  const Vec p = {0.3f, 0.2f, 0.1f, 0.1f, 0.2f, 0.1f};
  const Vec q = {0.5f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f};
  for (bool ref : {false, true}) {
    LanternParams lp;
    lp.k = 4;
    lp.delta = 0.1f;  // the first neighbour (token 1, p = 0.2) already exceeds δ
    lp.reference = ref;
    const auto r = make_lantern_rule(lp, nb);
    EXPECT_NEAR(r->accept_probability(node(0, p, q)), 0.6, 1e-6);
    EXPECT_DOUBLE_EQ(r->accept_probability(node(0, p, q)),
                     exact->accept_probability(node(0, p, q)));
    expect_vec_near(residual_of(*r, node(0, p, q)), {0, 0.1, 0, 0, 0.1, 0});
    // One-hot q: only x~ is removed (no neighbour is zeroed when A is empty).
    expect_vec_near(residual_of(*r, node(0, p)), {0, 0.2, 0.1, 0.1, 0.2, 0.1});
    int size = -1;
    Vec d(6);
    lantern_distorted_target(lp, *nb, p, 0, d, &size);
    EXPECT_EQ(size, 0);
    for (int y = 0; y < 6; ++y) EXPECT_EQ(d[y], p[y]);
  }
}

TEST(SpecRulesLantern, PaperDeltaRule) {
  const auto nb = line_neighbours();
  LanternParams lp;
  lp.k = 4;  // B_4 = {x~} + 3 neighbours: 1, 2, 3
  lp.delta = 0.2f;
  const auto r = make_lantern_rule(lp, nb);
  EXPECT_EQ(r->name(), "lantern");
  const Vec p = {0.3f, 0.05f, 0.1f, 0.2f, 0.15f, 0.2f};
  // S: 0.05 < 0.2, 0.15 < 0.2, 0.35 stops. A = {1, 2}, p~(x~) = 0.45.
  int size = -1;
  Vec d(6);
  lantern_distorted_target(lp, *nb, p, 0, d, &size);
  EXPECT_EQ(size, 2);
  expect_vec_near(d, {0.45, 0, 0, 0.2, 0.15, 0.2});
  const Vec q = {0.9f, 0.02f, 0.02f, 0.02f, 0.02f, 0.02f};
  EXPECT_NEAR(r->accept_probability(node(0, p, q)), 0.5, 1e-6);
  EXPECT_NEAR(r->accept_probability(node(0, p)), 0.45, 1e-6);
  expect_vec_near(residual_of(*r, node(0, p, q)), {0, 0, 0, 0.18, 0.13, 0.18});
  expect_vec_near(residual_of(*r, node(0, p)), {0, 0, 0, 0.2, 0.15, 0.2});
  // k bounds the walk: k = 2 leaves one neighbour.
  lp.k = 2;
  lantern_distorted_target(lp, *nb, p, 0, d, &size);
  EXPECT_EQ(size, 1);
  expect_vec_near(d, {0.35, 0, 0.1, 0.2, 0.15, 0.2});
  lp.k = 1;  // B_1 = {x~}
  lantern_distorted_target(lp, *nb, p, 0, d, &size);
  EXPECT_EQ(size, 0);
}

TEST(SpecRulesLantern, TruncatedNeighbourCostsNothing) {
  const auto nb = line_neighbours();
  LanternParams lp;
  lp.k = 6;
  lp.delta = 0.2f;
  const Vec p = {0.3f, 0.0f, 0.1f, 0.25f, 0.15f, 0.2f};  // token 1 outside the top-k
  int size = -1;
  Vec d(6);
  lantern_distorted_target(lp, *nb, p, 0, d, &size);
  EXPECT_EQ(size, 2);  // 1 (free), 2 (S = 0.1), then 3 exceeds
  expect_vec_near(d, {0.4, 0, 0, 0.25, 0.15, 0.2});
  EXPECT_NEAR(make_lantern_rule(lp, nb)->accept_probability(node(0, p)), 0.4, 1e-6);
}

TEST(SpecRulesLantern, StrictVersusNonStrictBoundary) {
  const auto nb = line_neighbours();
  const Vec p = {0.25f, 0.25f, 0.125f, 0.125f, 0.25f, 0.0f};  // exact binary fractions
  LanternParams paper;
  paper.k = 3;  // neighbours 1, 2
  paper.delta = 0.25f;
  LanternParams ref = paper;
  ref.k = 2;  // neighbours 1, 2
  ref.reference = true;
  int size = -1;
  Vec d(6);
  lantern_distorted_target(paper, *nb, p, 0, d, &size);
  EXPECT_EQ(size, 0);  // 0.25 < 0.25 fails
  lantern_distorted_target(ref, *nb, p, 0, d, &size);
  EXPECT_EQ(size, 1);  // 0.25 <= 0.25 holds; 0.375 fails
  EXPECT_DOUBLE_EQ(make_lantern_rule(paper, nb)->accept_probability(node(0, p)), 0.25);
  const auto r = make_lantern_rule(ref, nb);
  EXPECT_EQ(r->name(), "lantern-ref");
  EXPECT_DOUBLE_EQ(r->accept_probability(node(0, p)), 0.5);
}

TEST(SpecRulesLantern, ReferenceResidualZeroesKPlusOneNeighbours) {
  const auto nb = line_neighbours();
  const Vec p = {0.25f, 0.25f, 0.125f, 0.125f, 0.25f, 0.0f};
  LanternParams ref;
  ref.k = 2;
  ref.delta = 0.25f;
  ref.reference = true;  // A = {1}; zeroed: nearest(0, 3) = {1, 2, 3}
  const auto r = make_lantern_rule(ref, nb);
  // Dynamic tree (one-hot q): p with x~ and the k+1 nearest zeroed, although |A| = 1.
  expect_vec_near(residual_of(*r, node(0, p)), {0, 0, 0, 0, 0.25, 0});
  // Static tree (full q): q zeroed on the k+1 nearest, p unmodified.
  const Vec q = {0.4f, 0.1f, 0.2f, 0.1f, 0.1f, 0.1f};
  EXPECT_DOUBLE_EQ(r->accept_probability(node(0, p, q)), 1.0);  // 0.5 / 0.4
  expect_vec_near(residual_of(*r, node(0, p, q)), {0, 0.25, 0.125, 0.125, 0.15, 0});
  // The paper with the same A ({1}: k = 3, δ = 0.3) zeroes exactly A ∪ {x~}.
  LanternParams paper;
  paper.k = 3;
  paper.delta = 0.3f;
  const auto pr = make_lantern_rule(paper, nb);
  expect_vec_near(residual_of(*pr, node(0, p)), {0, 0, 0.125, 0.125, 0.25, 0});
  expect_vec_near(residual_of(*pr, node(0, p, q)), {0.1, 0, 0, 0.025, 0.15, 0});
  // Reference with A empty: nothing but x~ is zeroed (one-hot) and q is left alone (full q).
  ref.delta = 0.125f;
  const auto r0 = make_lantern_rule(ref, nb);
  expect_vec_near(residual_of(*r0, node(0, p)), {0, 0.25, 0.125, 0.125, 0.25, 0});
  expect_vec_near(residual_of(*r0, node(0, p, q)), {0, 0.15, 0, 0.025, 0.15, 0});
}

TEST(SpecRulesLantern, LambdaRule) {
  const auto nb = line_neighbours();
  const Vec p = {0.2f, 0.1f, 0.05f, 0.1f, 0.3f, 0.25f};
  LanternParams lp;
  lp.k = 10;  // clamped to the table's 5
  lp.lambda = 1.0f;
  lp.delta = 0.01f;  // ignored by the λ-rule
  // Paper rule (COOL-SD §3.1), S < λ p(x~) = 0.2: 0.1, 0.15 admitted, 0.25 stops.
  int size = -1;
  Vec d(6);
  lantern_distorted_target(lp, *nb, p, 0, d, &size);
  EXPECT_EQ(size, 2);
  const auto r = make_lantern_rule(lp, nb);
  EXPECT_EQ(r->name(), "lantern++");
  EXPECT_NEAR(r->accept_probability(node(0, p)), 0.35, 1e-6);
  // The code's rule, S <= (λ - 1) p(x~): the same λ = 1 allows nothing; λ = 2 gives the paper's
  // λ = 1 set.
  lp.lambda_rule = LambdaRule::Code;
  lantern_distorted_target(lp, *nb, p, 0, d, &size);
  EXPECT_EQ(size, 0);
  lp.lambda = 2.0f;
  lantern_distorted_target(lp, *nb, p, 0, d, &size);
  EXPECT_EQ(size, 2);
  // Paper λ = 0.5: budget 0.1 = p(1) exactly: paper `<` rejects it, reference `<=` admits it.
  lp.lambda_rule = LambdaRule::Paper;
  lp.lambda = 0.5f;
  lantern_distorted_target(lp, *nb, p, 0, d, &size);
  EXPECT_EQ(size, 0);
  lp.reference = true;
  lantern_distorted_target(lp, *nb, p, 0, d, &size);
  EXPECT_EQ(size, 1);
  EXPECT_NEAR(make_lantern_rule(lp, nb)->accept_probability(node(0, p)), 0.3, 1e-6);
  // p(x~) = 0: no budget at all in the paper form.
  const Vec p0 = {0.0f, 0.0f, 0.5f, 0.5f, 0.0f, 0.0f};
  lp.reference = false;
  lp.lambda = 2.0f;
  lantern_distorted_target(lp, *nb, p0, 0, d, &size);
  EXPECT_EQ(size, 0);
}

TEST(SpecRulesLantern, Greedy) {
  const auto nb = line_neighbours();
  const Vec p = {0.3f, 0.1f, 0.25f, 0.05f, 0.2f, 0.1f};
  LanternParams lp;
  lp.k = 6;
  lp.delta = 0.12f;
  const auto r = make_lantern_rule(lp, nb);
  // x~ = 2: neighbours 1, 0, 3, ...: A = {1}, p~ = 0.35 > 0.3, so x~ is the distorted argmax.
  EXPECT_TRUE(r->greedy_accept(node(2, p)));
  EXPECT_FALSE(make_exact_rule()->greedy_accept(node(2, p)));
  EXPECT_TRUE(r->greedy_accept(node(0, p)));  // the plain argmax stays accepted
  // x~ = 4: neighbours 3, 5, ...: A = {3} (0.05; then 0.15 > δ), p~ = 0.25 < 0.3.
  EXPECT_FALSE(r->greedy_accept(node(4, p)));
  lp.delta = 0.05f;  // A = ∅ for x~ = 2
  EXPECT_FALSE(make_lantern_rule(lp, nb)->greedy_accept(node(2, p)));
  lp.reference = true;
  lp.delta = 0.12f;
  EXPECT_TRUE(make_lantern_rule(lp, nb)->greedy_accept(node(2, p)));
  EXPECT_FALSE(make_lantern_rule(lp, nb)->greedy_accept(node(4, p)));
}

TEST(SpecRulesLantern, DistortionWithinBudgetOnRandomDistributions) {
  std::mt19937 rng(2024);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int V = 40, dim = 4;
  int trials = 0, nonempty = 0;
  for (int t = 0; t < 240; ++t, ++trials) {
    Vec cb(V * dim);
    for (float& x : cb) x = g(rng);
    const LatentNeighbours nb =
        LatentNeighbours::build(cb, V, dim, V - 1, t % 2 ? LatentMetric::L2 : LatentMetric::Cosine);
    const Vec p = random_dist(rng, V);
    LanternParams lp;
    lp.k = 1 + static_cast<int>(u(rng) * V);
    lp.delta = static_cast<float>(0.02 + 0.5 * u(rng));
    lp.reference = t % 3 == 0;
    const bool lambda_rule = t % 5 == 1;
    if (lambda_rule) {
      lp.lambda = static_cast<float>(1.2 + 3.0 * u(rng));
      lp.lambda_rule = t % 10 == 1 ? LambdaRule::Paper : LambdaRule::Code;
    }
    Vec d(V);
    // Paper, one-hot q: the node's output law f δ_x~ + (1 - f) Norm(residual) equals p_{k,δ}.
    const auto rule = make_lantern_rule(lp, std::make_shared<const LatentNeighbours>(nb));
    std::vector<double> w(V), mix(V, 0.0);
    double ws = 0.0;
    for (double& x : w) ws += (x = -std::log(1.0 - u(rng)));
    for (int x = 0; x < V; ++x) {
      int size = -1;
      lantern_distorted_target(lp, nb, p, x, d, &size);
      double tv = 0.0, total = 0.0;
      for (int y = 0; y < V; ++y) {
        tv += 0.5 * std::abs(static_cast<double>(d[y]) - p[y]);
        total += d[y];
      }
      const double S = static_cast<double>(d[x]) - p[x];
      EXPECT_NEAR(tv, S, 1e-6);
      EXPECT_NEAR(total, 1.0, 1e-5);
      if (size > 0) ++nonempty;
      if (lambda_rule) {
        const double budget =
            (lp.lambda_rule == LambdaRule::Code ? lp.lambda - 1.0 : lp.lambda) * p[x];
        if (lp.reference || lp.lambda_rule == LambdaRule::Code)  // the code's `<=`
          EXPECT_LE(S, budget + 1e-7);
        else
          EXPECT_TRUE(size == 0 || S < budget);
      } else if (lp.reference) {
        EXPECT_LE(S, lp.delta + 1e-7);
      } else {
        EXPECT_LT(S, lp.delta);
      }
      // A is a prefix of the walked neighbours, zeroed in p_{k,δ}.
      const auto walk = nb.nearest(x, lp.reference ? lp.k : lp.k - 1);
      ASSERT_LE(size, static_cast<int>(walk.size()));
      for (int j = 0; j < size; ++j) EXPECT_EQ(d[walk[j]], 0.0f);
      if (lp.reference || lambda_rule) continue;
      // The per-step output law with a one-hot draft at x, computed from f and the residual.
      const NodeView n = node(x, p);
      const double f = rule->accept_probability(n);
      Vec res(V);
      rule->residual(n, res);
      const double rm = std::accumulate(res.begin(), res.end(), 0.0);
      std::vector<double> law(V, 0.0);
      law[x] += f;
      for (int y = 0; y < V; ++y) law[y] += (1.0 - f) * (rm > 0.0 ? res[y] / rm : p[y]);
      double tvl = 0.0;
      for (int y = 0; y < V; ++y) {
        tvl += 0.5 * std::abs(law[y] - p[y]);
        mix[y] += w[x] / ws * law[y];
      }
      EXPECT_LT(tvl, lp.delta + 1e-6);
    }
    if (!lp.reference && !lambda_rule) {
      double tvm = 0.0;  // any draft-choice weights w: the mixture stays within δ too
      for (int y = 0; y < V; ++y) tvm += 0.5 * std::abs(mix[y] - p[y]);
      EXPECT_LT(tvm, lp.delta + 1e-6);
    }
  }
  EXPECT_GE(trials, 200);
  EXPECT_GT(nonempty, 1000);  // the property is exercised with non-empty A, not vacuously
}

// ---------------------------------------------------------------- GSD
namespace {
// GSD Alg. 3 line 2 sorts p ascending: 0 (0.02), 2 (0.05), 4 (0.08), 7 (0.08), 6 (0.12), 5 (0.15),
// 3 (0.20), 1 (0.30) (4 and 7 tie: the smaller id sorts first), at positions 0..7.
const Vec kGsdP = {0.02f, 0.30f, 0.05f, 0.20f, 0.08f, 0.15f, 0.12f, 0.08f};

std::unique_ptr<AcceptanceRule> gsd(int g, float d, float delta, Vec emb = Vec(8, 0.0f),
                                    bool reference = false) {
  GsdParams gp;
  gp.g = g;
  gp.d = d;
  gp.delta = delta;
  gp.reference = reference;
  return make_gsd_rule(gp, std::make_shared<const std::vector<float>>(std::move(emb)), 1);
}

// Brute force from GSD Alg. 3 as written: sort ascending, find x~'s position r, slice
// [r - G//2, r + G//2) (clipped; the reference code's slice is empty when the start is negative),
// pop by the two filters (strict `<` keeps in the reference code), f = min(1, p(C)/q(C)).
double gsd_reference_f(const Vec& p, const Vec& q, const Vec& emb, int dim, int token,
                       const GsdParams& gp) {
  const int V = static_cast<int>(p.size());
  std::vector<int> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] < p[b]; });
  const int r = static_cast<int>(std::find(order.begin(), order.end(), token) - order.begin());
  const int half = gp.g / 2;
  if (gp.reference && r - half < 0) return 0.0;
  std::vector<int> c{token};
  for (int k = std::max(0, r - half); k < std::min(V, r + half); ++k) {
    const int y = order[k];
    if (y == token) continue;
    const double gap = std::abs(static_cast<double>(p[y]) - p[token]);
    if (gp.reference ? !(gap < gp.delta) : gap > gp.delta) continue;
    double d2 = 0.0;
    for (int j = 0; j < dim; ++j) {
      const double diff = static_cast<double>(emb[token * dim + j]) - emb[y * dim + j];
      d2 += diff * diff;
    }
    if (gp.reference ? !(d2 < gp.d) : d2 > gp.d) continue;
    c.push_back(y);
  }
  double pc = 0.0, qc = 0.0;
  for (int y : c) {
    pc += p[y];
    qc += q.empty() ? (y == token) : q[y];
  }
  return qc <= 0.0 ? (pc > 0.0 ? 1.0 : 0.0) : std::min(1.0, pc / qc);
}
}  // namespace

TEST(SpecRulesGsd, WindowAroundPosition) {
  const auto r = gsd(4, 1.0f, 1.0f);  // no filtering; G/2 = 2: two below x~, one above
  EXPECT_EQ(r->name(), "gsd");
  auto f = [&](int x) { return r->accept_probability(node(x, kGsdP)); };  // one-hot q: f = p(C)
  EXPECT_NEAR(f(6), 0.43, 1e-6);  // positions [2, 6): 4, 7, 6, 5
  EXPECT_NEAR(f(4), 0.23, 1e-6);  // [0, 4): 0, 2, 4, 7
  EXPECT_NEAR(f(7), 0.33, 1e-6);  // [1, 5): 2, 4, 7, 6
  EXPECT_NEAR(f(1), 0.65, 1e-6);  // top: [5, 8): 5, 3, 1
  EXPECT_NEAR(f(3), 0.77, 1e-6);  // [4, 8): 6, 5, 3, 1
  EXPECT_NEAR(f(0), 0.07, 1e-6);  // bottom, clipped: [0, 2): 0, 2
  EXPECT_NEAR(f(2), 0.15, 1e-6);  // [0, 3): 0, 2, 4
  EXPECT_NEAR(gsd(5, 1.0f, 1.0f)->accept_probability(node(6, kGsdP)), 0.43, 1e-6);  // 5//2 = 2
  EXPECT_NEAR(gsd(3, 1.0f, 1.0f)->accept_probability(node(6, kGsdP)), 0.20, 1e-6);  // 7, 6
  // G/2 = 0: the slice is empty but x~ is always in C.
  EXPECT_NEAR(gsd(1, 1.0f, 1.0f)->accept_probability(node(6, kGsdP)), 0.12, 1e-6);
}

TEST(SpecRulesGsd, ReferenceCodeRejectsANegativeSliceStart) {
  const auto r = gsd(4, 1.0f, 1.0f, Vec(8, 0.0f), true);
  EXPECT_EQ(r->name(), "gsd-ref");
  EXPECT_DOUBLE_EQ(r->accept_probability(node(0, kGsdP)), 0.0);    // r = 0 < 2: NaN in the code
  EXPECT_DOUBLE_EQ(r->accept_probability(node(2, kGsdP)), 0.0);    // r = 1
  EXPECT_NEAR(r->accept_probability(node(4, kGsdP)), 0.23, 1e-6);  // r = 2: [0, 4)
  EXPECT_NEAR(r->accept_probability(node(1, kGsdP)), 0.65, 1e-6);  // top, clipped as the code
}

TEST(SpecRulesGsd, ProbabilityAndDistanceFilters) {
  // δ = 0.035 drops 4 and 7 (|0.08 - 0.12| = 0.04) but keeps 5 (0.03).
  EXPECT_NEAR(gsd(4, 1.0f, 0.035f)->accept_probability(node(6, kGsdP)), 0.27, 1e-6);
  // Token 5 at squared distance 1 from the others: dropped for d = 0.5, kept for d = 1 (the
  // paper pops only if > d), dropped for d = 1 by the reference code (keeps only if < d).
  const Vec emb = {0, 0, 0, 0, 0, 1, 0, 0};
  EXPECT_NEAR(gsd(4, 0.5f, 1.0f, emb)->accept_probability(node(6, kGsdP)), 0.28, 1e-6);
  EXPECT_NEAR(gsd(4, 1.0f, 1.0f, emb)->accept_probability(node(6, kGsdP)), 0.43, 1e-6);
  EXPECT_NEAR(gsd(4, 1.0f, 1.0f, emb, true)->accept_probability(node(6, kGsdP)), 0.28, 1e-6);
  // x~ itself is never filtered, even far from everything.
  EXPECT_NEAR(gsd(4, 0.5f, 0.001f, emb)->accept_probability(node(5, kGsdP)), 0.15, 1e-6);
}

TEST(SpecRulesGsd, FullDraftAndResidual) {
  const auto r = gsd(4, 1.0f, 1.0f);
  const Vec q = {0.05f, 0.05f, 0.05f, 0.3f, 0.1f, 0.2f, 0.2f, 0.05f};
  EXPECT_NEAR(r->accept_probability(node(6, kGsdP, q)), 0.43 / 0.55, 1e-6);  // q(C) = 0.55
  expect_vec_near(residual_of(*r, node(6, kGsdP, q)), {0, 0.25, 0, 0, 0, 0, 0, 0.03});
}

TEST(SpecRulesGsd, ZeroMassTokensSortByIdAtTheBottom) {
  // Ascending: the zeros 0, 2, 4, 6, 7, then 5, 3, 1.
  const Vec p = {0.0f, 0.5f, 0.0f, 0.3f, 0.0f, 0.2f, 0.0f, 0.0f};
  EXPECT_DOUBLE_EQ(gsd(2, 1.0f, 1.0f)->accept_probability(node(7, p)), 0.0);  // [3, 5): 6, 7
  // A target-impossible draft is accepted with its cluster's mass (GSD Eq. 4 as written).
  EXPECT_NEAR(gsd(4, 1.0f, 1.0f)->accept_probability(node(7, p)), 0.2, 1e-6);  // [2, 6)
  EXPECT_NEAR(gsd(6, 1.0f, 1.0f)->accept_probability(node(7, p)), 0.5, 1e-6);  // [1, 7)
  EXPECT_NEAR(gsd(4, 1.0f, 1.0f)->accept_probability(node(5, p)), 0.5, 1e-6);  // [3, 7)
}

TEST(SpecRulesGsd, MatchesFullSortOnRandomCases) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<float> g(0.0f, 0.4f);
  const int V = 64, dim = 3;
  for (int t = 0; t < 80; ++t) {
    Vec p = random_dist(rng, V);
    if (t % 4 == 0)  // exact ties
      for (int y = 0; y < V; y += 3) p[y] = p[0];
    const Vec q = random_dist(rng, V);
    Vec emb(V * dim);
    for (float& x : emb) x = g(rng);
    GsdParams gp;
    gp.g = 1 + static_cast<int>(u(rng) * 30);
    gp.d = static_cast<float>(2.0 * u(rng));
    gp.delta = static_cast<float>(0.3 * u(rng));
    gp.reference = t % 2 == 1;
    const auto r = make_gsd_rule(gp, std::make_shared<const std::vector<float>>(emb), dim);
    for (int x = 0; x < V; ++x) {
      EXPECT_NEAR(r->accept_probability(node(x, p, q)), gsd_reference_f(p, q, emb, dim, x, gp),
                  1e-6);
      EXPECT_NEAR(r->accept_probability(node(x, p)), gsd_reference_f(p, {}, emb, dim, x, gp), 1e-6);
    }
  }
}

// ---------------------------------------------------------------- latent neighbours
TEST(LatentNeighboursBuild, L2OrderAndTies) {
  const auto nb = line_neighbours();
  EXPECT_EQ(nb->vocab(), 6);
  EXPECT_EQ(nb->k_max(), 5);  // clamped to V - 1
  EXPECT_EQ(to_vec(nb->nearest(0, 5)), (std::vector<int>{1, 2, 3, 4, 5}));
  EXPECT_EQ(to_vec(nb->nearest(2, 5)), (std::vector<int>{1, 0, 3, 4, 5}));  // 0 and 3 tie
  EXPECT_EQ(to_vec(nb->nearest(5, 5)), (std::vector<int>{4, 3, 2, 1, 0}));
  EXPECT_EQ(to_vec(nb->nearest(4, 2)), (std::vector<int>{3, 5}));
  EXPECT_EQ(to_vec(nb->nearest(0, 99)).size(), 5u);
  EXPECT_TRUE(nb->nearest(0, 0).empty());
  EXPECT_THROW(nb->nearest(6, 1), Error);
  const Vec cb = {0, 1, 3, 6, 10, 15};
  const auto small = LatentNeighbours::build(cb, 6, 1, 2, LatentMetric::L2);
  EXPECT_EQ(small.k_max(), 2);
  EXPECT_EQ(to_vec(small.nearest(2, 5)), (std::vector<int>{1, 0}));
}

TEST(LatentNeighboursBuild, CosineAndL2Differ) {
  // 0 (1,0), 1 (0,1), 2 (1,1), 3 (2,0), 4 (-1,0).
  const Vec cb = {1, 0, 0, 1, 1, 1, 2, 0, -1, 0};
  const auto c = LatentNeighbours::build(cb, 5, 2, 4, LatentMetric::Cosine);
  const auto l = LatentNeighbours::build(cb, 5, 2, 4, LatentMetric::L2);
  EXPECT_EQ(to_vec(c.nearest(0, 4)), (std::vector<int>{3, 2, 1, 4}));  // same direction first
  EXPECT_EQ(to_vec(l.nearest(0, 4)), (std::vector<int>{2, 3, 1, 4}));  // 2 and 3 tie at 1
  EXPECT_EQ(to_vec(c.nearest(1, 4)), (std::vector<int>{2, 0, 3, 4}));  // 0, 3, 4 tie at 1
  EXPECT_EQ(to_vec(l.nearest(1, 4)), (std::vector<int>{2, 0, 4, 3}));  // 2, 2, 5
}

namespace {
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    path = fs::temp_directory_path() / ("tessera_spec_" + tag + "_" + std::to_string(getpid()) +
                                        "_" + std::to_string(std::random_device{}()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
};

std::vector<fs::path> cache_files(const fs::path& dir, const std::string& metric) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("lantern_neighbours_" + metric + "_", 0) == 0) out.push_back(e.path());
  }
  return out;
}

// The fixture model without any neighbour cache a concurrently running test may have left next to
// it (a method run on the fixture caches its table in the model directory).
void copy_model_files(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  for (const char* f : {"config.json", "gpt.safetensors", "vq.safetensors"})
    fs::copy_file(from / f, to / f);
}

std::vector<int> table_of(const LatentNeighbours& t) {
  std::vector<int> out;
  for (int v = 0; v < t.vocab(); ++v) {
    const auto row = t.nearest(v, t.k_max());
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}
}  // namespace

TEST(LatentNeighboursForModel, CachesAndReuses) {
  TempDir tmp("nb");
  const fs::path model = tmp.path / "model";
  copy_model_files(fs::path(TESSERA_FIXTURES) / "llamagen" / "c2i_f32", model);
  const LatentNeighbours a = LatentNeighbours::for_model(model.string(), 8, LatentMetric::L2);
  EXPECT_EQ(a.vocab(), 256);
  EXPECT_EQ(a.k_max(), 8);
  const auto files = cache_files(model, "l2");
  ASSERT_EQ(files.size(), 1u);
  const std::string name = files[0].filename().string();
  EXPECT_EQ(name.size(), std::string("lantern_neighbours_l2_.npy").size() + 16) << name;
  EXPECT_EQ(files[0].extension(), ".npy");
  const NpyArray arr = read_npy(files[0].string());
  EXPECT_EQ(arr.dtype, DType::I32);
  EXPECT_EQ(arr.shape, (Shape{256, 8}));
  // The same table as building from the codebook directly, and again from the cache.
  const SafeTensorsFile st = SafeTensorsFile::open((model / "vq.safetensors").string());
  const auto& info = st.get("quantize.embedding.weight");
  const std::span<const float> cb(static_cast<const float*>(info.data), 256 * 8);
  const LatentNeighbours direct = LatentNeighbours::build(cb, 256, 8, 8, LatentMetric::L2);
  EXPECT_EQ(table_of(a), table_of(direct));
  const auto mtime = fs::last_write_time(files[0]);
  const LatentNeighbours b = LatentNeighbours::for_model(model.string(), 8, LatentMetric::L2);
  EXPECT_EQ(table_of(a), table_of(b));
  EXPECT_EQ(fs::last_write_time(files[0]), mtime);
  // A narrower request is served from the wider cache (first columns).
  const LatentNeighbours c = LatentNeighbours::for_model(model.string(), 3, LatentMetric::L2);
  EXPECT_EQ(c.k_max(), 3);
  EXPECT_EQ(table_of(c), table_of(LatentNeighbours::build(cb, 256, 8, 3, LatentMetric::L2)));
  // A wider one rebuilds and widens the cache.
  const LatentNeighbours w = LatentNeighbours::for_model(model.string(), 20, LatentMetric::L2);
  EXPECT_EQ(w.k_max(), 20);
  EXPECT_EQ(read_npy(files[0].string()).shape, (Shape{256, 20}));
  // Cosine has its own file.
  const LatentNeighbours cos = LatentNeighbours::for_model(model.string(), 8, LatentMetric::Cosine);
  EXPECT_EQ(cache_files(model, "cos").size(), 1u);
  EXPECT_EQ(table_of(cos), table_of(LatentNeighbours::build(cb, 256, 8, 8, LatentMetric::Cosine)));
  EXPECT_NE(table_of(cos), table_of(direct));
}

TEST(LatentNeighboursForModel, CorruptCacheIsRebuilt) {
  TempDir tmp("nbc");
  const fs::path model = tmp.path / "model";
  copy_model_files(fs::path(TESSERA_FIXTURES) / "llamagen" / "c2i_f32", model);
  const LatentNeighbours a = LatentNeighbours::for_model(model.string(), 5, LatentMetric::L2);
  const auto files = cache_files(model, "l2");
  ASSERT_EQ(files.size(), 1u);
  { std::ofstream(files[0], std::ios::binary | std::ios::trunc) << "not an npy file"; }
  const LatentNeighbours b = LatentNeighbours::for_model(model.string(), 5, LatentMetric::L2);
  EXPECT_EQ(table_of(a), table_of(b));
  EXPECT_EQ(read_npy(files[0].string()).shape, (Shape{256, 5}));
}

// `body` run as a user the permissions bind: in this process, or, for root (who ignores them), in
// a child that has become nobody (uid 65534). Returns body's result (the child's exit status); a
// root that cannot become nobody fails the test rather than skipping it.
int as_unprivileged(const std::function<int()>& body) {
  if (geteuid() != 0) return body();
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(120);
    set_cpu_threads(1);  // the parent's thread pool did not come with the fork
    _exit(body());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -2;
}

TEST(LatentNeighboursForModel, ReadOnlyModelDirUsesXdgCache) {
  TempDir tmp("nbx");
  const fs::path model = tmp.path / "model", cache = tmp.path / "xdg";
  copy_model_files(fs::path(TESSERA_FIXTURES) / "llamagen" / "c2i_f32", model);
  fs::create_directories(cache);
  // The cache directory is everyone's (nobody writes it when root runs the test); the model
  // directory nobody's: not even its owner may write it.
  fs::permissions(cache, fs::perms::all);
  fs::permissions(model, fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                  fs::perm_options::remove);
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  setenv("XDG_CACHE_HOME", cache.c_str(), 1);
  const int k_max = as_unprivileged([&] {
    try {
      return LatentNeighbours::for_model(model.string(), 4, LatentMetric::L2).k_max();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 121;
    }
  });
  if (old)
    setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else
    unsetenv("XDG_CACHE_HOME");
  fs::permissions(model, fs::perms::owner_write, fs::perm_options::add);
  ASSERT_NE(k_max, 120) << "root could not become nobody (uid 65534)";
  EXPECT_EQ(k_max, 4);
  EXPECT_TRUE(cache_files(model, "l2").empty());
  EXPECT_EQ(cache_files(cache / "tessera", "l2").size(), 1u);
}

TEST(LatentNeighboursForModel, MissingCodebookNamesTheFile) {
  TempDir tmp("nbm");
  try {
    LatentNeighbours::for_model(tmp.path.string(), 4, LatentMetric::L2);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vq.safetensors"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not found"), std::string::npos) << e.what();
  }
}
