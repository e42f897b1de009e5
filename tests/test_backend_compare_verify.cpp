// A round's drafts verified on a backend under test (speculative/verify_images.h, issue 42): a
// batch of images with chains of every length and trees (siblings drawn with and without
// replacement), one-hot, sampled and mixed drafts, every ratio rule with either resampling and
// LANTERN's forms, sampled and greedy: each image's verdict (the path accepted, the token that
// ends the round, rejected or not) must equal the CPU backend's, which tests/test_verify_rows.cpp
// checks against the engine's verify_draft. The device walks with the same function, so the
// verdicts are equal, not close (COOL-SD's ω uses exp, within 1 ulp on the device: a verdict could
// differ only where a uniform falls within that of a threshold).
#include <gtest/gtest.h>

#include <functional>
#include <optional>

#include <random>
#include <vector>

#include "backends_under_test.h"
#include "speculative/verify_images.h"

using namespace tessera;
using namespace tessera::speculative;
using namespace tessera::testing_backends;

namespace {

class Verify : public BackendTest {};

struct Batch {
  int n = 0, width = 0, V = 0;
  std::vector<float> p, q;
  std::vector<WalkNode> nodes;
  std::vector<RoundImage> images;
};

Batch random_batch(std::mt19937& g, int n, int width, int V) {
  Batch b{n, width, V, {}, {}, {}, {}};
  std::gamma_distribution<float> gamma(0.3f);
  auto row = [&](std::vector<float>& out) {
    std::vector<float> r(V);
    float total = 0.0f;
    for (float& x : r) total += x = g() % 4 == 0 ? 0.0f : gamma(g);
    if (total <= 0.0f) r[0] = total = 1.0f;
    for (float& x : r) out.push_back(x / total);
  };
  for (int i = 0; i < n; ++i) {
    for (int d = 0; d <= width; ++d) row(b.p);
    // Odd images draft trees: each node's parent drawn among the earlier nodes.
    const bool tree = i % 2 == 1;
    for (int d = 0; d < width; ++d) {
      row(b.q);
      WalkNode w;
      w.parent = tree ? static_cast<int32_t>(g() % (d + 1)) - 1 : d - 1;
      w.depth = w.parent < 0 ? 1 : b.nodes[static_cast<size_t>(i) * width + w.parent].depth + 1;
      const float* qd = b.q.data() + b.q.size() - V;
      const float* pd = b.p.data() + (static_cast<size_t>(i) * (width + 1) + w.parent + 1) * V;
      // Half the drafts are the target's likeliest (often accepted), half random ones.
      int32_t x = static_cast<int32_t>(g() % V);
      if (g() % 2) x = static_cast<int32_t>(std::max_element(pd, pd + V) - pd);
      b.q[b.q.size() - V + x] = std::max(qd[x], 0.01f);
      w.token = x;
      w.flags = (tree && g() % 2 ? WalkNode::kWithReplacement : 0) |
                (i % 8 == 5 && g() % 2 ? WalkNode::kOneHot : 0);
      b.nodes.push_back(w);
    }
    RoundImage im;
    im.seed = g();
    im.image_index = i;
    im.base_token = 1 + g() % 100;
    im.drafts = static_cast<int32_t>(g() % (width + 1));
    im.draft_len = std::max(1, im.drafts + static_cast<int32_t>(g() % 2));
    b.images.push_back(im);
  }
  return b;
}

// carried: when given, every other image also makes its Jacobi carry-over draws, returned there
// (-1 where none was made).
std::vector<DraftVerdict> verify_on(Backend& be, Batch b, const WalkRule& rule, bool one_hot,
                                    bool greedy, int64_t round,
                                    const LatentNeighbours* table = nullptr,
                                    const std::vector<float>* embedding = nullptr,
                                    std::vector<int32_t>* carried = nullptr) {
  Tensor table_rows;  // LANTERN's table or GSD's embedding on `be`
  WalkRule on_be = rule;
  if (table) {
    table_rows = be.upload(table->table().data(), DType::I32, {table->vocab(), table->k_max()});
    on_be.lantern.table = table_rows.ptr<int32_t>();
    on_be.lantern.table_k = table->k_max();
  }
  if (embedding) {
    table_rows =
        be.upload(embedding->data(), DType::F32, {static_cast<int64_t>(embedding->size())});
    on_be.gsd.embedding = table_rows.ptr<float>();
  }
  for (size_t i = 0; i < b.images.size(); ++i) {
    b.images[i].rule = on_be;
    b.images[i].round = round + static_cast<int64_t>(i % 3);
    // One-hot: every image's (q is not passed); otherwise a quarter of them.
    b.images[i].one_hot = one_hot || i % 4 == 1;
    b.images[i].carry = carried && i % 2 == 0;
  }
  Tensor p = be.upload(b.p.data(), DType::F32, {b.n * (b.width + 1), b.V});
  Tensor q = be.upload(b.q.data(), DType::F32, {b.n * b.width, b.V});
  Tensor nodes = be.upload(b.nodes.data(), DType::U8,
                           {static_cast<int64_t>(b.nodes.size() * sizeof(WalkNode))});
  Tensor images =
      be.upload(b.images.data(), DType::U8, {static_cast<int64_t>(b.n * sizeof(RoundImage))});
  std::vector<float> zeros(static_cast<size_t>(b.n * verify_scratch(b.V)), 0.0f);
  Tensor scratch = be.upload(zeros.data(), DType::F32, {b.n, verify_scratch(b.V)});
  std::vector<DraftVerdict> out(b.n);
  Tensor verdicts =
      be.upload(out.data(), DType::U8, {static_cast<int64_t>(b.n * sizeof(DraftVerdict))});
  std::vector<int32_t> draws(static_cast<size_t>(b.n * b.width), -1);
  Tensor draws_on_be = be.upload(draws.data(), DType::I32, {b.n * b.width});
  verify_images(be, p, one_hot ? nullptr : &q, nodes, images, b.n, b.width, greedy, scratch,
                verdicts, carried ? &draws_on_be : nullptr);
  be.download(verdicts, out.data());
  if (carried) {
    be.download(draws_on_be, draws.data());
    *carried = draws;
  }
  return out;
}

// Each image's verdict equal; counts the rounds that ended with a rejection and with a bonus token.
void expect_same_verdicts(const std::vector<DraftVerdict>& got,
                          const std::vector<DraftVerdict>& want, int& rejected, int& bonus) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i].accepted, want[i].accepted) << "image " << i;
    ASSERT_EQ(got[i].last, want[i].last) << "image " << i;
    ASSERT_EQ(got[i].next_token, want[i].next_token) << "image " << i;
    ASSERT_EQ(got[i].rejected, want[i].rejected) << "image " << i;
    rejected += want[i].rejected;
    bonus += !want[i].rejected;
  }
}

// Per vocabulary, what a rule's pointers refer to (LANTERN's table, GSD's embedding).
struct RuleAssets {
  std::optional<LatentNeighbours> table;
  std::vector<float> embedding;
};
// Makes vocabulary V's assets (random, from g) and completes a rule for them.
using MakeAssets = std::function<void(int V, std::mt19937& g, RuleAssets& assets, WalkRule& rule)>;

struct Compared {
  int rejected = 0, bonus = 0, draws = 0;  // draws: carry-over draws compared
};

// Every rule of `rules` walked on the backend under test and on the CPU: random batches at three
// vocabularies, drafts with q and one-hot, sampled and greedy; each image's verdict equal, and
// with `carry` every other image's Jacobi carry-over draws too.
Compared compare_walks(Backend& be, Backend& cpu, uint32_t seed, const std::vector<WalkRule>& rules,
                       int64_t round_step, bool carry, const MakeAssets& make = {}) {
  std::mt19937 g(seed);
  Compared c;
  for (const int V : {16, 1000, 16384}) {
    RuleAssets assets;
    std::vector<WalkRule> complete = rules;
    for (WalkRule& rule : complete)
      if (make) make(V, g, assets, rule);
    const Batch b = random_batch(g, V > 1000 ? 8 : 40, 6, V);
    const LatentNeighbours* table = assets.table ? &*assets.table : nullptr;
    const std::vector<float>* embedding = assets.embedding.empty() ? nullptr : &assets.embedding;
    for (size_t r = 0; r < complete.size(); ++r)
      for (const bool one_hot : {false, true})
        for (const bool greedy : {false, true}) {
          SCOPED_TRACE("V " + std::to_string(V) + ", rule " + std::to_string(r) +
                       (one_hot ? ", one-hot" : "") + (greedy ? ", greedy" : ""));
          const int64_t round = static_cast<int64_t>(r) * round_step;
          std::vector<int32_t> got_carried, want_carried;
          expect_same_verdicts(verify_on(be, b, complete[r], one_hot, greedy, round, table,
                                         embedding, carry ? &got_carried : nullptr),
                               verify_on(cpu, b, complete[r], one_hot, greedy, round, table,
                                         embedding, carry ? &want_carried : nullptr),
                               c.rejected, c.bonus);
          EXPECT_EQ(got_carried, want_carried);
          c.draws += static_cast<int>(std::count_if(want_carried.begin(), want_carried.end(),
                                                    [](int32_t t) { return t >= 0; }));
        }
  }
  return c;
}

}  // namespace

TEST_P(Verify, RatioDraftsVerifyAsTheCpu) {
  std::vector<WalkRule> rules;
  for (const RatioRule& r :
       std::vector<RatioRule>{{},
                              {.scale = 1.5f},
                              {.scale = 2.0f, .annealed = true},
                              {.scale = 1.3f, .annealed = true, .nu = 0.7f},
                              {.kind = RatioRule::Kind::Add, .eps = 0.05f},
                              {.scale = 1.5f, .optimal = true},
                              {.scale = 2.0f, .annealed = true, .optimal = true},
                              {.kind = RatioRule::Kind::Add, .eps = 0.05f, .optimal = true}}) {
    rules.emplace_back();
    rules.back().ratio = r;
  }
  const Compared c = compare_walks(backend(), ref(), 42, rules, 3, false);
  EXPECT_GT(c.rejected, 200);
  EXPECT_GT(c.bonus, 200);
}

// LANTERN's drafts (its neighbour table uploaded to the backend): the paper's δ rule, LANTERN++'s
// λ rule in both conventions and the published code's form, half of them also under G*.
TEST_P(Verify, LanternDraftsVerifyAsTheCpu) {
  std::vector<WalkRule> rules;
  auto add = [&](int others, float delta, float lambda, bool code, bool reference) {
    WalkRule w;
    w.kind = WalkRule::Kind::Lantern;
    LanternRuleData& r = w.lantern;
    r.others = others;
    r.zeroed = others + 1;
    r.delta = delta;
    r.lambda = lambda;
    r.lambda_code = code;
    r.reference = reference;
    rules.push_back(w);
  };
  add(4, 0.3f, 0.0f, false, false);
  add(30, 0.6f, 0.0f, false, false);
  add(7, 0.0f, 2.0f, false, false);
  add(8, 0.0f, 3.0f, true, false);
  add(5, 0.3f, 0.0f, false, true);
  add(6, 0.0f, 2.5f, true, true);
  const size_t plain = rules.size();
  for (size_t r = 0; r < plain; r += 2) {
    rules.push_back(rules[r]);
    rules.back().optimal = 1;
  }
  const Compared c = compare_walks(backend(), ref(), 43, rules, 5, false,
                                   [](int V, std::mt19937& g, RuleAssets& assets, WalkRule&) {
                                     if (assets.table) return;
                                     std::normal_distribution<float> normal;
                                     std::vector<float> codebook(static_cast<size_t>(V) * 4);
                                     for (float& x : codebook) x = normal(g);
                                     assets.table = LatentNeighbours::build(
                                         codebook, V, 4, std::min(V - 1, 32), LatentMetric::L2);
                                   });
  EXPECT_GT(c.rejected, 200);
  EXPECT_GT(c.bonus, 200);
}

// GSD's drafts (its embedding uploaded to the backend), in both forms and windows up to the shared
// function's largest, with Jacobi's carry-over draws made beside the walk.
TEST_P(Verify, GsdDraftsAndJacobiCarryOverVerifyAsTheCpu) {
  std::vector<WalkRule> rules;
  auto add = [&](int group, float d, float delta, bool reference) {
    WalkRule w;
    w.kind = WalkRule::Kind::Gsd;
    w.gsd.g = group;
    w.gsd.d = d;
    w.gsd.delta = delta;
    w.gsd.reference = reference;
    rules.push_back(w);
  };
  add(10, 2.0f, 0.2f, false);
  add(4, 1e9f, 1.0f, false);
  add(14, 2.0f, 0.2f, true);
  add(2 * kGsdMaxHalf, 1e9f, 1.0f, false);
  constexpr int dim = 3;
  const Compared c = compare_walks(backend(), ref(), 44, rules, 7, true,
                                   [](int V, std::mt19937& g, RuleAssets& assets, WalkRule& rule) {
                                     if (assets.embedding.empty()) {
                                       std::normal_distribution<float> normal;
                                       assets.embedding.resize(static_cast<size_t>(V) * dim);
                                       for (float& x : assets.embedding) x = normal(g);
                                     }
                                     rule.gsd.rows = V;
                                     rule.gsd.dim = dim;
                                   });
  EXPECT_GT(c.rejected, 100);
  EXPECT_GT(c.bonus, 100);
  EXPECT_GT(c.draws, 500) << "carry-over draws compared";
}

// Medusa's typical acceptance (p itself the resampling distribution), thresholds that accept some
// drafts and reject others, the last under G*. A device's log and exp may differ from the CPU's by
// an ulp, which would flip a test only with p(x~) within ~1e-16 of the threshold; none of these
// is.
TEST_P(Verify, TypicalDraftsVerifyAsTheCpu) {
  std::vector<WalkRule> rules;
  for (const TypicalRuleData& t :
       std::vector<TypicalRuleData>{{0.09f, 0.3f}, {0.05f, 1.0f}, {0.3f, 0.5f}, {0.09f, 0.3f}}) {
    rules.emplace_back();
    rules.back().kind = WalkRule::Kind::Typical;
    rules.back().typical = t;
  }
  rules.back().optimal = 1;
  const Compared c = compare_walks(backend(), ref(), 45, rules, 11, false);
  EXPECT_GT(c.rejected, 100);
  EXPECT_GT(c.bonus, 100);
}

INSTANTIATE_TEST_SUITE_P(Backends, Verify, ::testing::ValuesIn(kBackendNames), backend_param_name);
