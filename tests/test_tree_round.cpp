// Tree rounds of the speculative loop on the tiny 16-token LlamaGen (tests/fixtures/llamagen,
// the parity tests' model), deterministic checks:
// - the ancestor mask and depth positions are right: every node's target distribution in a tree
//   round equals a causal forward of its path alone (teacher forcing), both CFG halves, across a
//   CFG interval;
// - compaction is right: rounds after a compacted tree round see the same distributions as a
//   causal forward of the committed tokens (what a chain-only run that accepted the same path
//   would see);
// - greedy verification of trees equals greedy vanilla token for token;
// - chains drafted by the tree drafter give the same images whatever the batch.
#include <gtest/gtest.h>

#include "spec_analysis.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>

#include "models/llamagen.h"
#include "speculative/rules/rules.h"
#include "speculative/speculative_decoder.h"
#include "tensor/cpu/cpu_backend.h"
#include "tree_drafter.h"

using namespace tessera;
using spec_test::Conditionals;
using spec_test::Seq;

namespace {

const std::string kTiny = std::string(TESSERA_FIXTURES) + "/llamagen/c2i_f32";

class TreeRound : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    LoadOptions lo;
    lo.load_decoder = false;
    lo.threads = 1;
    pipe_ = Pipeline::load(kTiny, lo).release();
  }
  static void TearDownTestSuite() {
    delete pipe_;
    pipe_ = nullptr;
  }

  static SamplingOptions sampling(float temperature) {
    SamplingOptions s;
    s.cfg_scale = 4.0f;
    s.cfg_interval = 6.0f;  // guidance stops inside the image: rows at other depths differ
    s.temperature = temperature;
    s.top_k = 0;
    s.top_p = 1.0f;
    return s;
  }

  // Runs `n` images of classes 0.. through the loop with `drafter` (exact rule).
  static std::vector<std::vector<int32_t>> run(speculative::Drafter& drafter,
                                               const SamplingOptions& s, int n, int batch,
                                               GenerateStats* stats = nullptr) {
    const ModelConfig tc = load_model_config(kTiny);
    set_cpu_threads(1);
    LlamaGen target(tc, cpu_backend());
    const auto rule = speculative::make_exact_rule();
    speculative::LoopSettings ls;
    ls.rule = rule.get();
    ls.drafter = &drafter;
    ls.draft_len = drafter.draft_depth(0);
    std::vector<Condition> cs;
    for (int i = 0; i < n; ++i) cs.push_back(Condition::label(i % 10));
    std::vector<std::vector<int32_t>> out;
    for (int first = 0; first < n; first += batch) {
      const int k = std::min(batch, n - first);
      std::vector<const Condition*> conds;
      for (int i = 0; i < k; ++i) conds.push_back(&cs[first + i]);
      std::vector<uint64_t> idx(k);
      std::iota(idx.begin(), idx.end(), static_cast<uint64_t>(first));
      GenerateStats st;
      auto g = speculative::generate_speculative(target, conds, idx, to_sampling_params(s), 11, ls,
                                                 {}, st);
      out.insert(out.end(), g.begin(), g.end());
      if (stats)
        stats->per_image.insert(stats->per_image.end(), st.per_image.begin(), st.per_image.end());
    }
    return out;
  }

  static inline Pipeline* pipe_ = nullptr;
};

// Every node's row against a causal forward of its path, and every later round (after compact)
// against a causal forward of the committed tokens.
TEST_F(TreeRound, NodesSeeTheirPathAndCompactionKeepsIt) {
  const SamplingOptions s = sampling(1.0f);
  // Children: the target's own top-2 at each node (deterministic, one-hot q), so rounds accept
  // paths through second children as well as first ones.
  std::vector<std::unique_ptr<Conditionals>> p;
  for (int c = 0; c < 10; ++c) p.push_back(std::make_unique<Conditionals>(*pipe_, c, s));
  test::TreeDrafter drafter({2, 2, 2}, test::Children::TopK,
                            [&](const ImageState& im, const std::vector<int32_t>& prefix) {
                              return (*p[im.condition.class_id])(prefix);
                            });
  int rows = 0, later_rounds = 0, moved = 0, max_nodes = 0;
  double worst = 0.0;
  drafter.on_round = [&](const ImageState& im, const std::vector<int32_t>& before,
                         const speculative::DraftTree& tree, const speculative::VerifyOutcome& out,
                         const speculative::TargetRound& target) {
    if (before.size() > 1) ++later_rounds;  // the KV came from earlier, compacted, rounds
    max_nodes = std::max(max_nodes, static_cast<int>(tree.size()));
    for (size_t a = 0; a < out.accepted.size(); ++a)
      moved += out.accepted[a] != static_cast<int>(a) ? 1 : 0;
    for (int r = 0; r <= static_cast<int>(tree.size()); ++r) {
      Seq path = before;  // the committed tokens, then the row's node and its ancestors
      const size_t at = path.size();
      for (int a = r - 1; a >= 0; a = tree[a].parent)
        path.insert(path.begin() + static_cast<std::ptrdiff_t>(at), tree[a].token);
      const std::vector<float>& want = (*p[im.condition.class_id])(path);
      const std::span<const float> got = target.dist(r);
      ASSERT_EQ(got.size(), want.size());
      for (size_t t = 0; t < want.size(); ++t)
        worst = std::max(worst, std::fabs(static_cast<double>(got[t]) - want[t]));
      ++rows;
    }
  };
  GenerateStats st;
  run(drafter, s, 8, 4, &st);
  std::printf("  %d rows compared (%d later rounds, %d accepted nodes moved), max |dp| %.3g\n",
              rows, later_rounds, moved, worst);
  EXPECT_LT(worst, 1e-4);  // float rounding (8.8e-6 measured); a wrong mask gives > 0.01
  EXPECT_GT(later_rounds, 10);
  EXPECT_GT(moved, 5);  // compaction moved accepted nodes that were not at their depth's row
  // Statistics by depth (at most 3 here), not by node count (up to 14).
  EXPECT_EQ(max_nodes, 14);
  for (const ImageStats& im : st.per_image) {
    EXPECT_LE(im.rounds_by_depth.size(), 4u);
    EXPECT_EQ(std::accumulate(im.rounds_by_depth.begin(), im.rounds_by_depth.end(), int64_t{0}),
              im.rounds);
    EXPECT_LE(im.accepted.size(), 3u);
  }
}

// Greedy: a node survives iff it is the argmax of its row, so tree rounds give greedy vanilla's
// tokens exactly (here with children that are not all argmaxes: the target's 2nd and 3rd tokens
// first, then its top-1).
TEST_F(TreeRound, GreedyTreesEqualGreedyVanilla) {
  const SamplingOptions s = sampling(0.0f);
  SamplingOptions untempered = s;
  untempered.temperature = 1.0f;
  std::vector<std::unique_ptr<Conditionals>> p;
  for (int c = 0; c < 10; ++c) p.push_back(std::make_unique<Conditionals>(*pipe_, c, untempered));
  test::TreeDrafter drafter({3, 3, 1}, test::Children::TopK,
                            [&](const ImageState& im, const std::vector<int32_t>& prefix) {
                              std::vector<float> q = (*p[im.condition.class_id])(prefix);
                              std::vector<float> sorted = q;
                              std::sort(sorted.begin(), sorted.end(), std::greater<>());
                              // The argmax just below the third: drafted last of the top-3.
                              *std::max_element(q.begin(), q.end()) =
                                  std::nextafter(sorted[2], -1.0f);
                              return q;
                            });
  GenerateStats st;
  const auto tree = run(drafter, s, 6, 3, &st);
  GenerateOptions o;
  o.sampling = s;
  o.seed = 11;
  o.batch = 6;
  o.spec.method = "vanilla";
  std::vector<Condition> cs;
  for (int i = 0; i < 6; ++i) cs.push_back(Condition::label(i % 10));
  EXPECT_EQ(tree, pipe_->generate(cs, o));
  int64_t accepted = 0;
  for (const ImageStats& im : st.per_image)
    for (int64_t a : im.accepted) accepted += a;
  EXPECT_GT(accepted, 20);  // third children accepted: the tree was used
}

// A one-child-per-node tree is a chain (the loop's causal path): the results do not depend on
// the batch.
TEST_F(TreeRound, ChainsFromTheTreeDrafterKeepTheCausalPath) {
  const SamplingOptions s = sampling(1.0f);
  std::vector<std::unique_ptr<Conditionals>> p;
  for (int c = 0; c < 10; ++c) p.push_back(std::make_unique<Conditionals>(*pipe_, c, s));
  test::TreeDrafter drafter({1, 1, 1, 1}, test::Children::Iid,
                            [&](const ImageState& im, const std::vector<int32_t>& prefix) {
                              return (*p[im.condition.class_id])(prefix);
                            });
  EXPECT_EQ(run(drafter, s, 4, 4), run(drafter, s, 4, 1));
}

}  // namespace
