// --draft-len auto through the speculative loop (speculative_decoder.cpp): with a fixed cost table
// the depth of every round is asserted, not a count of distinct depths. A target that is its own
// draft has every draft accepted, so the depth climbs; a draft that is always rejected brings it
// down to one; and on real runs (a draft model, Jacobi windows) the depths the loop drafted are
// those its policy chooses from the rounds the image had, replayed outside the loop.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "decode/guidance.h"
#include "models/llamagen.h"
#include "recording_drafter.h"
#include "speculative/drafters/jacobi_drafter.h"
#include "speculative/drafters/model_drafter.h"
#include "speculative/rules/rules.h"
#include "speculative/speculative_decoder.h"
#include "tensor/cpu/cpu_backend.h"

using namespace tessera;
using namespace tessera::speculative;
using tessera::test::RecordingDrafter;
using tessera::test::RoundRecord;

namespace {

const std::string kFixtures = std::string(TESSERA_FIXTURES);

std::vector<int> depths_of(const std::vector<RoundRecord>& rounds) {
  std::vector<int> d;
  for (const RoundRecord& r : rounds) d.push_back(r.depth);
  return d;
}

// The depths `policy` chooses for an image whose rounds went as recorded: a fresh start, then per
// round choose(cap) and observe(drafted, carried, accepted).
std::vector<int> replayed_depths(const DraftLengthPolicy& policy,
                                 const std::vector<RoundRecord>& rounds) {
  ImageAcceptance image = policy.start();
  std::vector<int> d;
  for (const RoundRecord& r : rounds) {
    d.push_back(policy.choose(image, r.cap));
    policy.observe(image, r.drafted, r.carried, r.accepted);
  }
  return d;
}

RoundCosts linear_costs(int max_depth, double per_position, double draft_step) {
  RoundCosts c;
  for (int k = 1; k <= max_depth + 1; ++k) c.verify.push_back(1.0 + per_position * (k - 1));
  c.draft_step = draft_step;
  return c;
}

struct Models {
  ModelConfig target_config = load_model_config(kFixtures + "/llamagen/c2i_f32");
  ModelConfig draft_config = load_model_config(kFixtures + "/spec/tiny_draft");
  LlamaGen target{target_config, cpu_backend()};
  LlamaGen draft{draft_config, cpu_backend()};
};

Models& models() {
  static Models m;
  return m;
}

// Self-drafting and rejecting runs: CFG, top-k 8 (below the 256-token vocabulary, so the
// rejecting drafter has tokens to draft). `flat`: no CFG, the whole vocabulary at temperature 4,
// where the random-weight fixtures' draft is accepted about half the time (at temperature 1 the
// target is too peaked for it: no draft accepted).
SamplingParams sampling(bool flat = false) {
  SamplingOptions s;
  s.cfg_scale = flat ? 1.0f : 4.0f;
  s.top_k = flat ? 0 : 8;
  s.top_p = 1.0f;
  s.temperature = flat ? 4.0f : 1.0f;
  return to_sampling_params(s);
}

// Generates `n` images of the 16-token fixture with `drafter` under `policy` and returns the
// drafter's records. The loop's --draft-len is the one whose depth is the policy's maximum, as
// make_method resolves auto.
std::map<int, std::vector<RoundRecord>> run(Drafter& drafter, const DraftLengthPolicy& policy,
                                            int n, bool reject = false, bool flat = false) {
  const int draft_len = policy.max_depth() + (drafter.carries_drafts() ? 1 : 0);  // Jacobi: root
  EXPECT_EQ(drafter.draft_depth(draft_len), policy.max_depth());
  RecordingDrafter rec(drafter, policy.max_depth(), models().target.info().n_tokens, reject);
  const auto rule = make_exact_rule();
  LoopSettings ls;
  ls.rule = rule.get();
  ls.drafter = &rec;
  ls.draft_len = draft_len;
  ls.policy = &policy;
  std::vector<Condition> conds;
  for (int i = 0; i < n; ++i) conds.push_back(Condition::label(i % 10));
  std::vector<const Condition*> ptrs;
  for (const Condition& c : conds) ptrs.push_back(&c);
  std::vector<uint64_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  GenerateStats st;
  const auto grids =
      generate_speculative(models().target, ptrs, idx, sampling(flat), 11, ls, {}, st);
  EXPECT_EQ(grids.size(), static_cast<size_t>(n));
  return rec.rounds;
}

// Verification at 1 + 0.12 (k - 1), a draft step 0.04 (the policy drafts 2 from the prior). The
// 16-token image starts with the prefill's token; a round of depth d adds d + 1 tokens when all
// are accepted, 1 when none is; the round with no token left to draft asks for depth 0.
constexpr int kCap = 8;

TEST(DraftLengthLoop, SelfDraftClimbs) {
  const DraftLengthPolicy policy(linear_costs(kCap, 0.12, 0.04), kCap);
  ModelDrafter self(models().target, sampling(), kCap, 3);
  const auto rounds = run(self, policy, 3);
  ASSERT_EQ(rounds.size(), 3u);
  for (const auto& [id, r] : rounds) {
    SCOPED_TRACE("image " + std::to_string(id));
    // 2 drafts (3 tokens), 6 (7 tokens), then the cap: 1 + 3 + 7 = 11 tokens leave 5, so 4
    // drafts after the root.
    EXPECT_EQ(depths_of(r), (std::vector<int>{2, 6, 4}));
    for (const RoundRecord& x : r) EXPECT_EQ(x.accepted, x.depth);  // q = p: all accepted
  }
}

TEST(DraftLengthLoop, AlwaysRejectedFallsToOne) {
  const DraftLengthPolicy policy(linear_costs(kCap, 0.12, 0.04), kCap);
  ModelDrafter self(models().target, sampling(), kCap, 2);
  const auto rounds = run(self, policy, 2, /*reject=*/true);
  ASSERT_EQ(rounds.size(), 2u);
  std::vector<int> want(15, 1);  // 15 rounds of one token after the prefill's
  want.front() = 2;              // the prior's choice
  want.back() = 0;               // the last token: nothing left to draft
  for (const auto& [id, r] : rounds) {
    SCOPED_TRACE("image " + std::to_string(id));
    EXPECT_EQ(depths_of(r), want);
    for (const RoundRecord& x : r) EXPECT_EQ(x.accepted, 0);
  }
}

// Real drafts, real acceptance: the loop's depths are the policy's choices from each image's own
// rounds (observe with the drafted, carried and accepted counts; choose with the image's cap).
TEST(DraftLengthLoop, DepthsFollowEachImagesRounds) {
  Models& m = models();
  {
    SCOPED_TRACE("draft model");
    const DraftLengthPolicy policy(linear_costs(kCap, 0.08, 0.03), kCap);
    ModelDrafter drafter(m.draft, sampling(true), kCap, 4);
    const auto rounds = run(drafter, policy, 4, false, true);
    ASSERT_EQ(rounds.size(), 4u);
    std::set<std::vector<int>> sequences;
    for (const auto& [id, r] : rounds) {
      EXPECT_EQ(depths_of(r), replayed_depths(policy, r)) << "image " << id;
      sequences.insert(depths_of(r));
    }
    EXPECT_GT(sequences.size(), 1u) << "every image drafted alike: the replay shows little";
  }
  {
    SCOPED_TRACE("jacobi");
    const int cap = 12;  // a window of 13 positions
    const DraftLengthPolicy policy(linear_costs(cap, 0.05, 0.0), cap, /*carries_drafts=*/true);
    JacobiDrafter drafter(m.target_config.gpt.vocab_size, sampling(true));
    const auto rounds = run(drafter, policy, 4, false, true);
    ASSERT_EQ(rounds.size(), 4u);
    int carried = 0;
    for (const auto& [id, r] : rounds) {
      EXPECT_EQ(depths_of(r), replayed_depths(policy, r)) << "image " << id;
      for (const RoundRecord& x : r) carried += x.carried;
    }
    EXPECT_GT(carried, 0) << "no window carried drafts: the window model was not exercised";
  }
}

}  // namespace
