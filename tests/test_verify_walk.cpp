// The tree verification walk (verify_draft, src/speculative/verify.h) driven directly: hand-built
// chains and trees over a five-token vocabulary with hand-chosen target distributions and the
// exact rule. Deterministic cases are checked outright; stochastic ones by running many rounds
// (each `round` value keys fresh Philox uniforms) and comparing the outcome frequencies with the
// distribution enumerated from the walk's specification, by a chi-square test at fixed seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "speculative/rules/rules.h"
#include "speculative/verify.h"
#include "stat_tests.h"

using namespace tessera;
using namespace tessera::speculative;

namespace {

using Vec = std::vector<float>;
using DVec = std::vector<double>;
using Path = std::vector<int>;
using Outcome = std::pair<Path, int>;  // accepted node indices, token that ends the round

constexpr int kV = 5;

// A round's draft and its target distributions: rows[0] at the root, rows[j + 1] at node j.
struct Round {
  DraftTree tree;
  std::vector<Vec> rows;
};

DraftNode node(int32_t token, int parent, int depth, Vec q = {}) {
  DraftNode n;
  n.token = token;
  n.parent = parent;
  n.depth = depth;
  n.q = std::move(q);
  return n;
}

Vec one_hot(int token) {
  Vec v(kV, 0.0f);
  v[token] = 1.0f;
  return v;
}

VerifyOutcome walk(const VerifySettings& s, const Round& r, const CounterRng& rng, int64_t round,
                   ImageStats& stats, int base_token = 5) {
  return verify_draft(
      s, r.tree, [&r](int i) { return std::span<const float>(r.rows.at(i)); }, rng, round,
      base_token, stats);
}

void normalise(DVec& v) {
  double s = 0.0;
  for (double x : v) s += x;
  for (double& x : v) x /= s;
}

// The exact distribution of a round's outcomes, from verify.h's specification with the exact rule
// (f = min(1, p/q), G = Norm([p - q]+)): the children of the current node are tested in order;
// a child is accepted with probability f; a rejection replaces p by G (kept when G has no mass)
// and, for an explicit q, removes the child's token from q (renormalised) for the next sibling;
// when every child is rejected, or there is none, the token is drawn from the current p.
void enumerate(const Round& r, int at, DVec p, double prob, Path& path,
               std::map<Outcome, double>& out) {
  DVec q_left;  // siblings' q without the tokens already rejected (empty: none rejected yet)
  for (size_t c = 0; c < r.tree.size() && prob > 0.0; ++c) {
    const DraftNode& d = r.tree[c];
    if (d.parent != at) continue;
    DVec q(kV, 0.0);
    if (!q_left.empty())
      q = q_left;
    else if (d.q.empty())
      q[d.token] = 1.0;
    else
      q.assign(d.q.begin(), d.q.end());
    const double f =
        q[d.token] > 0.0 ? std::min(1.0, p[d.token] / q[d.token]) : (p[d.token] > 0.0 ? 1.0 : 0.0);
    if (f > 0.0) {
      path.push_back(static_cast<int>(c));
      const Vec& next = r.rows[c + 1];
      enumerate(r, static_cast<int>(c), DVec(next.begin(), next.end()), prob * f, path, out);
      path.pop_back();
    }
    prob *= 1.0 - f;
    DVec g(kV);
    double mass = 0.0;
    for (int y = 0; y < kV; ++y) mass += (g[y] = std::max(0.0, p[y] - q[y]));
    if (mass > 0.0) {
      normalise(g);
      p = g;
    }
    if (!d.q.empty()) {
      q_left = q;
      q_left[d.token] = 0.0;
      normalise(q_left);
    }
  }
  if (prob > 0.0)
    for (int y = 0; y < kV; ++y)
      if (p[y] > 0.0) out[{path, y}] += prob * p[y];
}

std::map<Outcome, double> outcome_distribution(const Round& r) {
  std::map<Outcome, double> out;
  Path path;
  enumerate(r, -1, DVec(r.rows[0].begin(), r.rows[0].end()), 1.0, path, out);
  return out;
}

// Pearson chi-square of `counts` (n draws) against `probs`, cells with an expected count below 5
// pooled into one. Passes when the p-value is >= 1e-4 (the seeds are fixed, so the verdict is
// deterministic; with random seeds a correct walk would fail one run in 10^4) and no draw falls
// in a cell of probability 0.
template <typename K>
::testing::AssertionResult matches(const std::map<K, int64_t>& counts,
                                   const std::map<K, double>& probs, int64_t n) {
  double stat = 0.0, pooled_obs = 0.0, pooled_exp = 0.0, tv = 0.0;
  int cells = 0;
  for (const auto& [k, c] : counts)
    if (!probs.count(k) || probs.at(k) <= 0.0)
      return ::testing::AssertionFailure() << c << " draws of an impossible outcome";
  for (const auto& [k, pr] : probs) {
    const double e = pr * n, o = counts.count(k) ? static_cast<double>(counts.at(k)) : 0.0;
    tv += 0.5 * std::fabs(o / n - pr);
    if (e < 5.0) {
      pooled_obs += o;
      pooled_exp += e;
      continue;
    }
    stat += (o - e) * (o - e) / e;
    ++cells;
  }
  if (pooled_exp > 0.0) {
    stat += (pooled_obs - pooled_exp) * (pooled_obs - pooled_exp) / pooled_exp;
    ++cells;
  }
  if (cells < 2) return ::testing::AssertionSuccess() << "one cell";
  const double pv = test_stats::gamma_q((cells - 1) / 2.0, stat / 2.0);
  if (pv < 1e-4)
    return ::testing::AssertionFailure() << "chi-square " << stat << " on " << cells - 1
                                         << " df: p = " << pv << " (TV distance " << tv << ")";
  return ::testing::AssertionSuccess();
}

// Verifications and acceptances per depth implied by an outcome: on each depth of the path, the
// parent's children up to and including the accepted one; at the depth where the walk stopped,
// every child of the last accepted node (none when it is a leaf).
void tally(const DraftTree& t, const Path& path, std::vector<int64_t>& proposed,
           std::vector<int64_t>& accepted) {
  int parent = -1;
  for (size_t d = 0; d <= path.size(); ++d) {
    int64_t tested = 0;
    for (size_t c = 0; c < t.size(); ++c) {
      if (t[c].parent != parent) continue;
      ++tested;
      if (d < path.size() && static_cast<int>(c) == path[d]) break;
    }
    if (tested == 0) break;
    if (proposed.size() <= d) {
      proposed.resize(d + 1, 0);
      accepted.resize(d + 1, 0);
    }
    proposed[d] += tested;
    if (d < path.size()) {
      accepted[d]++;
      parent = path[d];
    }
  }
}

std::vector<int64_t> padded(std::vector<int64_t> v, size_t n) {
  v.resize(std::max(n, v.size()), 0);
  return v;
}

// Runs `rounds` rounds, checking each outcome's per-round stats against tally(), and returns the
// outcome counts; `total` accumulates the stats as the speculative loop does.
std::map<Outcome, int64_t> run_rounds(const VerifySettings& s, const Round& r, uint64_t seed,
                                      int64_t rounds, ImageStats& total) {
  std::map<Outcome, int64_t> counts;
  const CounterRng rng(seed, 3);
  for (int64_t k = 0; k < rounds; ++k) {
    ImageStats one;
    const VerifyOutcome o = walk(s, r, rng, k, one);
    walk(s, r, rng, k, total);
    std::vector<int64_t> proposed, accepted;
    tally(r.tree, o.accepted, proposed, accepted);
    const size_t n = std::max({proposed.size(), one.proposed.size(), one.accepted.size()});
    EXPECT_EQ(padded(one.proposed, n), padded(proposed, n)) << "round " << k;
    EXPECT_EQ(padded(one.accepted, n), padded(accepted, n)) << "round " << k;
    if (::testing::Test::HasFailure()) break;
    counts[{o.accepted, o.next_token}]++;
  }
  return counts;
}

// The exact rule, recording what each verification sees; `force` >= 0 replaces f.
class RecordingRule final : public AcceptanceRule {
 public:
  struct Call {
    int token, position;
    Vec p, q;
  };
  mutable std::vector<Call> calls;
  double force = -1.0;

  std::string name() const override { return "recording"; }
  double accept_probability(const NodeView& n) const override {
    calls.push_back(
        {n.token, n.position, Vec(n.p.begin(), n.p.end()), Vec(n.q.begin(), n.q.end())});
    return force >= 0.0 ? force : exact_->accept_probability(n);
  }
  void residual(const NodeView& n, std::span<float> out) const override {
    exact_->residual(n, out);
  }

 private:
  std::unique_ptr<AcceptanceRule> exact_ = make_exact_rule();
};

void expect_vec_near(const Vec& got, const DVec& want, double tol = 1e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "index " << i;
}

}  // namespace

// ------------------------------------------------------------------------------ deterministic

TEST(VerifyWalk, CertainDraftsAreAcceptedAlongChains) {
  // p one-hot at the drafted token (f = 1 whatever u) for q one-hot and explicit: the whole chain
  // is accepted and the bonus token comes from the last node's row.
  const auto exact = make_exact_rule();
  VerifySettings s;
  s.rule = exact.get();
  const int tokens[] = {1, 3, 2};
  const Vec bonus = {0.0f, 0.3f, 0.0f, 0.7f, 0.0f};
  for (int depth = 1; depth <= 3; ++depth)
    for (bool explicit_q : {false, true}) {
      SCOPED_TRACE("depth " + std::to_string(depth) + (explicit_q ? " explicit q" : " one-hot q"));
      Round r;
      for (int i = 0; i < depth; ++i) {
        r.tree.push_back(
            node(tokens[i], i - 1, i + 1, explicit_q ? Vec{0.2f, 0.2f, 0.2f, 0.2f, 0.2f} : Vec{}));
        r.rows.push_back(one_hot(tokens[i]));
      }
      r.rows.push_back(bonus);
      s.draft_len = depth;
      const CounterRng rng(9, 0);
      for (int64_t k = 0; k < 200; ++k) {
        ImageStats st;
        const VerifyOutcome o = walk(s, r, rng, k, st);
        Path all(depth);
        for (int i = 0; i < depth; ++i) all[i] = i;
        ASSERT_EQ(o.accepted, all);
        ASSERT_FALSE(o.rejected);
        ASSERT_TRUE(o.next_token == 1 || o.next_token == 3) << o.next_token;
        ASSERT_EQ(st.proposed, std::vector<int64_t>(depth, 1));
        ASSERT_EQ(st.accepted, std::vector<int64_t>(depth, 1));
      }
    }
}

TEST(VerifyWalk, ZeroTargetMassIsRejectedAndNeverResampled) {
  // p(x~) = 0 gives f = 0: rejected every round, and the next token comes from Norm([p - q]+),
  // which has no mass at x~ (one-hot q: p itself, since p(x~) is already 0).
  const auto exact = make_exact_rule();
  VerifySettings s;
  s.rule = exact.get();
  const Vec p = {0.4f, 0.0f, 0.35f, 0.25f, 0.0f}, q = {0.1f, 0.6f, 0.1f, 0.1f, 0.1f};
  const std::pair<Vec, DVec> cases[] = {{{}, {0.4, 0.0, 0.35, 0.25, 0.0}},
                                        {q, {0.3 / 0.7, 0.0, 0.25 / 0.7, 0.15 / 0.7, 0.0}}};
  for (const auto& [qd, want] : cases) {
    SCOPED_TRACE(qd.empty() ? "one-hot q" : "explicit q");
    const Round r{{node(1, -1, 1, qd)}, {p, one_hot(0)}};
    const CounterRng rng(11, 0);
    std::map<int, int64_t> counts;
    constexpr int64_t kRounds = 20000;
    for (int64_t k = 0; k < kRounds; ++k) {
      ImageStats st;
      const VerifyOutcome o = walk(s, r, rng, k, st);
      ASSERT_TRUE(o.accepted.empty());
      ASSERT_TRUE(o.rejected);
      ASSERT_NE(o.next_token, 1);
      ASSERT_EQ(st.proposed, std::vector<int64_t>{1});
      EXPECT_TRUE(padded(st.accepted, 1) == std::vector<int64_t>{0});
      counts[o.next_token]++;
    }
    std::map<int, double> probs;
    for (int y = 0; y < kV; ++y) probs[y] = want[y];
    EXPECT_TRUE(matches(counts, probs, kRounds));
  }
  // The same at depth 2 of a chain: depth 1 is certain, depth 2 has p(x~) = 0.
  const Round chain{{node(2, -1, 1), node(4, 0, 2)}, {one_hot(2), p, one_hot(0)}};
  const CounterRng rng(12, 0);
  for (int64_t k = 0; k < 500; ++k) {
    ImageStats st;
    const VerifyOutcome o = walk(s, chain, rng, k, st);
    ASSERT_EQ(o.accepted, Path{0});
    ASSERT_TRUE(o.rejected);
    ASSERT_TRUE(o.next_token == 0 || o.next_token == 2 || o.next_token == 3) << o.next_token;
    ASSERT_EQ(st.proposed, (std::vector<int64_t>{1, 1}));
    ASSERT_EQ(padded(st.accepted, 2), (std::vector<int64_t>{1, 0}));
  }
}

TEST(VerifyWalk, SecondSiblingIsTestedOnlyAfterTheFirstIsRejected) {
  // Siblings drawn from one q without replacement: after the first is rejected the second is
  // tested against p1 = Norm([p - q]+) with q1 = q without the first token, renormalised.
  const Vec p = {0.05f, 0.35f, 0.3f, 0.1f, 0.2f}, q = {0.5f, 0.1f, 0.2f, 0.15f, 0.05f};
  const Round r{{node(0, -1, 1, q), node(2, -1, 1, q), node(3, 0, 2)},
                {p, one_hot(3), one_hot(1), one_hot(3)}};
  const CounterRng rng(13, 0);
  RecordingRule rule;
  VerifySettings s;
  s.rule = &rule;
  s.draft_len = 2;
  ImageStats st;
  rule.force = 0.0;  // reject everything
  VerifyOutcome o = walk(s, r, rng, 0, st);
  ASSERT_EQ(rule.calls.size(), 2u);
  EXPECT_EQ(rule.calls[0].token, 0);
  EXPECT_EQ(rule.calls[1].token, 2);
  EXPECT_EQ(rule.calls[1].position, 1);
  expect_vec_near(rule.calls[0].p, {0.05, 0.35, 0.3, 0.1, 0.2});
  expect_vec_near(rule.calls[0].q, {0.5, 0.1, 0.2, 0.15, 0.05});
  expect_vec_near(rule.calls[1].p, {0.0, 0.5, 0.2, 0.0, 0.3});  // [p - q]+ = {0,.25,.1,0,.15}
  expect_vec_near(rule.calls[1].q, {0.0, 0.2, 0.4, 0.3, 0.1});
  EXPECT_TRUE(o.accepted.empty());
  EXPECT_TRUE(o.rejected);
  EXPECT_TRUE(o.next_token == 1 || o.next_token == 4) << o.next_token;  // {0,.6,0,0,.4}
  // Accepting the first sibling never tests the second; its child is tested next, at depth 2.
  rule.calls.clear();
  rule.force = 1.0;
  o = walk(s, r, rng, 0, st);
  ASSERT_EQ(rule.calls.size(), 2u);
  EXPECT_EQ(rule.calls[0].token, 0);
  EXPECT_EQ(rule.calls[1].token, 3);
  EXPECT_EQ(rule.calls[1].position, 2);
  expect_vec_near(rule.calls[1].p, {0, 0, 0, 1, 0});  // the first sibling's row
  EXPECT_TRUE(rule.calls[1].q.empty());
  EXPECT_EQ(o.accepted, (Path{0, 2}));
  EXPECT_FALSE(o.rejected);
  EXPECT_EQ(o.next_token, 3);
}

// ------------------------------------------------------------------------------- stochastic

TEST(VerifyWalk, TwoSiblingResidualMatchesTheFormula) {
  // p, q as above: f1 = p(0)/q(0) = 0.1; then p1 = {0,.5,.2,0,.3}, q2 = {0,.2,.4,.3,.1}, f2 = 0.5.
  // After both rejections the token is drawn from norm(max(norm(max(p - q1, 0)) - q2, 0)).
  const auto exact = make_exact_rule();
  VerifySettings s;
  s.rule = exact.get();
  const Vec p = {0.05f, 0.35f, 0.3f, 0.1f, 0.2f}, q = {0.5f, 0.1f, 0.2f, 0.15f, 0.05f};
  const Round r{{node(0, -1, 1, q), node(2, -1, 1, q)},
                {p, {0.2f, 0.2f, 0.2f, 0.2f, 0.2f}, {0.1f, 0.1f, 0.1f, 0.1f, 0.6f}}};
  DVec q1(q.begin(), q.end()), q2 = q1, p1(kV), p2(kV);
  q2[0] = 0.0;
  normalise(q2);
  for (int y = 0; y < kV; ++y) p1[y] = std::max(0.0, p[y] - q1[y]);
  normalise(p1);
  for (int y = 0; y < kV; ++y) p2[y] = std::max(0.0, p1[y] - q2[y]);
  normalise(p2);
  ASSERT_NEAR(p2[1], 0.6, 1e-6);  // the hand computation above
  ASSERT_NEAR(p2[4], 0.4, 1e-6);

  constexpr int64_t kRounds = 40000;
  ImageStats total;
  const auto counts = run_rounds(s, r, 21, kRounds, total);
  std::map<int, int64_t> after_both;
  int64_t n_both = 0;
  for (const auto& [o, c] : counts)
    if (o.first.empty()) {
      after_both[o.second] += c;
      n_both += c;
    }
  std::map<int, double> want;
  for (int y = 0; y < kV; ++y) want[y] = p2[y];
  EXPECT_TRUE(matches(after_both, want, n_both)) << "token after both rejections";
  EXPECT_TRUE(matches(counts, outcome_distribution(r), kRounds)) << "outcomes of the round";
  EXPECT_NEAR(static_cast<double>(n_both) / kRounds, 0.9 * 0.5, 0.01);  // 4 sigma
}

TEST(VerifyWalk, TreeOutcomesMatchEnumerationAndStatsCount) {
  // Depth 3, siblings at depths 1 and 2, one-hot and explicit q mixed.
  const Vec Q0 = {0.1f, 0.4f, 0.3f, 0.1f, 0.1f};
  Round r;
  r.tree = {node(1, -1, 1, Q0),
            node(2, -1, 1, Q0),
            node(0, 0, 2),
            node(3, 0, 2),
            node(4, 1, 2, Vec(kV, 0.2f)),
            node(2, 2, 3, {0.05f, 0.05f, 0.6f, 0.2f, 0.1f})};
  r.rows = {{0.2f, 0.3f, 0.25f, 0.05f, 0.2f}, {0.5f, 0.1f, 0.1f, 0.2f, 0.1f},
            {0.1f, 0.2f, 0.3f, 0.1f, 0.3f},   {0.1f, 0.2f, 0.4f, 0.2f, 0.1f},
            {0.3f, 0.3f, 0.2f, 0.1f, 0.1f},   {0.2f, 0.2f, 0.2f, 0.2f, 0.2f},
            {0.0f, 0.5f, 0.0f, 0.25f, 0.25f}};
  const auto exact = make_exact_rule();
  VerifySettings s;
  s.rule = exact.get();
  s.draft_len = 3;
  constexpr int64_t kRounds = 60000;
  ImageStats total;
  const auto counts = run_rounds(s, r, 22, kRounds, total);
  EXPECT_TRUE(matches(counts, outcome_distribution(r), kRounds));
  // Stats accumulated over the rounds (as the loop does) equal the per-outcome tallies.
  std::vector<int64_t> proposed, accepted;
  for (const auto& [o, c] : counts)
    for (int64_t i = 0; i < c; ++i) tally(r.tree, o.first, proposed, accepted);
  ASSERT_EQ(proposed.size(), 3u);  // every depth was reached
  EXPECT_EQ(total.proposed, proposed);
  EXPECT_EQ(padded(total.accepted, 3), accepted);
  EXPECT_GT(proposed[0], kRounds);  // some rounds tested both depth-1 siblings
}

TEST(VerifyWalk, LosslessFirstToken) {
  // The exact rule is lossless: with the drafts drawn from q (siblings without replacement), or
  // fixed one-hot drafts, the first token the round emits is distributed as the root's p.
  const auto exact = make_exact_rule();
  VerifySettings s;
  s.rule = exact.get();
  s.draft_len = 2;
  const Vec p0 = {0.2f, 0.3f, 0.25f, 0.05f, 0.2f}, Q = {0.1f, 0.4f, 0.3f, 0.1f, 0.1f};
  const Vec p1 = {0.6f, 0.1f, 0.1f, 0.1f, 0.1f}, Q1 = {0.2f, 0.2f, 0.2f, 0.2f, 0.2f};
  std::map<int, double> want;
  for (int y = 0; y < kV; ++y) want[y] = p0[y];
  std::mt19937 g(23);
  for (int mode = 0; mode < 3; ++mode) {  // sampled chain, sampled two siblings, one-hot siblings
    SCOPED_TRACE("mode " + std::to_string(mode));
    const CounterRng rng(24 + mode, 0);
    std::map<int, int64_t> counts;
    constexpr int64_t kRounds = 30000;
    for (int64_t k = 0; k < kRounds; ++k) {
      Round r;
      std::discrete_distribution<int> dq(Q.begin(), Q.end());
      const int a = dq(g);
      if (mode == 0) {
        const int b = std::discrete_distribution<int>(Q1.begin(), Q1.end())(g);
        r.tree = {node(a, -1, 1, Q), node(b, 0, 2, Q1)};
        r.rows = {p0, p1, p1};
      } else if (mode == 1) {
        Vec rest = Q;
        rest[a] = 0.0f;
        const int b = std::discrete_distribution<int>(rest.begin(), rest.end())(g);
        r.tree = {node(a, -1, 1, Q), node(b, -1, 1, Q)};
        r.rows = {p0, p1, p1};
      } else {
        r.tree = {node(1, -1, 1), node(2, -1, 1), node(0, -1, 1)};
        r.rows = {p0, p1, p1, p1};
      }
      ImageStats st;
      const VerifyOutcome o = walk(s, r, rng, k, st);
      counts[o.accepted.empty() ? o.next_token : r.tree[o.accepted[0]].token]++;
    }
    EXPECT_TRUE(matches(counts, want, kRounds));
  }
}

TEST(VerifyWalk, EmptyDraftDrawsTheBonusTokenFromTheTarget) {
  const auto exact = make_exact_rule();
  VerifySettings s;
  s.rule = exact.get();
  const Round r{{}, {{0.1f, 0.0f, 0.5f, 0.15f, 0.25f}}};
  const CounterRng rng(25, 0);
  std::map<Outcome, int64_t> counts;
  constexpr int64_t kRounds = 20000;
  for (int64_t k = 0; k < kRounds; ++k) {
    ImageStats st;
    const VerifyOutcome o = walk(s, r, rng, k, st);
    ASSERT_TRUE(o.accepted.empty());
    ASSERT_FALSE(o.rejected);
    ASSERT_TRUE(st.proposed.empty());
    counts[{o.accepted, o.next_token}]++;
  }
  EXPECT_TRUE(matches(counts, outcome_distribution(r), kRounds));
}

// ----------------------------------------------------------------------------------- greedy

TEST(VerifyWalk, Greedy) {
  // Temperature 0: a node survives iff it is the first argmax of its row; siblings are tested in
  // order against the unmodified row; the next token is the argmax after the last accepted node.
  // No randomness: the outcome is the same for every seed and round.
  const auto exact = make_exact_rule();
  VerifySettings s;
  s.rule = exact.get();
  s.greedy = true;
  s.draft_len = 3;
  const Vec root = {0.1f, 0.2f, 0.4f, 0.2f, 0.1f};  // argmax 2
  const Vec tie = {0.3f, 0.3f, 0.1f, 0.2f, 0.1f};   // first argmax 0 (tied with 1)
  const Vec r3 = {0.1f, 0.1f, 0.1f, 0.3f, 0.4f};    // argmax 4
  struct Case {
    const char* name;
    Round r;
    Path accepted;
    int next;
    bool rejected;
    std::vector<int64_t> proposed, acc;
  };
  const Case cases[] = {
      // chain 2 -> 0 -> 1: depth 3 proposes 1 where the argmax is 0 (tie): rejected.
      {"chain rejected at depth 3",
       {{node(2, -1, 1), node(0, 0, 2), node(1, 1, 3)}, {root, tie, tie, r3}},
       {0, 1},
       0,
       true,
       {1, 1, 1},
       {1, 1, 0}},
      {"chain fully accepted",
       {{node(2, -1, 1), node(0, 0, 2), node(0, 1, 3)}, {root, tie, tie, r3}},
       {0, 1, 2},
       4,
       false,
       {1, 1, 1},
       {1, 1, 1}},
      // siblings 3, 2 at depth 1 (the second is the argmax); 4 under 3 is never tested; under 2,
      // siblings 1 (tied, not first) and 0.
      {"siblings",
       {{node(3, -1, 1), node(2, -1, 1), node(4, 0, 2), node(1, 1, 2), node(0, 1, 2)},
        {root, r3, tie, r3, r3, root}},
       {1, 4},
       2,
       false,
       {2, 2},
       {1, 1}},
      {"no sibling is the argmax",
       {{node(0, -1, 1), node(4, -1, 1), node(2, 0, 2)}, {root, root, root, root}},
       {},
       2,
       true,
       {2},
       {0}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    for (uint64_t seed : {1u, 2u})
      for (int64_t k : {0, 1, 7}) {
        ImageStats st;
        const VerifyOutcome o = walk(s, c.r, CounterRng(seed, 0), k, st);
        EXPECT_EQ(o.accepted, c.accepted);
        EXPECT_EQ(o.next_token, c.next);
        EXPECT_EQ(o.rejected, c.rejected);
        EXPECT_EQ(st.proposed, c.proposed);
        EXPECT_EQ(padded(st.accepted, c.acc.size()), c.acc);
      }
  }
}
