// The device-ready walk (verify_rows, src/speculative/verify_rows.h) against the engine's
// verification walk (verify_draft) on random chains and trees: for every ratio rule, with either
// resampling, and LANTERN in every form (over a random codebook's neighbour table), one-hot,
// sampled and mixed drafts, siblings drawn with and without replacement, sampled and greedy, the
// two accept the same path, count the same proposals and end the round with the same token (the
// same Philox uniforms, the same formulas). And the
// descriptors: which rules have one, and what it holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "speculative/backend_verifier.h"
#include "speculative/rules/rules.h"
#include "speculative/verify.h"
#include "speculative/verify_images.h"
#include "speculative/verify_rows.h"
#include "speculative/walk_lanes.h"
#include "tensor/cpu/cpu_backend.h"

using namespace tessera;
using namespace tessera::speculative;

namespace {

// A random distribution over V tokens, some of them 0 (top-k/top-p cut them).
std::vector<float> random_distribution(std::mt19937& g, int V) {
  std::gamma_distribution<float> gamma(0.3f);
  std::bernoulli_distribution cut(0.3);
  std::vector<float> d(V);
  float total = 0.0f;
  for (float& x : d) total += x = cut(g) ? 0.0f : gamma(g);
  if (total <= 0.0f) d[0] = total = 1.0f;
  for (float& x : d) x /= total;
  return d;
}

struct Case {
  std::string name;
  std::unique_ptr<AcceptanceRule> rule;
};

// LANTERN over a random codebook's neighbour table, in every form: the paper's δ rule, LANTERN++'s
// λ rule in both conventions, and the published code's (reference) form; budgets large enough
// that A is often non-empty.
std::shared_ptr<const LatentNeighbours> random_table(int V) {
  std::mt19937 g(99);
  std::normal_distribution<float> normal;
  std::vector<float> codebook(static_cast<size_t>(V) * 4);
  for (float& x : codebook) x = normal(g);
  return std::make_shared<const LatentNeighbours>(
      LatentNeighbours::build(codebook, V, 4, V - 1, LatentMetric::L2));
}

std::vector<Case> lantern_rules(const std::shared_ptr<const LatentNeighbours>& nb) {
  std::vector<Case> c;
  auto add = [&](const std::string& name, LanternParams p) {
    c.push_back({name, make_lantern_rule(p, nb)});
  };
  add("lantern", {.k = 5, .delta = 0.3f});
  add("lantern k 20", {.k = 20, .delta = 0.6f});
  add("lantern++", {.k = 8, .lambda = 2.0f});
  add("lantern++ code", {.k = 8, .lambda = 3.0f, .lambda_rule = LambdaRule::Code});
  add("lantern reference", {.k = 5, .delta = 0.3f, .reference = true});
  add("lantern++ reference", {.k = 6, .lambda = 2.5f, .reference = true});
  return c;
}

// GSD over a random embedding, in both forms, with bounds that keep part of each window.
std::vector<Case> gsd_rules(int V) {
  std::mt19937 g(98);
  std::normal_distribution<float> normal;
  auto emb = std::make_shared<std::vector<float>>(static_cast<size_t>(V) * 3);
  for (float& x : *emb) x = normal(g);
  std::vector<Case> c;
  c.push_back({"gsd", make_gsd_rule({.g = 10, .d = 4.0f, .delta = 0.1f}, emb, 3)});
  c.push_back({"gsd g 4", make_gsd_rule({.g = 4, .d = 1e9f, .delta = 1.0f}, emb, 3)});
  c.push_back({"gsd reference",
               make_gsd_rule({.g = 14, .d = 4.0f, .delta = 0.1f, .reference = true}, emb, 3)});
  // Windows wider than the one-pass form holds (kGsdMaxHalf): the host rule's heaps, the walk's
  // passes. A half of 70 covers the 24 tokens (the reference form: its slice starts below 0, so
  // it rejects every draft).
  c.push_back({"gsd wide", make_gsd_rule({.g = 140, .d = 4.0f, .delta = 0.3f}, emb, 3)});
  c.push_back({"gsd wide reference",
               make_gsd_rule({.g = 140, .d = 4.0f, .delta = 0.3f, .reference = true}, emb, 3)});
  return c;
}

std::vector<Case> ratio_rules() {
  std::vector<Case> c;
  c.push_back({"exact", make_exact_rule()});
  c.push_back({"uniform-rsd", make_uniform_rsd_rule(1.5f)});
  c.push_back({"cool-sd", make_cool_sd_rule(2.0f, -1.0f)});
  c.push_back({"cool-sd nu 0.7", make_cool_sd_rule(1.3f, 0.7f)});
  c.push_back({"amplify", make_amplify_rule(2.0f)});
  c.push_back({"addition", make_addition_rule(0.05f)});
  const size_t n = c.size();
  for (size_t i = 0; i < n; ++i) {
    std::unique_ptr<AcceptanceRule> again =
        c[i].name == "exact"            ? make_exact_rule()
        : c[i].name == "uniform-rsd"    ? make_uniform_rsd_rule(1.5f)
        : c[i].name == "cool-sd"        ? make_cool_sd_rule(2.0f, -1.0f)
        : c[i].name == "cool-sd nu 0.7" ? make_cool_sd_rule(1.3f, 0.7f)
        : c[i].name == "amplify"        ? make_amplify_rule(2.0f)
                                        : make_addition_rule(0.05f);
    c.push_back({c[i].name + " G*", with_optimal_resampling(std::move(again))});
  }
  return c;
}

// A random draft of n nodes: a chain, or a tree (each node's parent drawn among the earlier nodes,
// up to 3 deep). q rows for every node (zeros for a one-hot node); tokens from q or, half the time,
// the target's likeliest at the parent (often accepted). Sampled drafts are drawn without
// replacement, with replacement, or mixed node by node; one-hot drafts all, or some, of them.
struct RandomDraft {
  DraftTree tree;
  std::vector<WalkNode> nodes;
  std::vector<float> p, q;  // n + 1 rows; n rows
};

enum class QKind { Sampled, OneHot, Mixed };

RandomDraft random_draft(std::mt19937& g, int V, int n, bool chain, QKind kind) {
  RandomDraft r;
  for (int d = 0; d <= n; ++d) {
    const std::vector<float> row = random_distribution(g, V);
    r.p.insert(r.p.end(), row.begin(), row.end());
  }
  const int replacement = static_cast<int>(g() % 3);  // 0: without, 1: with, 2: per node
  for (int c = 0; c < n; ++c) {
    DraftNode node;
    if (chain) {
      node.parent = c - 1;
    } else {
      do node.parent = static_cast<int>(g() % (c + 1)) - 1;
      while (node.parent >= 0 && r.tree[node.parent].depth >= 3);
    }
    node.depth = node.parent < 0 ? 1 : r.tree[node.parent].depth + 1;
    std::vector<float> qd = random_distribution(g, V);
    std::discrete_distribution<int> from(qd.begin(), qd.end());
    node.token = g() % 2 ? from(g) : argmax_row(r.p.data() + (node.parent + 1) * V, V);
    const bool one_hot = kind == QKind::OneHot || (kind == QKind::Mixed && g() % 2);
    if (!one_hot) {
      qd[node.token] = std::max(qd[node.token], 0.01f);  // the token was drawn from q
      node.q = qd;
    }
    node.with_replacement = replacement == 1 || (replacement == 2 && g() % 2);
    r.q.insert(r.q.end(), qd.begin(), qd.end());
    WalkNode w;
    w.token = node.token;
    w.parent = node.parent;
    w.depth = node.depth;
    w.flags = (node.with_replacement ? WalkNode::kWithReplacement : 0) |
              (one_hot ? WalkNode::kOneHot : 0);
    r.nodes.push_back(w);
    r.tree.push_back(std::move(node));
  }
  return r;
}

// verify_draft's outcome for a draft whose rows start at p.
VerifyOutcome host_walk(const AcceptanceRule& rule, const DraftTree& tree, const float* p, int V,
                        int L, bool greedy, uint64_t seed, uint64_t image, uint32_t base,
                        int64_t round, ImageStats& stats) {
  VerifySettings s;
  s.rule = &rule;
  s.draft_len = std::max(1, L);
  s.greedy = greedy;
  return verify_draft(
      s, tree, [&](int r) { return std::span<const float>(p + static_cast<size_t>(r) * V, V); },
      CounterRng(seed, image), round, static_cast<int>(base), stats);
}

}  // namespace

// A GPU block's lanes (speculative/cuda/block_lanes.cuh) run in one thread: the same contiguous
// chunks (lane_chunk), chunk sums, chunk argmaxes and chunk draws, combined lane by lane in lane
// order (a block combines the same partial results in its fixed warp order). The walk's verdicts
// must not depend on how its passes are split.
template <int Lanes>
struct ChunkedLanes {
  template <class F>
  void each(int n, F&& f) const {
    for (int t = 0; t < Lanes; ++t)  // a block's strided assignment
      for (int i = t; i < n; i += Lanes) f(i);
  }
  template <class F>
  void one(F&& f) const {
    f();
  }
  template <class Keep, class Better>
  int best(int n, Keep&& keep, Better&& better) const {
    int found = -1;
    for (int t = 0, b, e; t < Lanes; ++t) {
      lane_chunk(t, Lanes, n, &b, &e);
      const int chunk = chunk_best(keep, better, b, e, -1);
      if (chunk >= 0 && (found < 0 || better(chunk, found))) found = chunk;
    }
    return found;
  }
  double sum(const float* v, int n) const {
    double total = 0.0;
    for (int t = 0, b, e; t < Lanes; ++t) {
      lane_chunk(t, Lanes, n, &b, &e);
      total += chunk_sum(v, b, e);
    }
    return total;
  }
  template <class F>
  double sum_of(int n, F&& f) const {
    double total = 0.0;
    for (int t = 0, b, e; t < Lanes; ++t) {
      lane_chunk(t, Lanes, n, &b, &e);
      total += chunk_sum_of(f, b, e);
    }
    return total;
  }
  int argmax(const float* v, int n) const {
    float best = -INFINITY;
    int best_index = INT_MAX;
    for (int t = 0, b, e; t < Lanes; ++t) {
      lane_chunk(t, Lanes, n, &b, &e);
      float chunk_best = -INFINITY;
      int chunk_index = INT_MAX;
      chunk_argmax(v, b, e, &chunk_best, &chunk_index);
      if (chunk_best > best) best = chunk_best, best_index = chunk_index;
    }
    return best_index == INT_MAX ? 0 : best_index;
  }
  int draw(const float* v, int n, double u) const {
    std::vector<double> part(Lanes);
    double total = 0.0;
    for (int t = 0, b, e; t < Lanes; ++t) {
      lane_chunk(t, Lanes, n, &b, &e);
      total += part[t] = chunk_sum(v, b, e);
    }
    double before = 0.0;
    int last = -1;
    for (int t = 0, b, e; t < Lanes; ++t) {
      lane_chunk(t, Lanes, n, &b, &e);
      const int hit = draw_in_chunk(v + b, e - b, b, before, u * total, &last);
      if (hit >= 0) return hit;
      before += part[t];
    }
    return last;
  }
};

TEST(VerifyRows, RowsWalkIsVerifyDraft) {
  constexpr int V = 24;
  std::mt19937 g(2026);
  int rejections = 0, bonus = 0, sibling_rejections = 0;
  std::vector<Case> rules = ratio_rules();
  for (Case& c : lantern_rules(random_table(V))) rules.push_back(std::move(c));
  for (Case& c : gsd_rules(V)) rules.push_back(std::move(c));
  // Typical acceptance with thresholds that accept some drafts and reject others.
  rules.push_back({"typical", make_typical_rule(0.09f, 0.3f)});
  rules.push_back({"typical tight", make_typical_rule(0.05f, 1.0f)});
  // G* for LANTERN and typical acceptance (optimal_residual_row).
  rules.push_back({"typical G*", with_optimal_resampling(make_typical_rule(0.09f, 0.3f))});
  for (Case& c : lantern_rules(random_table(V)))
    rules.push_back({c.name + " G*", with_optimal_resampling(std::move(c.rule))});
  // GSD's G* from one ranking of the row (V = 24 pads the sort to 32).
  for (Case& c : gsd_rules(V))
    rules.push_back({c.name + " G*", with_optimal_resampling(std::move(c.rule))});
  for (const Case& c : rules) {
    const std::optional<WalkRuleSource> source = c.rule->walk_rule();
    ASSERT_TRUE(source) << c.name;
    const WalkRule descriptor = source->rule;
    for (const bool chain : {true, false})
      for (const QKind kind : {QKind::Sampled, QKind::OneHot, QKind::Mixed})
        for (const bool greedy : {false, true})
          for (int trial = 0; trial < 60; ++trial) {
            SCOPED_TRACE(c.name + (chain ? " chain" : " tree") + " q kind " +
                         std::to_string(static_cast<int>(kind)) + (greedy ? " greedy" : "") +
                         " trial " + std::to_string(trial));
            const int n = static_cast<int>(g() % (chain ? 7 : 9));
            const int L = std::max(1, n + static_cast<int>(g() % 3));
            const RandomDraft r = random_draft(g, V, n, chain, kind);
            const uint64_t seed = g(), image = g() % 5;
            const uint32_t base = 1 + g() % 200;
            const int64_t round = g() % 50;
            ImageStats want_stats, got_stats;
            const VerifyOutcome want = host_walk(*c.rule, r.tree, r.p.data(), V, L, greedy, seed,
                                                 image, base, round, want_stats);
            std::vector<float> scratch(verify_scratch(V));
            const bool all_one_hot = kind == QKind::OneHot;
            const DraftVerdict got = verify_rows(
                descriptor, r.p.data(), all_one_hot ? nullptr : r.q.data(), r.nodes.data(), n, L, V,
                greedy, seed, image, base, round, scratch.data());
            const VerifyOutcome out = BackendVerifier::outcome(got, r.tree, got_stats);
            ASSERT_EQ(out.accepted, want.accepted);
            ASSERT_EQ(out.next_token, want.next_token);
            ASSERT_EQ(out.rejected, want.rejected);
            ASSERT_EQ(got_stats.proposed, want_stats.proposed);
            ASSERT_EQ(got_stats.accepted, want_stats.accepted);
            // The same walk with its passes split as a block of 5 lanes splits them (chunks of 5
            // of V = 24, the last one short) and as a block with more lanes than entries.
            for (const auto& [lanes, chunked] :
                 {std::pair{
                      5, verify_rows_on(ChunkedLanes<5>{}, descriptor, r.p.data(),
                                        all_one_hot ? nullptr : r.q.data(), r.nodes.data(), n, L, V,
                                        greedy, seed, image, base, round, scratch.data())},
                  std::pair{32,
                            verify_rows_on(ChunkedLanes<32>{}, descriptor, r.p.data(),
                                           all_one_hot ? nullptr : r.q.data(), r.nodes.data(), n, L,
                                           V, greedy, seed, image, base, round, scratch.data())}}) {
              ASSERT_EQ(chunked.accepted, got.accepted) << lanes << " lanes";
              ASSERT_EQ(chunked.last, got.last) << lanes << " lanes";
              ASSERT_EQ(chunked.next_token, got.next_token) << lanes << " lanes";
              ASSERT_EQ(chunked.rejected, got.rejected) << lanes << " lanes";
            }
            rejections += got.rejected;
            bonus += !got.rejected;
            // A rejected sibling before the accepted one, or more than one rejected at the end.
            int64_t tested = 0;
            for (int64_t x : want_stats.proposed) tested += x;
            sibling_rejections += tested > static_cast<int64_t>(want.accepted.size()) + 1;
          }
  }
  EXPECT_GT(rejections, 1000) << "rounds that end with a residual draw";
  EXPECT_GT(bonus, 1000) << "rounds that end with a bonus token";
  EXPECT_GT(sibling_rejections, 300) << "rounds that test a sibling after a rejection";
}

// GSD's f in the walk's passes form (gsd_accept_probability_on: one lanes.best pass a neighbour)
// equals the host rule's bit for bit: its one-pass form up to kGsdMaxHalf, its heaps beyond, on
// rows long enough that the heaps fill and evict, with ties in p (the ranking breaks them by id),
// both forms, sampled and one-hot q; the passes on one lane and split as blocks of 7 and 32 lanes
// (SerialLanes itself takes the one-pass form up to kGsdMaxHalf).
TEST(VerifyRows, GsdWindowsAreTheHostRules) {
  constexpr int V = 300, dim = 3;
  std::mt19937 g(4242);
  std::normal_distribution<float> normal;
  auto emb = std::make_shared<std::vector<float>>(static_cast<size_t>(V) * dim);
  for (float& x : *emb) x = normal(g);
  int accepted = 0, partial = 0, trials = 0;
  for (const int group : {2, 10, 2 * kGsdMaxHalf, 2 * kGsdMaxHalf + 2, 260, 700})
    for (const bool reference : {false, true}) {
      const auto rule =
          make_gsd_rule({.g = group, .d = 6.0f, .delta = 0.004f, .reference = reference}, emb, dim);
      const WalkRule w = rule->walk_rule()->rule;
      for (int trial = 0; trial < 60; ++trial) {
        SCOPED_TRACE("G " + std::to_string(group) + (reference ? " reference" : "") + " trial " +
                     std::to_string(trial));
        // Logits rounded to a coarse grid: many tokens share a probability.
        std::vector<float> p(V), q(V);
        for (float* row : {p.data(), q.data()}) {
          double total = 0.0;
          for (int y = 0; y < V; ++y)
            total += row[y] = std::exp(std::round(2.0f * normal(g)) / 2.0f);
          for (int y = 0; y < V; ++y) row[y] = static_cast<float>(row[y] / total);
        }
        const int x = static_cast<int>(g() % V);
        for (const bool one_hot : {false, true}) {
          NodeView n;
          n.token = x;
          n.p = p;
          if (!one_hot) n.q = q;
          const float* qp = one_hot ? nullptr : q.data();
          const double want = rule->accept_probability(n);
          EXPECT_EQ(gsd_accept_probability_on(SerialLanes{}, w.gsd, p.data(), qp, x, V), want);
          EXPECT_EQ(gsd_accept_probability_on(ChunkedLanes<1>{}, w.gsd, p.data(), qp, x, V), want);
          EXPECT_EQ(gsd_accept_probability_on(ChunkedLanes<7>{}, w.gsd, p.data(), qp, x, V), want);
          EXPECT_EQ(gsd_accept_probability_on(ChunkedLanes<32>{}, w.gsd, p.data(), qp, x, V), want);
          accepted += want == 1.0;
          partial += want > 0.0 && want < 1.0;
          ++trials;
        }
      }
    }
  EXPECT_GT(accepted, trials / 10);
  EXPECT_GT(partial, trials / 10);
}

// GSD's ranking for G* (gsd_rank_row, a bitonic sort over a power-of-two span) is the stable
// ascending sort of p, on one lane and split as blocks of 7 and 32 lanes, for vocabularies that
// pad the span and one that fills it, with ties (broken by id); f from it
// (gsd_accept_probability_ranked) is the grouping pass's f, also past the one-pass bound, on rows
// with ties and on rows over many orders of magnitude (where the order the members are summed in
// shows); and G* from the chunked lanes' ranking (optimal_residual_row) is the host rule's.
TEST(VerifyRows, GsdRanksTheRowAsAStableSort) {
  std::mt19937 g(808);
  std::normal_distribution<float> normal;
  int ties = 0, checked = 0;
  for (const int V : {1, 2, 3, 7, 64, 100, 300}) {
    const int dim = 2;
    auto emb = std::make_shared<std::vector<float>>(static_cast<size_t>(V) * dim);
    for (float& x : *emb) x = normal(g);
    for (int trial = 0; trial < 20; ++trial) {
      SCOPED_TRACE("V " + std::to_string(V) + " trial " + std::to_string(trial));
      std::vector<float> p(V), q = random_distribution(g, V);
      const bool wide = trial % 2 == 1;  // over many orders of magnitude, else coarse: ties
      for (float& x : p)
        x = wide ? std::exp(8.0f * normal(g)) : std::exp(std::round(2.0f * normal(g)) / 2.0f);
      std::vector<int> want(V);
      std::iota(want.begin(), want.end(), 0);
      std::stable_sort(want.begin(), want.end(), [&](int a, int b) { return p[a] < p[b]; });
      for (int i = 1; i < V; ++i) ties += p[want[i]] == p[want[i - 1]];
      const int span = gsd_rank_span(V);
      ASSERT_GE(span, V);
      ASSERT_LT(span, 2 * std::max(V, 1));
      std::vector<std::vector<float>> outs;
      auto rank_with = [&](const auto& lanes) {
        std::vector<float> scratch(static_cast<size_t>(gsd_rank_scratch(V)), -1.0f);
        gsd_rank_row(lanes, p.data(), V, scratch.data(), scratch.data() + span);
        outs.push_back(scratch);
      };
      rank_with(SerialLanes{});
      rank_with(ChunkedLanes<7>{});
      rank_with(ChunkedLanes<32>{});
      for (const std::vector<float>& s : outs) {
        for (int i = 0; i < V; ++i) {
          ASSERT_EQ(static_cast<int>(s[i]), want[i]) << "position " << i;
          ASSERT_EQ(static_cast<int>(s[span + want[i]]), i) << "rank of " << want[i];
        }
        for (int i = V; i < span; ++i) ASSERT_EQ(static_cast<int>(s[i]), i) << "padding";
      }
      for (const int group : {4, 10, 2 * kGsdMaxHalf + 6})
        for (const bool reference : {false, true}) {
          const auto rule = make_gsd_rule(
              {.g = group, .d = 5.0f, .delta = 0.5f, .reference = reference}, emb, dim);
          const GsdRuleData w = rule->walk_rule()->rule.gsd;
          for (int x = 0; x < V; ++x) {
            NodeView n;
            n.token = x;
            n.p = p;
            n.q = q;
            ASSERT_EQ(gsd_accept_probability_ranked(w, p.data(), q.data(), x, V, outs[0].data(),
                                                    outs[0].data() + span),
                      rule->accept_probability(n))
                << "x " << x << " G " << group << (reference ? " reference" : "");
            ++checked;
          }
          // G* at one token, ranked on 7 chunked lanes, entry by entry against the host rule's.
          const auto g_star = with_optimal_resampling(make_gsd_rule(
              {.g = group, .d = 5.0f, .delta = 0.5f, .reference = reference}, emb, dim));
          WalkRule walk = g_star->walk_rule()->rule;
          const int x = static_cast<int>(g() % V);
          NodeView n;
          n.token = x;
          n.p = p;
          n.q = q;
          std::vector<float> want(V), got(V, -1.0f);
          std::vector<float> rank_scratch(static_cast<size_t>(gsd_rank_scratch(V)));
          g_star->residual(n, want);
          optimal_residual_row(ChunkedLanes<7>{}, walk, p.data(), q.data(), x, V, 0.0,
                               rule->accept_probability(n), rank_scratch.data(), got.data());
          for (int y = 0; y < V; ++y) ASSERT_EQ(got[y], want[y]) << "G* at y " << y;
        }
    }
  }
  EXPECT_GT(ties, 1000) << "tied probabilities ranked by id";
  EXPECT_GT(checked, 10000);
}

// A device loop's static tree holds the children drawn without a token left (a suffix of a
// node's children, draw_children_rows' -1) and the nodes below them: the walk stops at the first
// such child as if the node had no more, and outcome() counts the tests as verify_draft does on
// the tree without them (the host loop's). Random trees with such suffixes, against the host walk
// of the pruned tree.
TEST(VerifyRows, MissingChildrenAreNoChildren) {
  constexpr int V = 24;
  std::mt19937 g(77);
  int cut = 0, accepted_past = 0;
  std::vector<Case> rules = ratio_rules();
  for (Case& c : lantern_rules(random_table(V))) rules.push_back(std::move(c));
  for (const Case& c : rules) {
    const WalkRule descriptor = c.rule->walk_rule()->rule;
    for (const bool greedy : {false, true})
      for (int trial = 0; trial < 80; ++trial) {
        SCOPED_TRACE(c.name + (greedy ? " greedy" : "") + " trial " + std::to_string(trial));
        const int n = 2 + static_cast<int>(g() % 8);
        RandomDraft r = random_draft(g, V, n, false, QKind::Sampled);
        // Node c0 and its later siblings miss, and everything below a missing node.
        const int c0 = static_cast<int>(g() % n);
        std::vector<bool> missing(n, false);
        for (int c = 0; c < n; ++c) {
          const int parent = r.tree[c].parent;
          missing[c] = (c >= c0 && parent == r.tree[c0].parent) || (parent >= 0 && missing[parent]);
        }
        DraftTree pruned;
        std::vector<int> index(n, -1);
        for (int c = 0; c < n; ++c) {
          if (missing[c]) {
            r.nodes[c].token = -1;
            r.tree[c].token = kTokenMissing;
            continue;
          }
          index[c] = static_cast<int>(pruned.size());
          pruned.push_back(r.tree[c]);
          if (pruned.back().parent >= 0) pruned.back().parent = index[pruned.back().parent];
        }
        // The pruned tree's target rows: the root's, then each kept node's.
        std::vector<float> p_pruned(r.p.begin(), r.p.begin() + V);
        for (int c = 0; c < n; ++c)
          if (!missing[c])
            p_pruned.insert(p_pruned.end(), r.p.begin() + (c + 1) * V, r.p.begin() + (c + 2) * V);
        const int L = 4;
        const uint64_t seed = g(), image = g() % 5;
        const uint32_t base = 1 + g() % 200;
        const int64_t round = g() % 50;
        ImageStats want_stats, got_stats;
        const VerifyOutcome want = host_walk(*c.rule, pruned, p_pruned.data(), V, L, greedy, seed,
                                             image, base, round, want_stats);
        std::vector<float> scratch(verify_scratch(V));
        const DraftVerdict got =
            verify_rows(descriptor, r.p.data(), r.q.data(), r.nodes.data(), n, L, V, greedy, seed,
                        image, base, round, scratch.data());
        const VerifyOutcome out = BackendVerifier::outcome(got, r.tree, got_stats);
        std::vector<int> mapped;
        for (int a : out.accepted) mapped.push_back(index[a]);
        ASSERT_EQ(mapped, want.accepted);
        ASSERT_EQ(out.next_token, want.next_token);
        ASSERT_EQ(out.rejected, want.rejected);
        ASSERT_EQ(got_stats.proposed, want_stats.proposed);
        ASSERT_EQ(got_stats.accepted, want_stats.accepted);
        cut += std::count(missing.begin(), missing.end(), true) > 0;
        // The walk went past the missing nodes' depth (they were a real choice to skip).
        accepted_past += static_cast<int>(out.accepted.size()) >= r.tree[c0].depth;
      }
  }
  EXPECT_GT(cut, 1000);
  EXPECT_GT(accepted_past, 100);
}

// Which rules are ratio rules, and their descriptors: exact is ω = 1; G* sets optimal; the rules
// that read tables or whole distributions have none (they verify on the host).
TEST(VerifyRows, RatioDescriptors) {
  EXPECT_EQ(make_exact_rule()->ratio(), RatioRule{});
  EXPECT_EQ(make_uniform_rsd_rule(1.5f)->ratio(), (RatioRule{.scale = 1.5f}));
  EXPECT_EQ(make_amplify_rule(3.0f)->ratio(), (RatioRule{.scale = 3.0f}));
  EXPECT_EQ(make_cool_sd_rule(2.0f, 0.5f)->ratio(),
            (RatioRule{.scale = 2.0f, .annealed = true, .nu = 0.5f}));
  EXPECT_EQ(make_addition_rule(0.1f)->ratio(),
            (RatioRule{.kind = RatioRule::Kind::Add, .eps = 0.1f}));
  EXPECT_EQ(with_optimal_resampling(make_cool_sd_rule(2.0f, -1.0f))->ratio(),
            (RatioRule{.scale = 2.0f, .annealed = true, .nu = -1.0f, .optimal = true}));
  EXPECT_EQ(with_optimal_resampling(make_exact_rule())->name(), "exact+G*");
  EXPECT_FALSE(make_typical_rule(0.3f, 0.09f)->ratio());
  EXPECT_FALSE(with_optimal_resampling(make_typical_rule(0.3f, 0.09f))->ratio());
  // The walk's descriptors: ratio rules, LANTERN with its table, typical acceptance, the last two
  // under G* too, and GSD under G*.
  EXPECT_EQ(make_exact_rule()->walk_rule()->rule.kind, WalkRule::Kind::Ratio);
  const auto table = random_table(24);
  const auto lantern =
      make_lantern_rule({.k = 5, .delta = 0.3f, .reference = true}, table)->walk_rule();
  ASSERT_TRUE(lantern);
  EXPECT_EQ(lantern->rule.kind, WalkRule::Kind::Lantern);
  EXPECT_EQ(lantern->table, table);
  EXPECT_EQ(lantern->rule.lantern.others, 5);
  EXPECT_EQ(lantern->rule.lantern.zeroed, 6);
  EXPECT_EQ(lantern->rule.lantern.table, table->table().data());
  const auto typical = make_typical_rule(0.3f, 0.09f)->walk_rule();
  ASSERT_TRUE(typical);
  EXPECT_EQ(typical->rule.kind, WalkRule::Kind::Typical);
  EXPECT_EQ(typical->rule.typical.eps, 0.3f);
  EXPECT_EQ(typical->rule.typical.alpha, 0.09f);
  const auto typical_g = with_optimal_resampling(make_typical_rule(0.3f, 0.09f))->walk_rule();
  ASSERT_TRUE(typical_g);
  EXPECT_EQ(typical_g->rule.kind, WalkRule::Kind::Typical);
  EXPECT_EQ(typical_g->rule.optimal, 1);
  EXPECT_EQ(typical->rule.optimal, 0);
  const auto lantern_g = with_optimal_resampling(make_lantern_rule({.k = 5}, table))->walk_rule();
  ASSERT_TRUE(lantern_g);
  EXPECT_EQ(lantern_g->rule.kind, WalkRule::Kind::Lantern);
  EXPECT_EQ(lantern_g->rule.optimal, 1);
  EXPECT_EQ(lantern_g->table, table);
  // GSD with its embedding (the exact rule's residual); not with a window past the shared
  // function's arrays, nor under G*.
  auto emb = std::make_shared<const std::vector<float>>(24 * 2, 0.5f);
  const auto gsd = make_gsd_rule({.g = 12, .reference = true}, emb, 2)->walk_rule();
  ASSERT_TRUE(gsd);
  EXPECT_EQ(gsd->rule.kind, WalkRule::Kind::Gsd);
  EXPECT_EQ(gsd->rule.ratio, RatioRule{});
  EXPECT_EQ(gsd->embedding, emb);
  EXPECT_EQ(gsd->rule.gsd.embedding, emb->data());
  EXPECT_EQ(gsd->rule.gsd.g, 12);
  EXPECT_EQ(gsd->rule.gsd.reference, 1);
  EXPECT_EQ(gsd->rule.gsd.rows, 24);
  // A window wider than the one-pass form's arrays: the walk's passes have no bound.
  EXPECT_TRUE(make_gsd_rule({.g = 2 * kGsdMaxHalf + 2}, emb, 2)->walk_rule());
  // GSD under G*: its descriptor with the flag (the walk ranks the row once).
  const auto gsd_g = with_optimal_resampling(make_gsd_rule({.g = 12}, emb, 2))->walk_rule();
  ASSERT_TRUE(gsd_g);
  EXPECT_EQ(gsd_g->rule.kind, WalkRule::Kind::Gsd);
  EXPECT_EQ(gsd_g->rule.optimal, 1);
  EXPECT_EQ(gsd_g->embedding, emb);
  EXPECT_EQ(gsd->rule.optimal, 0);
}

// The batched form (verify_images.h) on the CPU backend: each image of a round, with chains and
// trees of different sizes in one padded batch, its own rule, its own round and one-hot, sampled
// or mixed drafts, gets verify_draft's verdict for its own draft.
TEST(VerifyRows, BatchedDraftsAreEachImagesWalk) {
  constexpr int V = 12, W = 6, kImages = 40;
  std::mt19937 g(7);
  std::vector<std::unique_ptr<AcceptanceRule>> rules;
  rules.push_back(make_cool_sd_rule(1.5f, -1.0f));
  rules.push_back(make_exact_rule());
  rules.push_back(with_optimal_resampling(make_uniform_rsd_rule(1.5f)));
  const auto table = random_table(V);
  rules.push_back(make_lantern_rule({.k = 4, .delta = 0.3f}, table));
  rules.push_back(make_lantern_rule({.k = 4, .delta = 0.3f, .reference = true}, table));
  std::vector<float> p, q;
  std::vector<WalkNode> nodes;
  std::vector<RoundImage> images;
  std::vector<RandomDraft> drafts;
  for (int i = 0; i < kImages; ++i) {
    RoundImage im;
    im.rule = rules[i % rules.size()]->walk_rule()->rule;
    im.seed = 100 + i;
    im.image_index = i % 3;
    im.round = 4 + i % 2;
    im.base_token = 10 + i;
    im.drafts = i % (W + 1);
    im.draft_len = W;
    im.one_hot = i % 4 == 3;
    images.push_back(im);
    const QKind kind = im.one_hot ? QKind::OneHot : (i % 4 == 2 ? QKind::Mixed : QKind::Sampled);
    RandomDraft r = random_draft(g, V, im.drafts, i % 3 == 0, kind);
    // Padding to the round's width: rows and nodes past the draft are never read.
    r.p.resize(static_cast<size_t>(W + 1) * V, 0.5f);
    std::vector<float> qi = r.q;
    qi.resize(static_cast<size_t>(W) * V, 0.5f);
    std::vector<WalkNode> ni = r.nodes;
    ni.resize(W);
    p.insert(p.end(), r.p.begin(), r.p.end());
    q.insert(q.end(), qi.begin(), qi.end());
    nodes.insert(nodes.end(), ni.begin(), ni.end());
    drafts.push_back(std::move(r));
  }
  Backend& be = cpu_backend();
  Tensor tp = be.upload(p.data(), DType::F32, {kImages * (W + 1), V});
  Tensor tq = be.upload(q.data(), DType::F32, {kImages * W, V});
  Tensor tn = be.upload(nodes.data(), DType::U8, {kImages * W * int64_t{sizeof(WalkNode)}});
  Tensor ti = be.upload(images.data(), DType::U8, {kImages * int64_t{sizeof(RoundImage)}});
  std::vector<float> zeros(kImages * verify_scratch(V), 0.0f);
  Tensor scratch = be.upload(zeros.data(), DType::F32, {kImages, verify_scratch(V)});
  std::vector<DraftVerdict> verdicts(kImages);
  Tensor tv = be.upload(verdicts.data(), DType::U8, {kImages * int64_t{sizeof(DraftVerdict)}});
  verify_images(be, tp, &tq, tn, ti, kImages, W, false, scratch, tv);
  be.download(tv, verdicts.data());
  int accepted = 0;
  for (int i = 0; i < kImages; ++i) {
    ImageStats want_stats, got_stats;
    const VerifyOutcome want = host_walk(
        *rules[i % rules.size()], drafts[i].tree, drafts[i].p.data(), V, W, false, images[i].seed,
        images[i].image_index, images[i].base_token, images[i].round, want_stats);
    const VerifyOutcome got = BackendVerifier::outcome(verdicts[i], drafts[i].tree, got_stats);
    EXPECT_EQ(got.accepted, want.accepted) << "image " << i;
    EXPECT_EQ(got.next_token, want.next_token) << "image " << i;
    EXPECT_EQ(got.rejected, want.rejected) << "image " << i;
    EXPECT_EQ(got_stats.proposed, want_stats.proposed) << "image " << i;
    accepted += verdicts[i].accepted;
  }
  EXPECT_GT(accepted, kImages / 3) << "drafts of likeliest tokens are often accepted";
}
