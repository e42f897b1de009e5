// The EAGLE drafter (models/eagle_drafter.h) and ModelDrafter's feature mode: parity with the
// PyTorch reference (python/tessera_ref/eagle.py) on a random drafter written in LANTERN's layout
// and converted by tools/convert_eagle.py (python/make_eagle_fixtures.py), refusal of a drafter
// made for another target, and, through the speculative loop, that every depth-1 draft
// distribution is the drafter's on the committed prefix with the target's own features (both
// guidance halves, batched images whose catch-ups differ in length, chunked catch-ups).
#include <gtest/gtest.h>

#include "delegating_drafter.h"

#include "float_compare.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "decode/guidance.h"
#include "decode/session.h"
#include "io/npy.h"
#include "models/eagle_drafter.h"
#include "models/llamagen.h"
#include "speculative/drafters/model_drafter.h"
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

// The drafter's logits and predicted features for the pairs (features[k], tokens[k]), k < n; pair
// k is at rotary row k (the prefix pairs first).
void drafter_outputs(const EagleDrafterModel& d, const std::vector<float>& features,
                     std::span<const int32_t> tokens, int n, std::vector<float>& logits,
                     std::vector<float>& predicted) {
  SessionOptions o;
  o.max_new = n;
  o.max_outputs_per_seq = n;
  o.hidden_states = HiddenState::PreNorm;  // the drafter's hidden output is its f^
  Session s(d, o);
  StepBatch b;
  b.n_new = n;
  b.slots = {s.acquire_slot()};
  for (int k = 0; k < n; ++k) {
    b.tokens.push_back(tokens[k]);
    b.positions.push_back(k);
    b.output_at.push_back(k);
  }
  b.features.assign(features.begin(), features.begin() + static_cast<ptrdiff_t>(n) * d.info().dim);
  b.output_hidden = true;
  const ForwardOutputs out = s.forward(b);
  s.read(out.logits, logits);
  s.read(out.hidden, predicted);
}

TEST(EagleDrafter, MatchesTheReference) {
  set_cpu_threads(1);
  LlamaGen target(load_model_config(kFix + "llamagen/c2i_f32"), cpu_backend());
  EagleDrafterModel d(load_model_config(kSpec + "tiny_eagle"), target);
  const std::string g = kSpec + "tiny_eagle_golden/";
  const std::vector<int32_t> tokens = read_npy(g + "tokens.npy").as_i32();
  const int n = static_cast<int>(tokens.size());
  ASSERT_EQ(n, target.info().n_tokens);
  const std::vector<float> f = target_features(target, Condition::label(3), tokens, n);
  // The target's post-norm features (the hook EAGLE reads): observed ~1e-6.
  EXPECT_LT(max_abs_diff(f, read_npy(g + "target_features.npy").as_f32()), 1e-4);
  std::vector<float> logits, predicted;
  drafter_outputs(d, f, tokens, n, logits, predicted);
  // Logits of std 4.3 through the target's head: observed ~1e-5.
  EXPECT_LT(max_abs_diff(predicted, read_npy(g + "predicted.npy").as_f32()), 1e-4);
  EXPECT_LT(max_abs_diff(logits, read_npy(g + "logits.npy").as_f32()), 5e-4);
}

TEST(EagleDrafter, RefusesADrafterForAnotherTarget) {
  LlamaGen target(load_model_config(kFix + "llamagen/c2i_f32"), cpu_backend());
  try {
    EagleDrafterModel d(load_model_config(kSpec + "micro_eagle"), target);
    FAIL() << "loaded a drafter of width 32 for a target of width 64";
  } catch (const ParameterError& e) {
    EXPECT_NE(std::string(e.what()).find("micro_eagle"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("width 32 is not the target's 64"), std::string::npos)
        << e.what();
  }
}

// Records every image's depth-1 distributions with the committed tokens they were drafted after.
class RecordingEagle : public test::DelegatingDrafter {
 public:
  // skip_rounds: rounds 1-6 of every 8 of each image draft nothing (depth 0), so the committed
  // pairs pile up and the next catch-up feeds more than one forward's rows (in chunks).
  RecordingEagle(speculative::ModelDrafter& inner, bool skip_rounds)
      : DelegatingDrafter(inner), skip_rounds_(skip_rounds) {}
  void propose(std::span<ImageState* const> active, std::span<const int> max_depth,
               std::vector<speculative::DraftTree>& trees) override {
    std::vector<int> depth(max_depth.begin(), max_depth.end());
    for (size_t j = 0; j < active.size(); ++j)
      if (skip_rounds_ && active[j]->round % 8 >= 1 && active[j]->round % 8 <= 6) depth[j] = 0;
    inner_.propose(active, depth, trees);
    for (size_t j = 0; j < active.size(); ++j) {
      if (trees[j].empty()) continue;
      Record r{active[j]->id, active[j]->tokens, trees[j][0].q, trees[j][0].token, {}};
      // The first child of node 0: drafted from the drafter's own feature at node 0's row.
      for (const auto& node : trees[j])
        if (node.parent == 0) {
          r.q2 = node.q;
          break;
        }
      records.push_back(std::move(r));
    }
  }

  struct Record {
    int image;
    std::vector<int32_t> committed;
    std::vector<float> q;
    int32_t token;
    std::vector<float> q2;  // empty: node 0 had no child
  };
  std::vector<Record> records;

 private:
  bool skip_rounds_;
};

// Through SpeculativeDecoder: four images in one batch, CFG (both halves' features), top-k and
// top-p, chains of depth 3 or the kary:2,2 tree; every depth-1 q (and the q of node 0's first
// child) must be the drafter's guided distribution after the committed tokens with the target's
// features, recomputed in one teacher-forced forward per half: the prefix pairs (LANTERN's token
// 0 beside the target's prefix features), then (f_k, x_k).
void expect_drafts_read_the_target(const std::string& target_dir, const std::string& drafter_dir,
                                   const std::vector<Condition>& conds, const std::string& tree,
                                   int min_accepted, bool accept_all = false,
                                   bool skip_rounds = false) {
  set_cpu_threads(1);
  LlamaGen target(load_model_config(kFix + target_dir), cpu_backend());
  EagleDrafterModel d(load_model_config(kSpec + drafter_dir), target);
  SamplingParams p;
  p.cfg_scale = 2.0f;
  p.top_k = accept_all ? 0 : 50;
  p.top_p = accept_all ? 1.0f : 0.95f;
  std::optional<speculative::TreeShape> shape;
  if (!tree.empty()) shape = speculative::load_tree_shape(tree);
  speculative::ModelDrafter inner(d, p, 3, static_cast<int>(conds.size()), shape,
                                  {d.feature(), d.prefix_token()});
  RecordingEagle drafter(inner, skip_rounds);
  // accept_all: UniformRSD with ω = 1e6 accepts every draft (p > 0 everywhere without filters),
  // so the rounds commit drafts whose pairs read the features of the rows after the root.
  const auto rule =
      accept_all ? speculative::make_uniform_rsd_rule(1e6f) : speculative::make_exact_rule();
  speculative::LoopSettings ls;
  ls.rule = rule.get();
  ls.drafter = &drafter;
  ls.draft_len = shape ? shape->max_depth() : 3;
  std::vector<const Condition*> cp;
  for (const Condition& c : conds) cp.push_back(&c);
  std::vector<uint64_t> idx(conds.size());
  std::iota(idx.begin(), idx.end(), uint64_t{0});
  GenerateStats st;
  speculative::generate_speculative(target, cp, idx, p, 5, ls, {}, st);
  ASSERT_GT(drafter.records.size(), 20u);
  int64_t accepted = 0;  // rounds that committed drafts: their pairs take features of later rows
  for (const ImageStats& im : st.per_image)
    for (int64_t a : im.accepted) accepted += a;
  const int V = target.info().vocab_size, D = target.info().dim;
  const int P = d.info().prefix_len;
  double worst = 0;
  int checked = 0, checked2 = 0;
  for (const auto& r : drafter.records) {
    const int n = static_cast<int>(r.committed.size());
    std::vector<float> fc = target_features(target, conds[r.image], r.committed, n);
    std::vector<float> fu = target_features(target, conds[r.image], r.committed, n, true);
    std::vector<int32_t> pairs(P, d.prefix_token());
    pairs.insert(pairs.end(), r.committed.begin(), r.committed.end());
    const int k = P + n;  // pairs
    ASSERT_EQ(fc.size(), static_cast<size_t>(k) * D);
    std::vector<float> lc, lu, pc, pu;
    drafter_outputs(d, fc, pairs, k, lc, pc);
    drafter_outputs(d, fu, pairs, k, lu, pu);
    std::vector<float> q(V);
    guided_distribution(lc.data() + static_cast<size_t>(k - 1) * V,
                        lu.data() + static_cast<size_t>(k - 1) * V, V, p, n, q);
    ASSERT_EQ(r.q.size(), q.size());
    worst = std::max(worst, max_abs_diff(r.q, q));
    ++checked;
    if (r.q2.empty()) continue;
    // Depth 2: the pair (f^ of the root row, node 0's token) after the committed pairs.
    pairs.push_back(r.token);
    fc.insert(fc.end(), pc.end() - D, pc.end());
    fu.insert(fu.end(), pu.end() - D, pu.end());
    drafter_outputs(d, fc, pairs, k + 1, lc, pc);
    drafter_outputs(d, fu, pairs, k + 1, lu, pu);
    guided_distribution(lc.data() + static_cast<size_t>(k) * V,
                        lu.data() + static_cast<size_t>(k) * V, V, p, n + 1, q);
    worst = std::max(worst, max_abs_diff(r.q2, q));
    ++checked2;
  }
  std::printf(
      "  %s %s: %d depth-1 and %d depth-2 distributions checked (%lld rounds accepted drafts), "
      "largest difference %.2g\n",
      target_dir.c_str(), tree.empty() ? "chain" : tree.c_str(), checked, checked2,
      static_cast<long long>(accepted), worst);
  EXPECT_GT(checked2, 10);
  EXPECT_GT(accepted, min_accepted);
  EXPECT_LT(worst, 1e-4);
}

// The micro target (vocab 4, 4 tokens): its drafts are often accepted, so the pairs of accepted
// drafts (features of the rows after the root) are checked too.
std::vector<Condition> classes() {
  std::vector<Condition> c;
  for (int i = 0; i < 24; ++i) c.push_back(Condition::label(i % 3));
  return c;
}

std::vector<Condition> captions() {
  const ModelConfig c = load_model_config(kFix + "llamagen/t2i_f32");
  const Condition cap = Condition::caption_file(kFix + "llamagen/golden/caption.npy", c.gpt);
  return {cap, Condition::unconditional(), cap, cap};
}

TEST(EagleDrafter, ChainDraftsReadTheTargetsFeatures) {
  expect_drafts_read_the_target("spec/micro_target", "micro_eagle", classes(), "", 5);
}

TEST(EagleDrafter, TreeDraftsReadTheTargetsFeatures) {
  expect_drafts_read_the_target("spec/micro_target", "micro_eagle", classes(), "kary:2,2", 5);
}

// Rounds that commit their drafts (every one accepted): the next catch-up pairs each committed
// token with the feature of the row that verified it.
TEST(EagleDrafter, CommittedDraftsPairWithTheirVerifiedRows) {
  std::vector<Condition> c;
  for (int i = 0; i < 8; ++i) c.push_back(Condition::label(i));
  expect_drafts_read_the_target("llamagen/c2i_f32", "tiny_eagle", c, "", 20, true);
  expect_drafts_read_the_target("llamagen/c2i_f32", "tiny_eagle", c, "kary:2,2", 20, true);
}

// Rounds without drafts leave up to 7 committed pairs for one catch-up, more than the drafter's
// 4 rows per forward (depth 3 + 1): it feeds them in two forwards, the last one's outputs the
// roots'.
TEST(EagleDrafter, PiledUpPairsAreFedInChunks) {
  std::vector<Condition> c;
  for (int i = 0; i < 8; ++i) c.push_back(Condition::label(i));
  expect_drafts_read_the_target("llamagen/c2i_f32", "tiny_eagle", c, "", -1, false, true);
}

// A caption prefix of 8 rows: 7 prefix pairs, fed in the first catch-up with the first token's
// (a random drafter over 256 tokens: its drafts are rejected).
TEST(EagleDrafter, CaptionPrefixPairsReadTheTargetsPrefixFeatures) {
  expect_drafts_read_the_target("llamagen/t2i_f32", "t2i_eagle", captions(), "", -1);
  expect_drafts_read_the_target("llamagen/t2i_f32", "t2i_eagle", captions(), "kary:2,2", -1);
}

}  // namespace
