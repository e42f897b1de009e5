// Static-tree drafting with a draft model (ModelDrafter with a TreeShape): a chain shape drafts
// exactly the chain drafter's tokens and q, and every node of a tree is the draft model's choice at
// its own path (its parent's distribution computed afresh on the path as a chain), across rounds
// whose accepted paths the draft cache must keep (Session::compact).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "decode/guidance.h"
#include "decode/session.h"
#include "models/llamagen.h"
#include "speculative/drafters/model_drafter.h"
#include "speculative/rules/acceptance_rule.h"
#include "speculative/tree_shape.h"
#include "speculative/tree_spec.h"
#include "tensor/backend.h"

using namespace tessera;
using namespace tessera::speculative;

namespace {

const std::string kFixtures = TESSERA_FIXTURES;

LlamaGen& draft_model() {
  static ModelConfig config = load_model_config(kFixtures + "/spec/tiny_draft");
  static LlamaGen model{config, cpu_backend()};
  return model;
}

SamplingParams sampling(bool greedy, float cfg = 3.0f, int top_k = 40) {
  SamplingOptions s;
  s.cfg_scale = cfg;
  s.temperature = greedy ? 0.0f : 1.5f;
  s.top_k = top_k;
  return to_sampling_params(s);
}

// Images 0..n-1 of labels 1, 2, ...; their first token as if drawn by the target's prefill;
// sampled with `p` (the drafter's settings, as a generation's images are).
std::vector<ImageState> images(int n, const SamplingParams& p) {
  std::vector<ImageState> v(n);
  for (int i = 0; i < n; ++i) {
    v[i].id = i;
    v[i].sampling = p;
    v[i].condition = Condition::label(1 + i);
    v[i].rng = CounterRng(7, i);
    v[i].tokens = {static_cast<int32_t>(17 * i + 5)};
  }
  return v;
}

// The accepted path this test's fake verification picks in a round: at depth d the child of rank
// (round + d + image) % children, for up to `accept` depths; then a bonus token.
VerifyOutcome fake_verify(const DraftTree& tree, int64_t round, int image, int accept, int vocab) {
  VerifyOutcome out;
  int node = -1;
  for (int d = 1; d <= accept; ++d) {
    std::vector<int> kids;
    for (int c = 0; c < static_cast<int>(tree.size()); ++c)
      if (tree[c].parent == node) kids.push_back(c);
    if (kids.empty()) break;
    node = kids[(round + d + image) % kids.size()];
    out.accepted.push_back(node);
  }
  out.next_token = static_cast<int32_t>((round * 37 + image * 11 + 3) % vocab);
  return out;
}

void commit(ImageState& im, const DraftTree& tree, const VerifyOutcome& out) {
  for (int a : out.accepted) im.tokens.push_back(tree[a].token);
  im.tokens.push_back(out.next_token);
  im.round++;
}

// The draft model's guided distribution for token index `t` after `tokens` (the committed ones
// and a path), computed afresh: prefix, then every token in one causal forward.
std::vector<float> fresh_distribution(const Condition& cond, const std::vector<int32_t>& tokens,
                                      const SamplingParams& params) {
  const AutoregressiveModel& model = draft_model();
  const bool cfg = params.uses_cfg();
  SessionOptions o;
  o.n_slots = 2;
  o.extra_capacity = 8;
  o.max_new = 32;
  Session s(model, o);
  std::vector<int32_t> slots = {s.acquire_slot()};
  if (cfg) slots.push_back(s.acquire_slot());
  const Condition* c = &cond;
  s.prefill(std::span<const Condition* const>(&c, 1), cfg, slots);
  const int L = static_cast<int>(tokens.size()), n_tokens = model.info().n_tokens;
  StepBatch b;
  b.slots = slots;
  b.n_new = L;
  for (size_t r = 0; r < slots.size(); ++r)
    for (int j = 0; j < L; ++j) {
      b.tokens.push_back(tokens[j]);
      b.positions.push_back(model.token_position(std::min(j, n_tokens - 1)));
    }
  b.output_at = {L - 1};
  std::vector<float> logits;
  s.read(s.forward(b).logits, logits);
  const int V = model.info().vocab_size;
  std::vector<float> p(V);
  guided_distribution(logits.data(), cfg ? logits.data() + V : nullptr, V, params, L, p);
  return p;
}

void expect_near(const std::vector<float>& a, const std::vector<float>& b,
                 const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  float worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  EXPECT_LT(worst, 2e-5f) << what;
}

// Runs `rounds` rounds of `drafter` over 3 images with depth caps that differ per image and
// round; returns every round's trees.
std::vector<std::vector<DraftTree>> run_rounds(ModelDrafter& drafter, int rounds, int cap,
                                               std::vector<ImageState>& ims) {
  const int V = draft_model().info().vocab_size, N = draft_model().info().n_tokens;
  std::vector<ImageState*> ptrs;
  for (auto& im : ims) ptrs.push_back(&im);
  drafter.start(ptrs, {});
  std::vector<std::vector<DraftTree>> all;
  for (int r = 0; r < rounds; ++r) {
    std::vector<ImageState*> active;
    std::vector<int> depth;
    for (auto& im : ims) {
      const int left = N - static_cast<int>(im.tokens.size());
      if (left <= 0) continue;
      active.push_back(&im);
      depth.push_back(std::min({left - 1, cap, 1 + (r + im.id) % cap}));
    }
    if (active.empty()) break;
    std::vector<DraftTree> trees;
    drafter.propose(active, depth, trees);
    for (size_t j = 0; j < active.size(); ++j) {
      ImageState& im = *active[j];
      const VerifyOutcome out = fake_verify(trees[j], im.round, im.id, 1 + (r + im.id) % 3, V);
      drafter.finish_round(im, trees[j], out, TargetRound{});
      commit(im, trees[j], out);
    }
    all.push_back(std::move(trees));
  }
  return all;
}

TEST(TreeDrafter, ChainShapeDraftsTheChainBitForBit) {
  for (bool greedy : {false, true})
    for (float cfg : {3.0f, 1.0f}) {
      SCOPED_TRACE(std::string(greedy ? "greedy" : "sampling") + (cfg > 1 ? " cfg" : ""));
      const SamplingParams p = sampling(greedy, cfg);
      ModelDrafter chain(draft_model(), p, 4, 3);
      ModelDrafter shaped(draft_model(), p, 4, 3, load_tree_shape("chain:4"));
      auto a_ims = images(3, p), b_ims = images(3, p);
      const auto a = run_rounds(chain, 8, 4, a_ims);
      const auto b = run_rounds(shaped, 8, 4, b_ims);
      ASSERT_EQ(a.size(), b.size());
      for (size_t r = 0; r < a.size(); ++r)
        for (size_t j = 0; j < a[r].size(); ++j) {
          ASSERT_EQ(a[r][j].size(), b[r][j].size()) << "round " << r << " image " << j;
          for (size_t k = 0; k < a[r][j].size(); ++k) {
            EXPECT_EQ(a[r][j][k].token, b[r][j][k].token);
            EXPECT_EQ(a[r][j][k].parent, b[r][j][k].parent);
            EXPECT_EQ(a[r][j][k].depth, b[r][j][k].depth);
            EXPECT_TRUE(a[r][j][k].q == b[r][j][k].q) << "round " << r << " node " << k;
          }
        }
      for (int i = 0; i < 3; ++i) EXPECT_EQ(a_ims[i].tokens, b_ims[i].tokens);
      EXPECT_EQ(chain.batched_forwards(), shaped.batched_forwards());
    }
}

// Every node against the draft model run afresh on its path: its parent's distribution P, its q
// (P without its elder siblings, renormalised, when sampling; P or none when greedy), its token
// (the draw from q with its uniform, or the rank-th most likely token) and distinct siblings.
void check_tree_against_fresh_chains(const TreeShape& shape, bool greedy) {
  // No top-k: a fresh forward differs from the batched, masked one by rounding, which could move
  // a token across a top-k threshold and change the distribution by that token's mass.
  const SamplingParams p = sampling(greedy, 3.0f, 0);
  SamplingParams ranking = p;
  ranking.temperature = 1.0f;
  const int V = draft_model().info().vocab_size, N = draft_model().info().n_tokens;
  ModelDrafter drafter(draft_model(), p, shape.max_depth(), 3, shape);
  auto ims = images(3, p);
  std::vector<ImageState*> ptrs;
  for (auto& im : ims) ptrs.push_back(&im);
  drafter.start(ptrs, {});
  int checked = 0, later_siblings = 0, deep = 0;
  for (int r = 0; r < 6; ++r) {
    std::vector<ImageState*> active;
    std::vector<int> depth;
    for (auto& im : ims) {
      const int left = N - static_cast<int>(im.tokens.size());
      if (left <= 1) continue;
      active.push_back(&im);
      depth.push_back(std::min(left - 1, shape.max_depth() - (im.id == 2 ? 1 : 0)));
    }
    if (active.empty()) break;
    std::vector<DraftTree> trees;
    drafter.propose(active, depth, trees);
    for (size_t j = 0; j < active.size(); ++j) {
      ImageState& im = *active[j];
      const DraftTree& tree = trees[j];
      SCOPED_TRACE("round " + std::to_string(r) + " image " + std::to_string(im.id));
      // The tree is the shape cut at the image's depth (nothing dropped without top-k).
      int expected = 0;
      for (int d : shape.depth) expected += d <= depth[j];
      EXPECT_EQ(static_cast<int>(tree.size()), expected);
      std::map<int, std::vector<int>> kids;  // parent -> children in order
      for (int c = 0; c < static_cast<int>(tree.size()); ++c) kids[tree[c].parent].push_back(c);
      for (const auto& [parent, children] : kids) {
        std::vector<int32_t> path = im.tokens;
        for (int a = parent; a >= 0; a = tree[a].parent)
          path.insert(path.begin() + im.tokens.size(), tree[a].token);
        const int t = static_cast<int>(path.size());  // token index of the children
        const std::vector<float> P = fresh_distribution(im.condition, path, p);
        std::vector<float> work = greedy ? fresh_distribution(im.condition, path, ranking) : P;
        std::vector<int32_t> seen;
        for (size_t k = 0; k < children.size(); ++k) {
          const DraftNode& n = tree[children[k]];
          EXPECT_EQ(n.depth, parent < 0 ? 1 : tree[parent].depth + 1);
          if (k > 0) {
            work[tree[children[k - 1]].token] = 0.0f;
            ASSERT_TRUE(normalise(work));
          }
          const std::vector<float>& q = k == 0 ? P : work;
          if (greedy) {
            EXPECT_EQ(n.token, argmax(q)) << "rank " << k;
            if (k == 0) expect_near(n.q, P, "q of rank 0");
            if (k > 0) {
              EXPECT_TRUE(n.q.empty()) << "greedy later siblings are one-hot";
            }
          } else {
            expect_near(n.q, q, "q of rank " + std::to_string(k));
            // The draw with this node's uniform from the fresh q.
            int level = 0;
            for (int c = 0; c < children[k]; ++c) level += tree[c].depth == n.depth;
            const double u = im.rng.uniform(static_cast<uint32_t>(t),
                                            stream_id(Stream::Draft, im.round, level & 0xff));
            EXPECT_EQ(n.token, sample_index(q, u)) << "rank " << k;
            EXPECT_GT(n.q[n.token], 0.0f);
          }
          EXPECT_EQ(std::count(seen.begin(), seen.end(), n.token), 0) << "repeated sibling";
          seen.push_back(n.token);
          ++checked;
          later_siblings += k > 0;
          deep += n.depth >= 3;
        }
      }
      const VerifyOutcome out = fake_verify(tree, im.round, im.id, 1 + (r + im.id) % 4, V);
      drafter.finish_round(im, tree, out, TargetRound{});
      commit(im, tree, out);
    }
  }
  EXPECT_GT(checked, 40);
  EXPECT_GT(later_siblings, 10);
  EXPECT_GT(deep, 5);
}

TEST(TreeDrafter, SampledTreeNodesAreTheDraftModelsAtTheirPaths) {
  check_tree_against_fresh_chains(load_tree_shape("kary:3,2,2"), false);
}

TEST(TreeDrafter, GreedyTreeNodesAreTheTopRanksAtTheirPaths) {
  check_tree_against_fresh_chains(load_tree_shape("kary:3,2,2"), true);
}

TEST(TreeDrafter, EagleTreeAcrossRounds) {
  // mc_sim_7b_63: depth 5 on a 16-token image, uneven branching; a later round's root
  // distribution is only right when the cache kept the accepted path.
  check_tree_against_fresh_chains(load_tree_shape("mc_sim_7b_63"), false);
}

TEST(TreeDrafter, LanternDefaultTreeGreedy) {
  check_tree_against_fresh_chains(load_tree_shape("naive_extend_57"), true);
}

// Rejects every draft and records the q each node was tested with.
class RejectAll : public AcceptanceRule {
 public:
  std::string name() const override { return "reject-all"; }
  double accept_probability(const NodeView& n) const override {
    seen.emplace_back(n.token, std::vector<float>(n.q.begin(), n.q.end()));
    return 0.0;
  }
  void residual(const NodeView& n, std::span<float> out) const override { exact_residual(n, out); }
  mutable std::vector<std::pair<int, std::vector<float>>> seen;
};

// The first round's tree of one image, drafted to `depth`.
DraftTree first_tree(ModelDrafter& drafter, ImageState& image, int depth) {
  std::vector<ImageState*> ptrs = {&image};
  drafter.start(ptrs, {});
  std::vector<DraftTree> trees;
  const std::vector<int> depths = {depth};
  drafter.propose(ptrs, depths, trees);
  return trees.at(0);
}

TEST(TreeDrafter, StoredQIsTheQTheVerifierWalksSiblingsWith) {
  // verify_draft tests the root's children in order and, after each rejection, removes the
  // rejected token from the q it used: each child must be tested with exactly its stored q.
  ModelDrafter drafter(draft_model(), sampling(false), 2, 1, load_tree_shape("kary:4,2"));
  auto ims = images(1, sampling(false));
  const DraftTree tree = first_tree(drafter, ims[0], 2);
  ASSERT_EQ(tree.size(), 4u + 8u);
  const int V = draft_model().info().vocab_size;
  const std::vector<float> uniform(V, 1.0f / V);
  RejectAll rule;
  VerifySettings vs;
  vs.rule = &rule;
  vs.draft_len = 2;
  ImageStats stats;
  const VerifyOutcome out = verify_draft(
      vs, tree, [&](int) { return std::span<const float>(uniform); }, ims[0].rng, 0, 1, stats);
  EXPECT_TRUE(out.accepted.empty());
  ASSERT_EQ(rule.seen.size(), 4u);
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(rule.seen[c].first, tree[c].token);
    EXPECT_TRUE(rule.seen[c].second == tree[c].q) << "child " << c;
  }
}

TEST(TreeDrafter, SiblingsStopWhenNoTokenIsLeft) {
  // top-k 2: the third child of a node has no token left; it and its subtree are left out.
  SamplingOptions s;
  s.cfg_scale = 3.0f;
  s.temperature = 1.0f;
  s.top_k = 2;
  ModelDrafter drafter(draft_model(), to_sampling_params(s), 2, 1, load_tree_shape("kary:3,2"));
  auto ims = images(1, to_sampling_params(s));
  const DraftTree tree = first_tree(drafter, ims[0], 2);
  ASSERT_EQ(tree.size(), 2u + 4u);  // 2 children of the root, 2 children each
  EXPECT_EQ(tree[0].parent, -1);
  EXPECT_EQ(tree[1].parent, -1);
  EXPECT_NE(tree[0].token, tree[1].token);
  for (int c = 2; c < 6; ++c) EXPECT_EQ(tree[c].parent, (c - 2) / 2);
}

}  // namespace

// EAGLE-2's selection (`topK_genrate`, notes relaxed_sd.md 4.3) written plainly, each node's
// distribution computed afresh on its path: the root's top-k; `depth` times the top-k children of
// each frontier node scored by cumulative log q, the best top-k of them the next frontier; the
// best `total` of all candidates, by depth, parent and rank. Ties: lower token, earlier candidate.
struct RefNode {
  int32_t token;
  int parent, depth, rank;
  double score;
};
// total: the nodes kept (the tree's total, or a node budget's smaller count).
DraftTree reference_dynamic_tree(const ImageState& im, const DynamicTree& dt, int max_depth,
                                 const SamplingParams& p, int total) {
  const int V = draft_model().info().vocab_size;
  std::vector<RefNode> all;
  auto path_of = [&](int c) {
    std::vector<int32_t> path = im.tokens;
    for (int a = c; a >= 0; a = all[a].parent)
      path.insert(path.begin() + im.tokens.size(), all[a].token);
    return path;
  };
  auto children = [&](int parent, int depth) {
    const std::vector<float> q = fresh_distribution(im.condition, path_of(parent), p);
    std::vector<int> tokens(V);
    for (int v = 0; v < V; ++v) tokens[v] = v;
    std::stable_sort(tokens.begin(), tokens.end(), [&](int a, int b) { return q[a] > q[b]; });
    std::vector<int> made;
    for (int r = 0; r < dt.top_k && r < V && q[tokens[r]] > 0.0f; ++r) {
      const double base = parent < 0 ? 0.0 : all[parent].score;
      all.push_back({tokens[r], parent, depth, r, base + std::log(double{q[tokens[r]]})});
      made.push_back(static_cast<int>(all.size()) - 1);
    }
    return made;
  };
  auto by_score = [&](std::vector<int> v) {
    std::stable_sort(v.begin(), v.end(), [&](int a, int b) { return all[a].score > all[b].score; });
    return v;
  };
  std::vector<int> frontier = children(-1, 1);
  const int depth = std::min(max_depth, dt.max_depth());
  for (int d = 1; d < depth; ++d) {
    std::vector<int> made;
    for (int f : frontier)
      for (int c : children(f, d + 1)) made.push_back(c);
    frontier = by_score(made);
    if (static_cast<int>(frontier.size()) > dt.top_k) frontier.resize(dt.top_k);
  }
  std::vector<int> all_ids(all.size());
  for (size_t i = 0; i < all.size(); ++i) all_ids[i] = static_cast<int>(i);
  std::vector<int> kept = by_score(all_ids);
  if (static_cast<int>(kept.size()) > total) kept.resize(total);
  DraftTree tree;
  std::map<int, int> index;  // candidate -> tree index
  for (int d = 1; d <= depth; ++d) {
    std::vector<std::pair<std::pair<int, int>, int>> level;  // ((parent index, rank), candidate)
    for (int c : kept)
      if (all[c].depth == d)
        level.push_back({{all[c].parent < 0 ? -1 : index.at(all[c].parent), all[c].rank}, c});
    std::sort(level.begin(), level.end());
    for (const auto& [key, c] : level) {
      DraftNode n;
      n.token = all[c].token;
      n.parent = key.first;
      n.depth = d;
      n.value = std::exp(all[c].score);
      index[c] = static_cast<int>(tree.size());
      tree.push_back(n);
    }
  }
  return tree;
}

// ModelDrafter's dynamic tree equals the reference's, node for node, over rounds whose accepted
// paths the draft cache must keep; every node one-hot (no q).
// budget: --draft-len auto's node budget (set_node_budget), or none: the tree's total.
void check_dynamic_against_reference(bool greedy, bool budget = false) {
  const SamplingParams p = sampling(greedy, 3.0f, 0);  // no top-k: see above
  SamplingParams scoring = p;
  scoring.temperature = greedy ? 1.0f : p.temperature;
  const DynamicTree dt = parse_dynamic_tree("dynamic:3,3,10");
  const int V = draft_model().info().vocab_size, N = draft_model().info().n_tokens;
  ModelDrafter drafter(draft_model(), p, dt.max_depth(), 3, dt);
  // The budget keeps 1 + (image + round) % 6 nodes, and sees the candidates' values best first.
  std::map<int, std::vector<double>> offered;  // image id -> the values of its last call
  if (budget)
    drafter.set_node_budget([&](const ImageState& im, std::span<const double> values) {
      offered[im.id].assign(values.begin(), values.end());
      return 1 + (im.id + static_cast<int>(im.round)) % 6;
    });
  int trimmed = 0;
  auto ims = images(3, p);
  std::vector<ImageState*> ptrs;
  for (auto& im : ims) ptrs.push_back(&im);
  drafter.start(ptrs, {});
  int checked = 0, reshaped = 0;
  std::vector<int> first_parents;
  for (int r = 0; r < 6; ++r) {
    std::vector<ImageState*> active;
    std::vector<int> depth;
    for (auto& im : ims) {
      const int left = N - static_cast<int>(im.tokens.size());
      if (left <= 1) continue;
      active.push_back(&im);
      depth.push_back(std::min(left - 1, dt.max_depth() - (im.id == 2 ? 1 : 0)));
    }
    if (active.empty()) break;
    std::vector<DraftTree> trees;
    drafter.propose(active, depth, trees);
    for (size_t j = 0; j < active.size(); ++j) {
      ImageState& im = *active[j];
      SCOPED_TRACE("round " + std::to_string(r) + " image " + std::to_string(im.id));
      const int total =
          budget ? std::min(dt.total, 1 + (im.id + static_cast<int>(im.round)) % 6) : dt.total;
      const DraftTree want = reference_dynamic_tree(im, dt, depth[j], scoring, total);
      const DraftTree& got = trees[j];
      ASSERT_EQ(got.size(), want.size());
      if (budget) {
        // The offer: every candidate the tree's total allows, best first, the tree's values
        // its first `total`.
        const std::vector<double>& v = offered.at(im.id);
        ASSERT_GE(v.size(), got.size());
        EXPECT_TRUE(std::is_sorted(v.rbegin(), v.rend()));
        EXPECT_EQ(reference_dynamic_tree(im, dt, depth[j], scoring, dt.total).size(), v.size());
        double offered_sum = 0.0, tree_sum = 0.0;
        for (size_t k = 0; k < got.size(); ++k) offered_sum += v[k];
        for (const DraftNode& n : got) tree_sum += n.value;
        EXPECT_NEAR(tree_sum, offered_sum, 1e-9);
        trimmed += got.size() < v.size();
        offered.erase(im.id);
      }
      EXPECT_LE(static_cast<int>(got.size()), drafter.max_nodes(depth[j]));
      std::vector<int> parents;
      for (size_t k = 0; k < got.size(); ++k) {
        EXPECT_EQ(got[k].token, want[k].token) << "node " << k;
        EXPECT_EQ(got[k].parent, want[k].parent) << "node " << k;
        EXPECT_EQ(got[k].depth, want[k].depth) << "node " << k;
        EXPECT_TRUE(got[k].q.empty()) << "dynamic nodes are one-hot";
        // The reference recomputes each path's distribution: float rounding apart.
        EXPECT_NEAR(got[k].value, want[k].value, 1e-4 * want[k].value) << "node " << k;
        parents.push_back(got[k].parent);
        ++checked;
      }
      tree_depth(got);  // a tree: parents first, one depth below them
      if (first_parents.empty())
        first_parents = parents;
      else
        reshaped += parents != first_parents;
      const VerifyOutcome out = fake_verify(got, im.round, im.id, 1 + (r + im.id) % 4, V);
      drafter.finish_round(im, got, out, TargetRound{});
      commit(im, got, out);
    }
  }
  EXPECT_GT(checked, budget ? 20 : 60);
  EXPECT_GT(reshaped, 0);  // the shape follows the draft's confidence
  if (budget) {
    EXPECT_GT(trimmed, 5);
  }
}

TEST(TreeDrafter, DynamicTreeIsEagle2sSelection) {
  check_dynamic_against_reference(false);
}

TEST(TreeDrafter, GreedyDynamicTreeIsEagle2sSelection) {
  check_dynamic_against_reference(true);
}

// --draft-len auto's node budget (issue 41): the drafter offers its candidates' values (EAGLE-2's
// products of draft confidences) best first and keeps the budget's count of them.
TEST(TreeDrafter, DynamicTreeKeepsTheNodeBudgetsBest) {
  check_dynamic_against_reference(false, true);
}
