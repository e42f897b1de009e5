// Hawk's drafter (speculative/drafters/hawk_drafter.h) inside the speculative loop on the micro
// target (2x2 grid, vocabulary 4) with random heads (tests/fixtures/spec/micro_hawk: 2 horizontal,
// 1 vertical): the pools are laid out as Hawk §4.2 says (the vertical proposal cached one row up,
// nearest row first, then the horizontal one), every node carries the q its token was drawn
// from, and the test of the test: a node verified against another member's q (the q of the
// horizontal head for the vertical head's token and vice versa) breaks exactness, and the
// chi-square proof catches it.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <tuple>

#include "delegating_drafter.h"

#include "decode/guidance.h"
#include "models/llamagen.h"
#include "models/medusa_heads.h"
#include "spec_analysis.h"
#include "speculative/drafters/hawk_drafter.h"
#include "speculative/rules/rules.h"
#include "speculative/speculative_decoder.h"
#include "speculative/tree_shape.h"
#include "tensor/cpu/cpu_backend.h"

using namespace tessera;
using namespace tessera::spec_test;

namespace {

// Checks every node's q against distributions computed here, independently of the drafter: where
// a proposal is made (the prefill's last prefix row; each finish_round's rows that predicted its
// committed tokens), the heads run on the target's rows and their logits are guided on the host
// (target_distribution, at the proposed token's index). Vertical head d on the row that predicted
// token i proposes token i + d W, and a later node proposing that token from depth d's head must
// carry that distribution, which must also be the cache's row; horizontal head h on the row that
// predicted the root t proposes token t + 1 + h, the next round's depth h + 1.
class ProposalCheck : public test::DelegatingDrafter {
 public:
  ProposalCheck(speculative::HawkDrafter& inner, const MedusaHeads& heads, const SamplingParams& p,
                int row_width, int depths)
      : DelegatingDrafter(inner), hawk_(inner), heads_(heads), p_(p), W_(row_width), D_(depths) {}
  void start(std::span<ImageState* const> images,
             const speculative::TargetPrefill& prefill) override {
    const int n = static_cast<int>(images.size()), rows = prefill.rows;
    for (int i = 0; i < n; ++i)  // the last prefix row predicted token 0
      record(images[i]->id, prefill.hidden, {int64_t{i} * rows + rows - 1},
             {int64_t{n + i} * rows + rows - 1}, prefill.hidden, 0);
    inner_.start(images, prefill);
  }
  void finish_round(ImageState& im, const speculative::DraftTree& tree,
                    const speculative::VerifyOutcome& out,
                    const speculative::TargetRound& target) override {
    // The rows that predicted this round's committed tokens (the root's, each accepted node's);
    // row r predicted token first + r.
    std::vector<int64_t> rows = {0};
    for (int a : out.accepted) rows.push_back(a + 1);
    record(im.id, target.hidden, rows, rows, target.hidden_uncond,
           static_cast<int>(im.tokens.size()) - static_cast<int>(rows.size()));
    accepting_rounds += rows.size() > 1;
    inner_.finish_round(im, tree, out, target);
  }
  void propose(std::span<ImageState* const> active, std::span<const int> max_depth,
               std::vector<speculative::DraftTree>& trees) override {
    inner_.propose(active, max_depth, trees);
    for (size_t j = 0; j < active.size(); ++j) {
      const int t = static_cast<int>(active[j]->tokens.size()) - 1;
      for (const speculative::DraftNode& n : trees[j]) {
        const int P = t + n.depth;
        // The node's q: its own, or on the device loop its row of the drafter's device rows.
        std::vector<float> q = n.q;
        if (q.empty()) {
          ASSERT_TRUE(n.q_row >= 0 && hawk_.device_rows());
          q.resize(static_cast<size_t>(heads_.vocab_size()));
          heads_.backend().download(hawk_.device_rows()->q.rows(n.q_row, 1), q.data());
        }
        if (n.vertical > 0) {
          EXPECT_EQ(q, hawk_.cached_q(active[j]->id, P, n.vertical)) << "token " << P;
        }
        const auto want = expected_.find({active[j]->id, P, n.vertical});
        ASSERT_NE(want, expected_.end()) << "a proposal made where none was: token " << P;
        ASSERT_EQ(want->second.size(), q.size());
        for (size_t y = 0; y < q.size(); ++y)
          EXPECT_NEAR(q[y], want->second[y], 1e-6) << "token " << P << " id " << y;
        if (n.vertical == 0)
          ++horizontal_checked;
        else
          ++(P - n.vertical * W_ == 0 ? prefill_made : round_made);
      }
    }
  }
  int prefill_made = 0, round_made = 0;  // vertical nodes checked, by where they were proposed
  int horizontal_checked = 0;
  int accepting_rounds = 0;  // rounds that committed several rows' proposals

 private:
  // The heads on rows `cond_rows` of cond (and uncond_rows of uncond), row r having predicted
  // token first + r: vertical head d's distribution is the proposal for token first + r + d W
  // (key depth d), horizontal head h's on the last row the next round's for the token h + 1 past
  // it (key depth 0).
  void record(int id, const Tensor& cond, const std::vector<int64_t>& cond_rows,
              const std::vector<int64_t>& uncond_rows, const Tensor& uncond, int first) {
    const int k = static_cast<int>(cond_rows.size()), R = p_.uses_cfg() ? 2 * k : k;
    const int V = heads_.vocab_size(), H = heads_.num_heads(), heads = H + D_;
    Backend& be = heads_.backend();
    MedusaHeads::Workspace ws = heads_.make_workspace(R);
    for (int r = 0; r < k; ++r) {
      Tensor to = ws.features.rows(r, 1);
      be.copy(cond.rows(cond_rows[r], 1), to);
      if (!p_.uses_cfg()) continue;
      Tensor to_uncond = ws.features.rows(k + r, 1);
      be.copy(uncond.rows(uncond_rows[r], 1), to_uncond);
    }
    const Tensor logits = heads_.forward(ws, R, 0, heads);  // horizontal heads, then vertical
    std::vector<float> host(static_cast<size_t>(heads) * R * V), probs(V);
    be.download(logits.rows(0, int64_t{heads} * R), host.data());
    auto distribution = [&](int head, int r, int token) {
      const float* at = host.data() + static_cast<size_t>(head * R + r) * V;
      std::span<const float> u;
      if (p_.uses_cfg() && p_.guided(token))
        u = std::span<const float>(at + static_cast<size_t>(k) * V, V);
      target_distribution(std::span<const float>(at, V), u, p_.cfg_scale, p_, probs);
      return probs;
    };
    for (int d = 1; d <= D_; ++d)
      for (int r = 0; r < k; ++r) {
        const int token = first + r + d * W_;
        expected_[{id, token, d}] = distribution(H + d - 1, r, token);
      }
    const int root = first + k - 1;
    for (int h = 0; h < H; ++h)
      expected_[{id, root + 1 + h, 0}] = distribution(h, k - 1, root + 1 + h);
  }
  speculative::HawkDrafter& hawk_;
  const MedusaHeads& heads_;
  SamplingParams p_;
  int W_, D_;
  // (image id, token, depth of the vertical head or 0 for the horizontal ones) -> q
  std::map<std::tuple<int, int, int>, std::vector<float>> expected_;
};

// Checks (and with `swap`, mutates) each round's tree of the Hawk drafter it wraps (the micro
// heads: one vertical depth), after ProposalCheck's checks.
class CheckedHawk : public ProposalCheck {
 public:
  CheckedHawk(speculative::HawkDrafter& inner, const MedusaHeads& heads, const SamplingParams& p,
              int row_width, bool swap)
      : ProposalCheck(inner, heads, p, row_width, 1), hawk_(inner), W_(row_width), swap_(swap) {}
  void propose(std::span<ImageState* const> active, std::span<const int> max_depth,
               std::vector<speculative::DraftTree>& trees) override {
    ProposalCheck::propose(active, max_depth, trees);
    for (size_t j = 0; j < active.size(); ++j) {
      const ImageState& im = *active[j];
      const int t = static_cast<int>(im.tokens.size()) - 1;
      speculative::DraftTree& tree = trees[j];
      for (size_t u = 0; u < tree.size(); ++u) {
        speculative::DraftNode& n = tree[u];
        ASSERT_TRUE(n.with_replacement);
        ASSERT_GT(n.q[n.token], 0.0f) << "a token drawn from its own q";
        // Siblings: the children of n's parent, in order.
        std::vector<size_t> sib;
        for (size_t v = 0; v < tree.size(); ++v)
          if (tree[v].parent == n.parent) sib.push_back(v);
        const size_t rank = std::find(sib.begin(), sib.end(), u) - sib.begin();
        const int P = t + n.depth;
        const auto pool = hawk_.cache(im.id).pool(P);
        // Vertical first: slot 0 is the proposal cached one row up when there is one.
        const bool vertical = P - W_ >= 0;
        ASSERT_EQ(pool.size(), vertical ? 1u : 0u) << "token " << P;
        ASSERT_EQ(sib.size(), vertical ? 2u : 1u);
        if (vertical && rank == 0) {
          EXPECT_EQ(pool[0].depth, 1);
          EXPECT_EQ(n.vertical, 1);
          ++vertical_nodes;
        } else {
          EXPECT_EQ(n.vertical, 0);
          EXPECT_FALSE(vertical && n.q == hawk_.cached_q(im.id, P, 1));
          ++horizontal_nodes;
        }
      }
      if (!swap_) continue;
      for (size_t u = 0; u + 1 < tree.size(); ++u)
        if (tree[u + 1].parent == tree[u].parent && tree[u].depth == tree[u + 1].depth &&
            tree[u].q != tree[u + 1].q) {
          std::swap(tree[u].q, tree[u + 1].q);
          ++u;
        }
    }
  }
  int vertical_nodes = 0, horizontal_nodes = 0;

 private:
  speculative::HawkDrafter& hawk_;
  int W_;
  bool swap_;
};

class HawkLoop : public MicroModels {
 protected:
  // Samples of the micro target's class `cls` drafted by Hawk's heads (kary:2,2, depth 2).
  std::vector<Seq> sample(int cls, int n, bool swap, int* vertical_nodes = nullptr) {
    const GenerateOptions o = sampling_options("hawk", false);
    const LlamaGen gpt(load_model_config(kSpec + "micro_target"), cpu_backend());
    const MedusaHeads heads(load_model_config(kSpec + "micro_hawk"), gpt);
    const SamplingParams p = to_sampling_params(o.sampling);
    const int N = gpt.info().n_tokens;
    speculative::HawkDrafter hawk(heads, p, {2, 1, 1}, speculative::load_tree_shape("kary:2,2"), N);
    CheckedHawk checked(hawk, heads, p, gpt.info().row_width, swap);
    const auto rule = speculative::make_exact_rule();
    speculative::LoopSettings ls;
    ls.rule = rule.get();
    ls.drafter = &checked;
    ls.draft_len = 2;
    std::vector<Seq> out;
    const Condition c = Condition::label(cls);
    for (int done = 0; done < n; done += o.batch) {
      const int m = std::min(o.batch, n - done);
      std::vector<const Condition*> conds(m, &c);
      std::vector<uint64_t> idx(m);
      for (int i = 0; i < m; ++i) idx[i] = static_cast<uint64_t>(done + i);
      GenerateStats st;
      auto grids = speculative::generate_speculative(gpt, conds, idx, p, o.seed, ls, nullptr, st);
      out.insert(out.end(), grids.begin(), grids.end());
    }
    EXPECT_GT(checked.vertical_nodes, 0);
    EXPECT_GT(checked.horizontal_nodes, 0);
    EXPECT_EQ(checked.prefill_made + checked.round_made, checked.vertical_nodes);
    EXPECT_EQ(checked.horizontal_checked, checked.horizontal_nodes);
    if (vertical_nodes) *vertical_nodes = checked.vertical_nodes;
    return out;
  }
};

TEST_F(HawkLoop, PoolsAreVerticalFirstAndTheLoopIsExact) {
  const Joint joint = target_joint(2, sampling_options("hawk", false).sampling);
  const int n = samples_for(joint, kTv, kPower, 1000);
  const ChiSquare chi = chi_square(joint, sample(2, n, false));
  EXPECT_EQ(chi.impossible, 0);
  EXPECT_GT(chi.p_value, kAlpha) << "chi2 " << chi.stat << " df " << chi.df;
}

// The mutation: each vertical-horizontal pair of siblings swaps its q, so a token is tested
// against the other head's distribution. The loop no longer samples the target.
TEST_F(HawkLoop, ANodeTestedAgainstAnotherMembersQIsCaught) {
  const Joint joint = target_joint(2, sampling_options("hawk", false).sampling);
  const int n = samples_for(joint, kTv, kPower, 1000);
  EXPECT_TRUE(rejects(chi_square(joint, sample(2, n, true))));
}

// --draft-len auto's node budget on Hawk's product (HawkDrafter::keep_best): the n nodes kept are
// the n of highest value (top candidates: the product of q(x) along the path), every parent
// among them, in the full tree's order (pools stay vertical first).
class BudgetedHawk : public test::DelegatingDrafter {
 public:
  BudgetedHawk(speculative::HawkDrafter& inner, int n) : DelegatingDrafter(inner), n_(n) {}
  void propose(std::span<ImageState* const> active, std::span<const int> max_depth,
               std::vector<speculative::DraftTree>& trees) override {
    std::vector<speculative::DraftTree> full;
    inner_.set_node_budget({});
    inner_.propose(active, max_depth, full);     // top candidates: no draws, the same tree again
    std::map<int, std::vector<double>> offered;  // by image id
    inner_.set_node_budget([&](const ImageState& im, std::span<const double> values) {
      offered[im.id].assign(values.begin(), values.end());
      return n_;
    });
    inner_.propose(active, max_depth, trees);
    for (size_t j = 0; j < active.size(); ++j) {
      const speculative::DraftTree &f = full[j], &t = trees[j];
      if (f.size() <= 1) continue;
      ++budgeted;
      ASSERT_EQ(t.size(), std::min<size_t>(n_, f.size()));
      std::vector<double> values;
      for (const auto& node : f) {
        const double parent = node.parent < 0 ? 1.0 : f[node.parent].value;
        EXPECT_LE(node.value, parent + 1e-12);
        EXPECT_GT(node.value, 0.0);
        values.push_back(node.value);
      }
      std::sort(values.rbegin(), values.rend());
      EXPECT_EQ(offered[active[j]->id], values) << "the product's values, best first";
      // Kept: the n best, in tree order, each with its parent.
      size_t from = 0;
      for (const auto& node : t) {
        while (from < f.size() && (f[from].token != node.token || f[from].depth != node.depth ||
                                   f[from].value != node.value))
          ++from;
        ASSERT_LT(from, f.size()) << "a kept node out of the full tree's order";
        EXPECT_GE(node.value, values[t.size() - 1]);
        if (node.parent >= 0) {
          EXPECT_LT(node.parent, static_cast<int>(&node - t.data()));
          EXPECT_EQ(t[node.parent].depth, node.depth - 1);
        }
        ++from;
      }
    }
  }
  int budgeted = 0;

 private:
  int n_;
};

TEST_F(HawkLoop, TheNodeBudgetKeepsTheBestNodesWithTheirParents) {
  GenerateOptions o = sampling_options("hawk", false);
  o.sampling.top_k = 0;
  const LlamaGen gpt(load_model_config(kSpec + "micro_target"), cpu_backend());
  const MedusaHeads heads(load_model_config(kSpec + "micro_hawk"), gpt);
  const SamplingParams p = to_sampling_params(o.sampling);
  speculative::HawkDrafter hawk(heads, p, {2, 1, 1, true}, speculative::load_tree_shape("kary:2,2"),
                                gpt.info().n_tokens);
  for (int n : {1, 2}) {
    BudgetedHawk budgeted(hawk, n);
    const auto rule = speculative::make_exact_rule();
    speculative::LoopSettings ls;
    ls.rule = rule.get();
    ls.drafter = &budgeted;
    ls.draft_len = 2;
    const Condition c = Condition::label(1);
    std::vector<const Condition*> conds(50, &c);
    std::vector<uint64_t> idx(conds.size());
    std::iota(idx.begin(), idx.end(), 0);
    GenerateStats st;
    speculative::generate_speculative(gpt, conds, idx, p, o.seed, ls, nullptr, st);
    EXPECT_GT(budgeted.budgeted, 10);
  }
}

// Every draft carries what the heads proposed where the proposal was made (ProposalCheck), on the
// c2i fixture (4x4 grid, guidance, two vertical depths): vertical proposals made by the prefill
// and by rounds (each round's committed rows, several at once when drafts are accepted) reach the
// drafts of later rounds through the speculation cache, horizontal ones the next round's, on the
// host loop and the device loop, whose rows the drafter keeps on the backend. The fixture's heads
// are random, so a lenient rule (amplify, k = 1e6, top-k off: almost every draft accepted) makes
// rounds commit several rows.
TEST(HawkHeads, ProposalsAreTheHeadsDistributions) {
  const std::string fix = std::string(TESSERA_FIXTURES);
  const LlamaGen gpt(load_model_config(fix + "/llamagen/c2i_f32"), cpu_backend());
  const MedusaHeads heads(load_model_config(fix + "/spec/tiny_hawk"), gpt);
  SamplingOptions so;
  so.cfg_scale = 3.0f;
  so.top_k = 0;
  SamplingParams p = to_sampling_params(so);
  p.cfg_interval = 7.0f;  // guided up to token 8 of 16: each row's token index matters
  // chunk: the vertical forwards' rows a half (0: the default bound, which this batch is far
  // below; 3: one image's round, so that the queue runs in several forwards of whole entries).
  for (const auto& [where, chunk] : {std::pair{DeviceLoop::Off, 0}, std::pair{DeviceLoop::On, 0},
                                     std::pair{DeviceLoop::On, 3}, std::pair{DeviceLoop::Off, 3}}) {
    SCOPED_TRACE(std::string(where == DeviceLoop::On ? "device loop" : "host loop") + " chunk " +
                 std::to_string(chunk));
    speculative::HawkDrafter hawk(heads, p, {2, 2, 1}, speculative::load_tree_shape("kary:3,3"),
                                  gpt.info().n_tokens);
    if (chunk > 0) hawk.set_vertical_chunk_rows(chunk);
    ProposalCheck checked(hawk, heads, p, gpt.info().row_width, 2);
    const auto rule = speculative::make_amplify_rule(1e6f);
    speculative::LoopSettings ls;
    ls.rule = rule.get();
    ls.drafter = &checked;
    ls.draft_len = 2;
    const Condition c = Condition::label(3);
    std::vector<const Condition*> conds(6, &c);
    std::vector<uint64_t> idx(conds.size());
    std::iota(idx.begin(), idx.end(), 0);
    DecoderSettings d;
    d.sampling = p;
    d.seed = 9;
    d.device_loop = where;
    GenerateStats st;
    speculative::SpeculativeDecoder dec(gpt, static_cast<int>(conds.size()), d, ls, st);
    for (size_t i = 0; i < conds.size(); ++i) dec.add(*conds[i], idx[i]);
    int steps = 0;
    while (dec.step()) ++steps;
    // Each head kind runs once a round for every image: the vertical heads on the rows queued
    // since the last round (all six images' prefills, then their committed rows), the
    // horizontal ones on the roots; one image at a time would be 7 forwards a round.
    // The horizontal heads' forward holds 6 images x 2 halves x 2 heads (head, row) pairs.
    const int horizontal_pairs = 6 * 2 * 2;
    if (chunk == 0) {
      EXPECT_LE(hawk.batched_forwards(), 2 * (steps + 1));
      EXPECT_GT(hawk.workspace_head_rows(), horizontal_pairs)
          << "the vertical queue in one forward";
    } else {
      // The six prefills' rows take two forwards, a round's committed rows one or more.
      EXPECT_GT(hawk.batched_forwards(), 2 * (steps + 1));
      EXPECT_EQ(hawk.workspace_head_rows(), horizontal_pairs) << "vertical forwards of 3 rows";
    }
    EXPECT_GT(checked.prefill_made, 5);
    EXPECT_GT(checked.round_made, 20);
    EXPECT_GT(checked.accepting_rounds, 10);
    EXPECT_GT(checked.horizontal_checked, 50);
  }
}

}  // namespace
