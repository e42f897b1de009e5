// A round's drafts verified on a backend under test (speculative/verify_images.h, issue 42): a
// batch of images with chains of every length and trees (siblings drawn with and without
// replacement), one-hot, sampled and mixed drafts, every ratio rule with either resampling and
// LANTERN's forms, sampled and greedy: each image's verdict (the path accepted, the token that
// ends the round, rejected or not) must equal the CPU backend's, which tests/test_verify_rows.cpp
// checks against the engine's verify_draft. The device walks with the same function, so the
// verdicts are equal, not close: a GPU block sums a row's chunks in its own fixed order (~1e-16
// relative, in double, cuda/block_lanes.cuh) and COOL-SD's ω uses exp (within 1 ulp on the
// device), so a verdict could differ only where a uniform falls within that of a threshold.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>

#include <random>
#include <vector>

#include "backends_under_test.h"
#include "speculative/chain_commit.h"
#include "speculative/dynamic_frontier.h"
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

// GSD's drafts (its embedding uploaded to the backend), in both forms and windows up to the
// one-pass form's largest and past it (the walk's passes have no bound), three of them under G*
// (the row ranked by the block's bitonic passes), with Jacobi's carry-over draws made beside the
// walk.
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
  add(2 * kGsdMaxHalf + 12, 2.0f, 0.2f, false);
  for (size_t r : {size_t{0}, size_t{2}, size_t{4}}) {
    rules.push_back(rules[r]);
    rules.back().optimal = 1;
  }
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
// an ulp, and its block sums the entropy in another order, which would flip a test only with
// p(x~) within ~1e-16 of the threshold; none of these is.
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

namespace {

// One round of a dynamic tree's frontier on backend b (dynamic_frontier.h): the root's ranked rows,
// then an expansion per depth, each fed first; every feed's tokens, feature rows and mask rows,
// and the download (images, best lists) at the end.
struct FrontierRound {
  std::vector<int32_t> tokens, feature_rows;
  std::vector<uint8_t> masks, down;
};

FrontierRound run_frontier(Backend& b, const DynamicLayout& L, const std::vector<uint8_t>& up,
                           const std::vector<std::vector<int32_t>>& ids,
                           const std::vector<std::vector<float>>& mass, int halves, int stride,
                           int32_t flag_value = 0) {
  FrontierRound out;
  Tensor state = b.empty(DType::U8, {L.end});
  Tensor images = state.bytes_as(0, DType::U8, {L.best});
  b.upload_into(up.data(), images);
  const Tensor flag = b.upload(&flag_value, DType::I32, {1});
  const int64_t rows = int64_t{halves} * L.m * L.K;
  for (size_t e = 0; e < ids.size(); ++e) {
    const int depth = static_cast<int>(e) + 1;
    if (depth > 1) {  // feed the frontier of depth - 1, then rank its rows
      const int d = depth - 1, tree_rows = (d - 1) * L.K, prev_rows = d == 1 ? 1 : L.K;
      Tensor tokens = b.empty(DType::I32, {rows}), feature = b.empty(DType::I32, {rows});
      Tensor mask = b.empty(DType::U8, {rows * stride});
      feed_frontiers(b, state, L, halves, d, tree_rows, prev_rows, tokens, &feature, mask, stride);
      std::vector<int32_t> t(rows), f(rows);
      std::vector<uint8_t> mk(rows * stride);
      b.download(tokens, t.data());
      b.download(feature, f.data());
      b.download(mask, mk.data());
      out.tokens.insert(out.tokens.end(), t.begin(), t.end());
      out.feature_rows.insert(out.feature_rows.end(), f.begin(), f.end());
      out.masks.insert(out.masks.end(), mk.begin(), mk.end());
    }
    const Tensor i = b.upload(ids[e].data(), DType::I32, {static_cast<int64_t>(ids[e].size())});
    const Tensor m = b.upload(mass[e].data(), DType::F32, {static_cast<int64_t>(mass[e].size())});
    expand_frontiers(b, state, L, i, m, flag, depth);
  }
  best_candidates(b, state, L);
  out.down.resize(static_cast<size_t>(L.download()));
  b.download(state.bytes_as(0, DType::U8, {L.download()}), out.down.data());
  return out;
}

}  // namespace

// The dynamic tree's frontier kernels (a block per image on a GPU) give the CPU's candidates,
// frontiers, feeds (tokens, f^ rows, tree-mask rows) and best lists: 5 images, K = 4, three
// expansions, random ranked rows (distinct ids, masses descending, some rows cut short by ids
// without mass), one image stopping at depth 2. Scores are sums of double logs: the device's log
// may differ from glibc's in the last place, so they are compared to 1e-12 relative and the
// candidates' order (from distinct random masses) must not change; bit-equal on the second CPU.
TEST_P(Verify, DynamicFrontiersAreTheCpus) {
  std::mt19937 g(17);
  const int m = 5, K = 4, depth = 4, total = 20, halves = 2, V = 200;
  const DynamicLayout L = dynamic_layout(m, K, depth, total);
  std::vector<uint8_t> up(static_cast<size_t>(L.best), 0);
  const int tree_base[m] = {7, 3, 12, 9, 5}, max_depth[m] = {4, 2, 4, 3, 4};
  int stride = 0;
  for (int i = 0; i < m; ++i) {
    DynamicImage im;
    im.tree_base = tree_base[i];
    im.max_depth = max_depth[i];
    std::memcpy(up.data() + i * sizeof im, &im, sizeof im);
    stride = std::max(stride, tree_base[i] + (depth - 1) * K);
  }
  std::vector<std::vector<int32_t>> ids(depth);
  std::vector<std::vector<float>> mass(depth);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int e = 0; e < depth; ++e) {
    const int rows = m * (e == 0 ? 1 : K);
    for (int r = 0; r < rows; ++r) {
      std::vector<int32_t> tok(V);
      std::iota(tok.begin(), tok.end(), 0);
      std::shuffle(tok.begin(), tok.end(), g);
      std::vector<float> w(K);
      for (float& x : w) x = u(g);
      std::sort(w.rbegin(), w.rend());
      const int cut = r % 3 == 1 ? 2 : K;  // rows with fewer tokens with mass
      for (int k = 0; k < K; ++k) {
        ids[e].push_back(k < cut ? tok[k] : -1);
        mass[e].push_back(k < cut ? w[k] : 0.0f);
      }
    }
  }
  const FrontierRound want = run_frontier(ref(), L, up, ids, mass, halves, stride);
  const FrontierRound got = run_frontier(backend(), L, up, ids, mass, halves, stride);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.feature_rows, want.feature_rows);
  EXPECT_EQ(got.masks, want.masks);
  ASSERT_EQ(got.down.size(), want.down.size());
  for (int i = 0; i < m; ++i) {
    SCOPED_TRACE("image " + std::to_string(i));
    DynamicImage a, w;
    std::memcpy(&a, got.down.data() + i * sizeof a, sizeof a);
    std::memcpy(&w, want.down.data() + i * sizeof w, sizeof w);
    EXPECT_EQ(a.best, w.best);
    EXPECT_EQ(a.expansions, w.expansions);
    EXPECT_EQ(a.failed, 0);
    EXPECT_EQ(w.expansions, max_depth[i]);  // the root's, then one a fed depth
    EXPECT_EQ(w.best, i == 1 ? 8 : total);  // image 1: 2 roots (a short row), 6 children
    for (int k = 0; k < w.best; ++k) {
      DynamicCandidate x, y;
      const size_t at = L.best + (static_cast<size_t>(i) * total + k) * sizeof x;
      std::memcpy(&x, got.down.data() + at, sizeof x);
      std::memcpy(&y, want.down.data() + at, sizeof y);
      EXPECT_EQ(x.token, y.token) << k;
      EXPECT_EQ(x.parent, y.parent) << k;
      EXPECT_EQ(x.depth, y.depth) << k;
      EXPECT_EQ(x.rank, y.rank) << k;
      EXPECT_EQ(x.fed, y.fed) << k;
      EXPECT_LE(y.depth, max_depth[i]) << k;
      if (exact())
        EXPECT_EQ(x.score, y.score) << k;
      else
        EXPECT_NEAR(x.score, y.score, 1e-12 * std::abs(y.score)) << k;
    }
  }
  // A ranking's error flag (a non-finite logit) reaches every image's `failed`, which the drafter
  // turns into an error.
  const FrontierRound flagged = run_frontier(backend(), L, up, ids, mass, halves, stride, 1);
  for (int i = 0; i < m; ++i) {
    DynamicImage im;
    std::memcpy(&im, flagged.down.data() + i * sizeof im, sizeof im);
    EXPECT_EQ(im.failed, 1) << "image " << i;
  }
  // Some tree rows were fed (f^ rows past the roots') and some mask columns past the committed ones
  // set: the round went past its first feed.
  EXPECT_TRUE(std::any_of(want.feature_rows.begin(), want.feature_rows.end(),
                          [&](int32_t r) { return r >= halves * m; }));
}

// A burst's commit (speculative/chain_commit.h) on the backend under test: 5 images' verdicts
// (every accepted count of chains of 4), their histories, counts and record, their Jacobi windows
// (refilled from carry-over draws and fresh uniform tokens), 300 fields of every kind (one a word,
// in the backend's memory: more than the block's threads) and the flags, over three rounds
// (clear, flagged, clear: after the flag nothing is committed, refilled or moved, and the flag
// stays): equal to the CPU's after each.
TEST_P(Verify, ChainCommitsAreTheCpus) {
  constexpr int m = 5, width = 4, N = 40, n_words = 300;
  std::mt19937 g(5);
  std::vector<DraftVerdict> verdicts(m);
  std::vector<WalkNode> nodes(m * width);
  std::vector<int32_t> state(m), history(m * N, -1), words(n_words);
  for (int j = 0; j < m; ++j) {
    verdicts[j].accepted = j % (width + 1);
    verdicts[j].last = verdicts[j].accepted - 1;
    verdicts[j].next_token = 1000 + j;
    verdicts[j].rejected = verdicts[j].accepted < width ? 1 : 0;
    state[j] = 2 + static_cast<int>(g() % 20);
    for (int t = 0; t < state[j]; ++t) history[j * N + t] = static_cast<int32_t>(g() % 500);
  }
  for (WalkNode& w : nodes) w.token = static_cast<int32_t>(g() % 500);
  for (int32_t& w : words) w = static_cast<int32_t>(g() % 100000);
  constexpr int V = 500, n_window = m * width * kWindowWords;
  std::vector<int32_t> carried(m * width);
  for (int32_t& t : carried) t = static_cast<int32_t>(g() % V);
  std::vector<WindowImage> windows(m);
  // Every other window shorter than the round's width: its padding slots stay as they were.
  for (int j = 0; j < m; ++j)
    windows[j] = {9, static_cast<uint64_t>(j), 3 + j, width - j % 2, 5 * j};
  struct Run {
    std::vector<int32_t> state, history, committed, words, flag, window;
    std::vector<int64_t> rounds;
  };
  auto run = [&](Backend& be) {
    auto up = [&](const void* data, size_t bytes) {
      return be.upload(data, DType::U8, {static_cast<int64_t>(bytes)});
    };
    Tensor v = up(verdicts.data(), verdicts.size() * sizeof(DraftVerdict));
    Tensor w = up(nodes.data(), nodes.size() * sizeof(WalkNode));
    Tensor s = be.upload(state.data(), DType::I32, {m});
    Tensor h = be.upload(history.data(), DType::I32, {m, N});
    Tensor c = be.zeros(DType::I32, {m});
    Tensor on_device = be.upload(words.data(), DType::I32, {n_words});
    const std::vector<int32_t> unset(n_window, -7);
    JacobiWindows jacobi{be.upload(carried.data(), DType::I32, {m * width}),
                         up(windows.data(), windows.size() * sizeof(WindowImage)),
                         be.upload(unset.data(), DType::I32, {n_window}), V};
    std::vector<RoundField> fields(n_words);
    for (int k = 0; k < n_words; ++k) {
      RoundField& f = fields[k];
      f.word = on_device.ptr<int32_t>() + k;
      f.image = k % m;
      f.kind = k % 4;
      f.add = f.kind == RoundField::kToken    ? -1 - k % 2
              : f.kind == RoundField::kWindow ? k % n_window
                                              : k % 7 - 3;
    }
    Tensor fs = up(fields.data(), fields.size() * sizeof(RoundField));
    Tensor burst_flag = be.zeros(DType::I32, {1});
    std::vector<Run> rounds;
    for (const int32_t raised : {0, 1, 0}) {
      Tensor round_flag = be.upload(&raised, DType::I32, {1});
      commit_chain_round(be, v, w, m, width, s, h, c, fs, n_words, round_flag, burst_flag, &jacobi);
      Run r{std::vector<int32_t>(m), std::vector<int32_t>(m * N),
            std::vector<int32_t>(m), std::vector<int32_t>(n_words),
            std::vector<int32_t>(1), std::vector<int32_t>(n_window),
            std::vector<int64_t>(m)};
      std::vector<WindowImage> images(m);
      be.download(jacobi.images, images.data());
      for (int j = 0; j < m; ++j) r.rounds[j] = images[j].round;
      be.download(jacobi.words, r.window.data());
      be.download(s, r.state.data());
      be.download(h, r.history.data());
      be.download(c, r.committed.data());
      be.download(on_device, r.words.data());
      be.download(burst_flag, r.flag.data());
      rounds.push_back(std::move(r));
    }
    return rounds;
  };
  const std::vector<Run> want = run(ref()), got = run(backend());
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE("round " + std::to_string(r));
    EXPECT_EQ(got[r].committed, want[r].committed);
    EXPECT_EQ(got[r].state, want[r].state);
    EXPECT_EQ(got[r].history, want[r].history);
    EXPECT_EQ(got[r].words, want[r].words);
    EXPECT_EQ(got[r].flag, want[r].flag);
    EXPECT_EQ(got[r].window, want[r].window);
    EXPECT_EQ(got[r].rounds, want[r].rounds);
    EXPECT_EQ(want[r].flag[0], r == 0 ? 0 : 1);
    EXPECT_EQ(want[r].rounds[0], 4);  // refilled once, in the clear round
  }
  for (int j = 0; j < m; ++j) EXPECT_EQ(want[0].committed[j], j % (width + 1) + 1);
  // Image 1's window of 3 left its padding slot, and a window of 4 wrote its last.
  EXPECT_EQ(want[0].window[(1 * width + 3) * kWindowWords], -7);
  EXPECT_NE(want[0].window[(0 * width + 3) * kWindowWords], -7);
  EXPECT_EQ(want[2].committed, std::vector<int32_t>(m, 0));
  EXPECT_EQ(want[2].words, want[0].words);
  EXPECT_EQ(want[2].state, want[0].state);
}

INSTANTIATE_TEST_SUITE_P(Backends, Verify, ::testing::ValuesIn(kBackendNames), backend_param_name);
