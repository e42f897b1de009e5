// Medusa's heads (models/medusa_heads.h) and drafter (speculative/drafters/medusa_drafter.h):
// parity with the PyTorch reference (python/tessera_ref/medusa.py, fixtures written by
// python/make_medusa_fixtures.py) for the shared and the per-head LM head, refusal of heads made
// for another target, and, through the speculative loop, that every round's tree holds the top
// ranks of each depth's head applied to the target's hidden state at the row that predicted the
// root (both guidance halves), recomputed outside the loop; greedy decoding equals vanilla's.
#include <gtest/gtest.h>

#include "delegating_drafter.h"

#include "float_compare.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "decode/guidance.h"
#include "io/npy.h"
#include "models/llamagen.h"
#include "models/medusa_heads.h"
#include "speculative/drafters/medusa_drafter.h"
#include "speculative/rules/rules.h"
#include "speculative/speculative_decoder.h"
#include "speculative/tree_shape.h"
#include "target_features.h"
#include "tensor/cpu/cpu_backend.h"
#include "tessera/error.h"
#include "tessera/tessera.h"

using namespace tessera;

namespace {

const std::string kFix = std::string(TESSERA_FIXTURES) + "/";
const std::string kSpec = kFix + "spec/";

// Heads first..first+count-1's logits for the rows of `features` ([rows, dim]):
// [count * rows, vocab].
std::vector<float> head_logits(const MedusaHeads& h, const std::vector<float>& features, int count,
                               int first = 0) {
  const int rows = static_cast<int>(features.size()) / h.dim();
  MedusaHeads::Workspace ws = h.make_workspace(rows);
  Tensor in = ws.features.rows(0, rows);
  h.backend().upload_into(features.data(), in);
  const Tensor out = h.forward(ws, rows, first, count);
  std::vector<float> host(static_cast<size_t>(out.numel()));
  h.backend().download(out, host.data());
  return host;
}

TEST(MedusaHeads, MatchTheReference) {
  set_cpu_threads(1);
  LlamaGen target(load_model_config(kFix + "llamagen/c2i_f32"), cpu_backend());
  const std::string g = kSpec + "tiny_medusa_golden/";
  const std::vector<int32_t> tokens = read_npy(g + "tokens.npy").as_i32();
  const int n = static_cast<int>(tokens.size());
  // The hidden states the heads read: the target's post-norm rows (observed ~1e-6).
  const std::vector<float> f = target_features(target, Condition::label(3), tokens, n);
  EXPECT_LT(max_abs_diff(f, read_npy(g + "target_features.npy").as_f32()), 1e-4);
  for (const auto& [dir, golden, heads] : {std::tuple{"tiny_medusa", "logits.npy", 3},
                                           {"tiny_medusa_per_head", "logits_per_head.npy", 2}}) {
    MedusaHeads h(load_model_config(kSpec + dir), target);
    ASSERT_EQ(h.num_heads(), heads);
    // Logits of std 4.6 (shared head) and 1.2 (per-head): observed ~1e-5.
    EXPECT_LT(max_abs_diff(head_logits(h, f, heads), read_npy(g + golden).as_f32()), 5e-4) << dir;
  }
}

// Hawk's heads (Chen et al., 2025, App. C): Medusa's horizontal ones and vertical ones of the
// same form, loaded from "architecture": "hawk", against the PyTorch reference's logits.
TEST(MedusaHeads, HawkHeadsMatchTheReference) {
  set_cpu_threads(1);
  LlamaGen target(load_model_config(kFix + "llamagen/c2i_f32"), cpu_backend());
  const std::string g = kSpec + "tiny_medusa_golden/";
  const std::vector<int32_t> tokens = read_npy(g + "tokens.npy").as_i32();
  const std::vector<float> f =
      target_features(target, Condition::label(3), tokens, static_cast<int>(tokens.size()));
  const ModelConfig mc = load_model_config(kSpec + "tiny_hawk");
  ASSERT_TRUE(mc.is_hawk());
  MedusaHeads h(mc, target);
  ASSERT_EQ(h.num_heads(), 2);
  ASSERT_EQ(h.vertical_heads(), 2);
  EXPECT_EQ(h.config().row_width, target.info().row_width);
  EXPECT_LT(max_abs_diff(head_logits(h, f, 2), read_npy(g + "hawk_horizontal_logits.npy").as_f32()),
            5e-4);
  EXPECT_LT(
      max_abs_diff(head_logits(h, f, 2, 2), read_npy(g + "hawk_vertical_logits.npy").as_f32()),
      5e-4);
  // The second vertical head alone: its rows, not the first's.
  const std::vector<float> both = read_npy(g + "hawk_vertical_logits.npy").as_f32();
  const std::vector<float> second(both.begin() + static_cast<std::ptrdiff_t>(both.size() / 2),
                                  both.end());
  EXPECT_LT(max_abs_diff(head_logits(h, f, 1, 3), second), 5e-4);
}

// Vertical heads predict a row below: heads trained for another row width are refused.
TEST(MedusaHeads, RefuseHawkHeadsForAnotherRowWidth) {
  const ModelConfig micro = load_model_config(kSpec + "micro_target");
  const LlamaGen target(micro, cpu_backend());
  EXPECT_NO_THROW(MedusaHeads(load_model_config(kSpec + "micro_hawk"), target));
  ModelConfig hawk = load_model_config(kSpec + "micro_hawk");
  hawk.medusa.row_width = micro.gpt.grid + 1;
  try {
    MedusaHeads h(hawk, target);
    FAIL() << "loaded Hawk heads for another row width";
  } catch (const ParameterError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("micro_hawk"), std::string::npos) << m;
    EXPECT_NE(m.find("row width"), std::string::npos) << m;
    EXPECT_NE(m.find("Hawk"), std::string::npos) << m;
  }
}

TEST(MedusaHeads, RefuseHeadsForAnotherTarget) {
  LlamaGen target(load_model_config(kFix + "llamagen/c2i_f32"), cpu_backend());
  try {
    MedusaHeads h(load_model_config(kSpec + "micro_medusa"), target);
    FAIL() << "loaded heads of width 32 for a target of width 64";
  } catch (const ParameterError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("micro_medusa"), std::string::npos) << m;
    EXPECT_NE(m.find("width 32 is not the target's 64"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

// Records every round's committed tokens and tree.
class RecordingMedusa : public test::DelegatingDrafter {
 public:
  explicit RecordingMedusa(speculative::MedusaDrafter& inner) : DelegatingDrafter(inner) {}
  void propose(std::span<ImageState* const> active, std::span<const int> max_depth,
               std::vector<speculative::DraftTree>& trees) override {
    inner_.propose(active, max_depth, trees);
    for (size_t j = 0; j < active.size(); ++j)
      if (!trees[j].empty())
        records.push_back({active[j]->id, max_depth[j], active[j]->tokens, trees[j]});
  }

  struct Record {
    int image, max_depth;
    std::vector<int32_t> committed;
    speculative::DraftTree tree;
  };
  std::vector<Record> records;
};

// Through SpeculativeDecoder: eight images in one batch, CFG, top-k and top-p, a Medusa tree.
// Every round's tree must be the shape cut at the round's depth and the heads' K, each node of
// depth d and rank r holding the r-th most likely token of head d - 1 applied to the target's
// hidden states (both halves) at the row that predicted the root, i.e. the last of the
// teacher-forced rows over the committed tokens, ranked by the guided distribution (a rank past the
// tokens with mass dropped with its subtree). accept_all: UniformRSD with ω = 1e6 accepts every
// draft (no filters), so the next round reads the row of the round's last accepted node rather than
// the root's.
void expect_trees_read_the_roots_row(const std::string& tree, bool accept_all) {
  set_cpu_threads(1);
  LlamaGen target(load_model_config(kFix + "llamagen/c2i_f32"), cpu_backend());
  MedusaHeads heads(load_model_config(kSpec + "tiny_medusa"), target);
  SamplingParams p;
  p.cfg_scale = 2.0f;
  p.top_k = accept_all ? 0 : 50;
  p.top_p = accept_all ? 1.0f : 0.95f;
  const speculative::TreeShape shape = speculative::load_tree_shape(tree);
  std::vector<Condition> conds;
  for (int i = 0; i < 8; ++i) conds.push_back(Condition::label(i));
  speculative::MedusaDrafter inner(heads, p, shape, static_cast<int>(conds.size()));
  RecordingMedusa drafter(inner);
  const auto rule =
      accept_all ? speculative::make_uniform_rsd_rule(1e6f) : speculative::make_exact_rule();
  speculative::LoopSettings ls;
  ls.rule = rule.get();
  ls.drafter = &drafter;
  ls.draft_len = shape.max_depth();
  std::vector<const Condition*> cp;
  for (const Condition& c : conds) cp.push_back(&c);
  std::vector<uint64_t> idx(conds.size());
  std::iota(idx.begin(), idx.end(), uint64_t{0});
  GenerateStats st;
  speculative::generate_speculative(target, cp, idx, p, 5, ls, {}, st);
  ASSERT_GT(drafter.records.size(), 15u);
  const int V = target.info().vocab_size, D = target.info().dim;
  const int K = std::min(heads.num_heads(), shape.max_depth());
  int checked = 0, after_accepted = 0, mismatches = 0;
  std::map<int, size_t> previous;  // committed tokens of each image's previous round
  for (const auto& r : drafter.records) {
    const int n = static_cast<int>(r.committed.size());
    if (previous.count(r.image) && n > static_cast<int>(previous[r.image]) + 1) ++after_accepted;
    previous[r.image] = r.committed.size();
    const std::vector<float> fc = target_features(target, conds[r.image], r.committed, n);
    const std::vector<float> fu = target_features(target, conds[r.image], r.committed, n, true);
    std::vector<float> both(fc.end() - D, fc.end());
    both.insert(both.end(), fu.end() - D, fu.end());
    const std::vector<float> logits = head_logits(heads, both, K);  // rows: head k: 2k, 2k + 1
    // Each depth's tokens with mass, most likely first.
    std::vector<std::vector<int>> ranked(K);
    for (int d = 1; d <= K; ++d) {
      std::vector<float> dist(V);
      guided_distribution(logits.data() + static_cast<size_t>(2 * (d - 1)) * V,
                          logits.data() + static_cast<size_t>(2 * (d - 1) + 1) * V, V, p, n - 1 + d,
                          dist);
      for (int y = 0; y < V; ++y)
        if (dist[y] > 0.0f) ranked[d - 1].push_back(y);
      std::stable_sort(ranked[d - 1].begin(), ranked[d - 1].end(),
                       [&](int a, int b) { return dist[a] > dist[b]; });
    }
    // The expected tree: the shape's nodes in order, down to the round's depth.
    speculative::DraftTree want;
    std::vector<int> node_of(shape.nodes(), -1);
    for (int u = 0; u < shape.nodes(); ++u) {
      const int d = shape.depth[u], pu = shape.parent[u];
      if (d > std::min(r.max_depth, K) || (pu >= 0 && node_of[pu] < 0) ||
          shape.rank[u] >= static_cast<int>(ranked[d - 1].size()))
        continue;
      speculative::DraftNode node;
      node.parent = pu < 0 ? -1 : node_of[pu];
      node.depth = d;
      node.token = ranked[d - 1][shape.rank[u]];
      node_of[u] = static_cast<int>(want.size());
      want.push_back(node);
    }
    bool same = want.size() == r.tree.size();
    for (size_t i = 0; same && i < want.size(); ++i)
      same = want[i].token == r.tree[i].token && want[i].parent == r.tree[i].parent &&
             want[i].depth == r.tree[i].depth && r.tree[i].q.empty();
    mismatches += !same;
    checked += static_cast<int>(r.tree.size());
  }
  std::printf("  %s%s: %d nodes of %zu rounds checked (%d rounds after accepted drafts)\n",
              tree.c_str(), accept_all ? " accept all" : "", checked, drafter.records.size(),
              after_accepted);
  EXPECT_EQ(mismatches, 0);
  if (accept_all) {
    EXPECT_GT(after_accepted, 10);
  }
}

TEST(MedusaDrafter, TreesReadTheRootsRow) {
  expect_trees_read_the_roots_row("kary:3,2,2", false);
  expect_trees_read_the_roots_row("mc_sim_7b_63", false);
}

TEST(MedusaDrafter, TreesReadTheLastAcceptedRow) {
  expect_trees_read_the_roots_row("kary:2,2,2", true);
}

// --draft-len and the heads cut the tree: depth min(L, K, the tree's), nodes down to it.
TEST(MedusaDrafter, CutsTheTreeAtTheHeadsAndTheDraftLength) {
  LlamaGen target(load_model_config(kFix + "llamagen/c2i_f32"), cpu_backend());
  MedusaHeads heads(load_model_config(kSpec + "tiny_medusa"), target);  // 3 heads
  speculative::MedusaDrafter d(heads, SamplingParams{},
                               speculative::load_tree_shape("medusa_2_7b_63"), 1);  // depth 4
  EXPECT_EQ(d.draft_depth(5), 3);
  EXPECT_EQ(d.max_nodes(5), 10 + 23 + 23);
  EXPECT_EQ(d.draft_depth(2), 2);
  EXPECT_EQ(d.max_nodes(2), 10 + 23);
  EXPECT_EQ(d.draft_depth(1), 1);
  EXPECT_EQ(d.max_nodes(1), 10);
}

// Greedy decoding (temperature 0) with exact verification commits the target's argmax tokens:
// the images equal vanilla greedy's, token for token, with CFG, for the default tree (a chain) and
// mc_sim_7b_63,
// on the tiny c2i target (256 tokens: drafts mostly rejected) and the micro one (4 tokens: many
// accepted).
void expect_greedy_equals_vanilla(const std::string& target, const std::string& heads, int classes,
                                  bool expect_accepted, const std::string& method = "medusa") {
  LoadOptions lo;
  lo.load_decoder = false;
  lo.threads = 1;
  auto pipe = Pipeline::load(kFix + target, lo);
  std::vector<Condition> conds;
  for (int i = 0; i < classes; ++i) conds.push_back(Condition::label(i));
  GenerateOptions o;
  o.sampling.temperature = 0.0f;
  o.sampling.cfg_scale = 3.0f;
  o.sampling.top_k = 0;
  o.sampling.top_p = 1.0f;
  o.seed = 7;
  o.spec.method = "vanilla";
  const auto vanilla = pipe->generate(conds, o);
  o.spec.method = method;
  o.spec.draft_model = kSpec + heads;
  for (const std::string tree : {"", method == "medusa" ? "mc_sim_7b_63" : "kary:3,2"}) {
    o.spec.tree = tree;
    GenerateStats st;
    EXPECT_EQ(pipe->generate(conds, o, &st), vanilla) << target << " " << tree;
    int64_t accepted = 0;
    for (const ImageStats& im : st.per_image)
      for (int64_t a : im.accepted) accepted += a;
    if (expect_accepted) {
      EXPECT_GT(accepted, 0) << target << " " << tree;
    }
  }
}

TEST(MedusaDrafter, GreedyEqualsVanillaGreedy) {
  expect_greedy_equals_vanilla("llamagen/c2i_f32", "tiny_medusa", 10, false);
  expect_greedy_equals_vanilla("spec/micro_target", "micro_medusa", 3, true);
}

// Hawk's slots propose their argmax when decoding greedily (HawkDrafter): the output is vanilla's.
// (On the micro target's 2x2 grid the vertical heads alone have nothing to draft for x1, the first
// root's next token, and their chains end there.)
TEST(HawkDrafter, GreedyEqualsVanillaGreedy) {
  for (const std::string method : {"hawk", "hawk-vertical"}) {
    expect_greedy_equals_vanilla("llamagen/c2i_f32", "tiny_hawk", 10, false, method);
    expect_greedy_equals_vanilla("spec/micro_target", "micro_hawk", 3, method == "hawk", method);
  }
}

// Hawk's state is per image (its speculation cache, the root's features of both CFG halves), so
// an image's tokens do not depend on what it is batched with or on the KV compaction of the
// others' rounds: five images with CFG, top-k and top-p at batch 1, 2 and 5, with a fixed draft
// length and under --draft-len auto's node budget, sampled and top candidates.
TEST(HawkDrafter, ResultsDoNotDependOnTheBatch) {
  LoadOptions lo;
  lo.load_decoder = false;
  auto pipe = Pipeline::load(kFix + "llamagen/c2i_f32", lo);
  std::vector<Condition> conds;
  for (int i = 0; i < 5; ++i) conds.push_back(Condition::label(i));
  for (const std::string candidates : {"sampled", "top"})
    for (const int len : {3, kDraftLenAuto}) {
      SCOPED_TRACE(candidates + " draft_len " + std::to_string(len));
      GenerateOptions o;
      o.sampling.cfg_scale = 2.0f;
      o.sampling.top_k = 50;
      o.sampling.top_p = 0.95f;
      o.seed = 11;
      o.spec.method = "hawk";
      o.spec.draft_model = kSpec + "tiny_hawk";
      o.spec.draft_len = len;
      o.spec.auto_costs = {
          {1.0, 1.02, 1.05, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 2.0, 2.1, 2.2, 2.3, 2.4},
          0.0};
      o.spec.params["hawk.candidates"] = candidates;
      o.batch = 1;
      GenerateStats st;
      const auto one = pipe->generate(conds, o, &st);
      // Rounds drafted trees (the rejected nodes' KV rows compacted away), and the sampled
      // candidates of these random heads were accepted (their top tokens too rarely to assert).
      EXPECT_GT(st.mean_draft_nodes(), 1.0);
      if (candidates == "sampled") {
        EXPECT_GT(st.mean_accepted_length(), 1.0);
      }
      for (int b : {2, 5}) {
        o.batch = b;
        EXPECT_EQ(pipe->generate(conds, o), one) << "batch " << b;
      }
    }
}

}  // namespace
