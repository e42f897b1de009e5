// The device-ready chain walk (verify_chain, src/speculative/verify_chain.h) against the
// engine's verification walk (verify_draft) on random chains: for every ratio rule, with either
// resampling, and LANTERN in every form (over a random codebook's neighbour table), one-hot and
// sampled drafts, sampled and greedy, the two accept the same drafts and
// end the round with the same token (the same Philox uniforms, the same formulas). And the
// descriptors: which rules have one, and what it holds.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "speculative/rules/rules.h"
#include "speculative/verify.h"
#include "speculative/verify_chain.h"
#include "speculative/verify_chains.h"
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

}  // namespace

TEST(VerifyChain, ChainWalkIsVerifyDraft) {
  constexpr int V = 24;
  std::mt19937 g(2026);
  int rejections = 0, bonus = 0;
  std::vector<Case> rules = ratio_rules();
  for (Case& c : lantern_rules(random_table(V))) rules.push_back(std::move(c));
  for (const Case& c : rules) {
    const std::optional<ChainRuleSource> source = c.rule->chain_rule();
    ASSERT_TRUE(source) << c.name;
    const ChainRule descriptor = source->rule;
    for (const bool one_hot : {false, true})
      for (const bool greedy : {false, true})
        for (int trial = 0; trial < 150; ++trial) {
          SCOPED_TRACE(c.name + (one_hot ? " one-hot" : " sampled") + (greedy ? " greedy" : "") +
                       " trial " + std::to_string(trial));
          const int n = static_cast<int>(g() % 7), L = n + static_cast<int>(g() % 3);
          std::vector<float> p, q;
          std::vector<int32_t> tokens;
          DraftTree tree;
          for (int d = 0; d <= n; ++d) {
            const std::vector<float> row = random_distribution(g, V);
            p.insert(p.end(), row.begin(), row.end());
          }
          for (int d = 0; d < n; ++d) {
            const std::vector<float> qd = random_distribution(g, V);
            // A draft from q (or, half the time, the target's likeliest: often accepted).
            std::discrete_distribution<int> from(qd.begin(), qd.end());
            const int32_t x = g() % 2 ? from(g) : argmax_row(p.data() + d * V, V);
            tokens.push_back(x);
            DraftNode node;
            node.token = x;
            node.parent = d - 1;
            node.depth = d + 1;
            if (!one_hot) {
              node.q = qd;
              node.q[x] = std::max(node.q[x], 0.01f);  // x was drawn from q
              q.insert(q.end(), node.q.begin(), node.q.end());
            }
            tree.push_back(node);
          }
          const uint64_t seed = g(), image = g() % 5;
          const uint32_t base = 1 + g() % 200;
          const int64_t round = g() % 50;
          VerifySettings s;
          s.rule = c.rule.get();
          s.draft_len = std::max(1, L);
          s.greedy = greedy;
          ImageStats stats;
          const VerifyOutcome want = verify_draft(
              s, tree,
              [&](int r) {
                return std::span<const float>(p.data() + static_cast<size_t>(r) * V, V);
              },
              CounterRng(seed, image), round, static_cast<int>(base), stats);
          std::vector<float> scratch(V);
          const ChainVerdict got =
              verify_chain(descriptor, p.data(), one_hot ? nullptr : q.data(), tokens.data(), n,
                           std::max(1, L), V, greedy, seed, image, base, round, scratch.data());
          ASSERT_EQ(got.accepted, static_cast<int>(want.accepted.size()));
          ASSERT_EQ(got.next_token, want.next_token);
          ASSERT_EQ(got.rejected, want.rejected);
          rejections += got.rejected;
          bonus += !got.rejected;
        }
  }
  EXPECT_GT(rejections, 500) << "rounds that end with a residual draw";
  EXPECT_GT(bonus, 500) << "rounds that end with a bonus token";
}

// Which rules are ratio rules, and their descriptors: exact is ω = 1; G* sets optimal; the rules
// that read tables or whole distributions have none (they verify on the host).
TEST(VerifyChain, RatioDescriptors) {
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
  // The chain walk's descriptors: ratio rules, LANTERN with its table; neither typical
  // acceptance nor LANTERN under G* (an O(V k) residual a rejection would cost).
  EXPECT_EQ(make_exact_rule()->chain_rule()->rule.kind, ChainRule::Kind::Ratio);
  const auto table = random_table(24);
  const auto lantern =
      make_lantern_rule({.k = 5, .delta = 0.3f, .reference = true}, table)->chain_rule();
  ASSERT_TRUE(lantern);
  EXPECT_EQ(lantern->rule.kind, ChainRule::Kind::Lantern);
  EXPECT_EQ(lantern->table, table);
  EXPECT_EQ(lantern->rule.lantern.others, 5);
  EXPECT_EQ(lantern->rule.lantern.zeroed, 6);
  EXPECT_EQ(lantern->rule.lantern.table, table->table().data());
  EXPECT_FALSE(make_typical_rule(0.3f, 0.09f)->chain_rule());
  EXPECT_FALSE(with_optimal_resampling(make_lantern_rule({.k = 5}, table))->chain_rule());
}

// The batched form (verify_chains.h) on the CPU backend: each image of a round, with chains of
// different lengths in one padded batch, its own rule, its own round and one-hot or sampled
// drafts, gets verify_draft's verdict for its own chain.
TEST(VerifyChain, BatchedChainsAreEachImagesWalk) {
  constexpr int V = 12, W = 5, kImages = 30;
  std::mt19937 g(7);
  std::vector<std::unique_ptr<AcceptanceRule>> rules;
  rules.push_back(make_cool_sd_rule(1.5f, -1.0f));
  rules.push_back(make_exact_rule());
  rules.push_back(with_optimal_resampling(make_uniform_rsd_rule(1.5f)));
  const auto table = random_table(V);
  rules.push_back(make_lantern_rule({.k = 4, .delta = 0.3f}, table));
  std::vector<float> p, q;
  std::vector<int32_t> tokens;
  std::vector<ChainRoundImage> images;
  std::vector<DraftTree> trees;
  for (int i = 0; i < kImages; ++i) {
    for (int d = 0; d <= W; ++d) {
      const std::vector<float> row = random_distribution(g, V);
      p.insert(p.end(), row.begin(), row.end());
    }
    ChainRoundImage im;
    im.rule = rules[i % rules.size()]->chain_rule()->rule;
    im.seed = 100 + i;
    im.image_index = i % 3;
    im.round = 4 + i % 2;
    im.base_token = 10 + i;
    im.drafts = i % (W + 1);
    im.draft_len = W;
    im.one_hot = i % 4 == 3;
    images.push_back(im);
    DraftTree tree;
    for (int d = 0; d < W; ++d) {
      std::vector<float> qd = random_distribution(g, V);
      const int32_t x = argmax_row(p.data() + (static_cast<size_t>(i) * (W + 1) + d) * V, V);
      qd[x] = std::max(qd[x], 0.05f);
      q.insert(q.end(), qd.begin(), qd.end());
      tokens.push_back(x);
      if (d < im.drafts) {
        DraftNode node;
        node.token = x;
        node.parent = d - 1;
        node.depth = d + 1;
        if (!im.one_hot) node.q = qd;
        tree.push_back(node);
      }
    }
    trees.push_back(tree);
  }
  Backend& be = cpu_backend();
  Tensor tp = be.upload(p.data(), DType::F32, {kImages * (W + 1), V});
  Tensor tq = be.upload(q.data(), DType::F32, {kImages * W, V});
  Tensor tt = be.upload(tokens.data(), DType::I32, {kImages * W});
  Tensor ti = be.upload(images.data(), DType::U8, {kImages * int64_t{sizeof(ChainRoundImage)}});
  std::vector<float> zeros(kImages * V, 0.0f);
  Tensor scratch = be.upload(zeros.data(), DType::F32, {kImages, V});
  std::vector<ChainVerdict> verdicts(kImages);
  Tensor tv = be.upload(verdicts.data(), DType::U8, {kImages * int64_t{sizeof(ChainVerdict)}});
  verify_chains(be, tp, &tq, tt, ti, kImages, W, false, scratch, tv);
  be.download(tv, verdicts.data());
  int accepted = 0;
  for (int i = 0; i < kImages; ++i) {
    VerifySettings s;
    s.rule = rules[i % rules.size()].get();
    s.draft_len = W;
    ImageStats stats;
    const size_t first = static_cast<size_t>(i) * (W + 1) * V;
    const VerifyOutcome want = verify_draft(
        s, trees[i],
        [&](int r) {
          return std::span<const float>(p.data() + first + static_cast<size_t>(r) * V, V);
        },
        CounterRng(images[i].seed, images[i].image_index), images[i].round,
        static_cast<int>(images[i].base_token), stats);
    EXPECT_EQ(verdicts[i].accepted, static_cast<int>(want.accepted.size())) << "image " << i;
    EXPECT_EQ(verdicts[i].next_token, want.next_token) << "image " << i;
    EXPECT_EQ(verdicts[i].rejected, want.rejected) << "image " << i;
    accepted += verdicts[i].accepted;
  }
  EXPECT_GT(accepted, kImages / 2) << "chains of likeliest tokens are mostly accepted";
}
