// --draft-len auto's policy (speculative/draft_length.h) without timing anything: given costs
// and acceptance rates it picks the depth with the most expected tokens per second, and its
// acceptance estimate follows a change in acceptance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "speculative/draft_length.h"

using namespace tessera::speculative;

namespace {

TEST(DraftLength, ExpectedTokensOfARound) {
  const std::vector<double> a = {0.8, 0.5, 0.25};
  EXPECT_DOUBLE_EQ(expected_round_tokens(a, 0), 1.0);
  EXPECT_DOUBLE_EQ(expected_round_tokens(a, 1), 1.8);
  EXPECT_DOUBLE_EQ(expected_round_tokens(a, 2), 1.8 + 0.4);
  EXPECT_DOUBLE_EQ(expected_round_tokens(a, 3), 1.8 + 0.4 + 0.1);
  // Constant acceptance a: the geometric series (1 - a^(L+1)) / (1 - a) (Leviathan et al. Eq. 1).
  const std::vector<double> c(8, 0.6);
  EXPECT_NEAR(expected_round_tokens(c, 8), (1 - std::pow(0.6, 9)) / 0.4, 1e-12);
}

// The choice is the argmax of E[tokens(L)] / (L draft_step + verify[L]) over L in [1, cap].
TEST(DraftLength, PicksTheArgmaxOfTokensPerSecond) {
  RoundCosts costs;
  costs.verify = {1.0, 1.02, 1.05, 1.1, 1.3, 1.6, 2.0, 2.5, 3.1};
  costs.draft_step = 0.04;
  const DraftLengthPolicy policy(costs, 8);
  for (double a : {0.05, 0.3, 0.5, 0.7, 0.9, 0.99}) {
    const std::vector<double> acc(8, a);
    int best = 1;
    for (int L = 2; L <= 8; ++L)
      if (expected_round_tokens(acc, L) / (L * 0.04 + costs.verify[L]) >
          expected_round_tokens(acc, best) / (best * 0.04 + costs.verify[best]))
        best = L;
    EXPECT_EQ(policy.choose(acc, 8), best) << "a " << a;
  }
  // Low acceptance: one draft; high: longer; free verification and drafting: the longest.
  EXPECT_EQ(policy.choose(std::vector<double>(8, 0.05), 8), 1);
  EXPECT_GE(policy.choose(std::vector<double>(8, 0.95), 8), 4);
  RoundCosts flat;
  flat.verify.assign(9, 1.0);
  EXPECT_EQ(DraftLengthPolicy(flat, 8).choose(std::vector<double>(8, 0.5), 8), 8);
  // The image's end caps the depth; nothing left: no draft.
  EXPECT_EQ(DraftLengthPolicy(flat, 8).choose(std::vector<double>(8, 0.5), 3), 3);
  EXPECT_EQ(DraftLengthPolicy(flat, 8).choose(std::vector<double>(8, 0.5), 0), 0);
}

// Per-depth rates matter, not only their mean: a draft good for two tokens and bad after.
TEST(DraftLength, UsesPerDepthAcceptance) {
  RoundCosts costs;
  costs.verify = {1.0, 1.1, 1.2, 1.3, 1.4};
  const DraftLengthPolicy policy(costs, 4);
  EXPECT_EQ(policy.choose(std::vector<double>{0.95, 0.95, 0.05, 0.05}, 4), 2);
}

// A measured dip (noise: a longer forward timed cheaper than a shorter one) does not lure the
// policy into long drafts: the costs count as their running maximum.
TEST(DraftLength, MeasuredDipsAreNoise) {
  RoundCosts costs;
  costs.verify = {1.0, 1.1, 3.0, 3.0, 1.05};  // k = 5 "cheaper" than k = 2
  const DraftLengthPolicy policy(costs, 4);
  EXPECT_DOUBLE_EQ(policy.round_seconds(4), 3.0);
  EXPECT_EQ(policy.choose(std::vector<double>(4, 0.5), 4), 1);
}

TEST(DraftLength, RefusesCostsShorterThanItsDepth) {
  RoundCosts costs;
  costs.verify = {1.0, 1.1};
  EXPECT_THROW(DraftLengthPolicy(costs, 2), std::exception);
  EXPECT_THROW(DraftLengthPolicy(costs, 0), std::exception);
}

// The node budget of a static tree: kary:3,2,1 has 3, 9 and 15 nodes down to depths 1-3, fed by
// draft forwards of 1, 3 and 6 rows. A round cut at depth L verifies 1 + nodes(L) positions, and
// its drafting costs draft_step per forward scaled by the target's cost ratio of its rows.
TEST(DraftLength, TreeCutsAreCostedByTheirNodes) {
  RoundCosts costs;
  const std::vector<int> depth = {1, 1, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3};
  const std::vector<int> children = {2, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0};
  set_tree_costs(costs, depth, children);
  EXPECT_EQ(costs.tree_nodes, (std::vector<int>{3, 9, 15}));
  EXPECT_EQ(costs.tree_rows, (std::vector<int>{1, 3, 6}));
  for (int k = 1; k <= 16; ++k) costs.verify.push_back(1.0 + 0.1 * (k - 1));  // 10% per position
  costs.draft_step = 0.2;
  const DraftLengthPolicy policy(costs, 3);
  EXPECT_EQ(policy.round_nodes(2), 9);
  EXPECT_DOUBLE_EQ(policy.round_seconds(1), 0.2 + costs.verify[3]);
  EXPECT_DOUBLE_EQ(policy.round_seconds(2), 0.2 + 0.2 * 1.2 + costs.verify[9]);
  EXPECT_DOUBLE_EQ(policy.round_seconds(3), 0.2 + 0.2 * 1.2 + 0.2 * 1.5 + costs.verify[15]);
  // The choice is the argmax of E[tokens(L)] / round_seconds(L), the tree's per-depth acceptance
  // (any sibling accepted) in E: deep cuts when the deeper levels accept, shallow when not.
  for (double a : {0.1, 0.4, 0.7, 0.95}) {
    const std::vector<double> acc(3, a);
    int best = 1;
    for (int L = 2; L <= 3; ++L)
      if (expected_round_tokens(acc, L) / policy.round_seconds(L) >
          expected_round_tokens(acc, best) / policy.round_seconds(best))
        best = L;
    EXPECT_EQ(policy.choose(acc, 3), best) << "a " << a;
  }
  EXPECT_EQ(policy.choose(std::vector<double>{0.9, 0.05, 0.05}, 3), 1);
  // On this steep CPU-like curve even near-certain acceptance keeps the cut at depth 1 (1.33
  // tokens/s against 1.25 for the whole tree), which the loop above checks; a gentle curve (1%
  // per position) takes the whole tree.
  RoundCosts gentle = costs;
  for (int k = 1; k <= 16; ++k) gentle.verify[k - 1] = 1.0 + 0.01 * (k - 1);
  EXPECT_EQ(DraftLengthPolicy(gentle, 3).choose(std::vector<double>(3, 0.99), 3), 3);
  // Free verification (a GPU's flat curve up to 128 positions): the whole tree.
  RoundCosts flat = costs;
  flat.verify.assign(16, 1.0);
  flat.draft_step = 0.01;
  EXPECT_EQ(DraftLengthPolicy(flat, 3).choose(std::vector<double>(3, 0.5), 3), 3);
  // Costs for fewer positions than the cut's nodes are refused.
  RoundCosts short_costs = costs;
  short_costs.verify.resize(15);
  EXPECT_THROW(DraftLengthPolicy(short_costs, 3), std::exception);
  EXPECT_NO_THROW(DraftLengthPolicy(short_costs, 2));
}

TEST(DraftLength, TrackerEstimatesAndFollowsAChange) {
  AcceptanceTracker t(4, 0.9);
  // Nothing seen: the prior (0.5 at every depth).
  for (double a : t.estimate()) EXPECT_DOUBLE_EQ(a, 0.5);
  RoundCosts costs;
  for (int k = 1; k <= 5; ++k) costs.verify.push_back(1.0 + 0.15 * (k - 1));
  costs.draft_step = 0.05;
  const DraftLengthPolicy policy(costs, 4);
  // Every draft accepted for a while: the estimate approaches 1 and the depth grows to the cap.
  for (int r = 0; r < 30; ++r) t.observe(4, 4);
  for (double a : t.estimate()) EXPECT_GT(a, 0.9);
  EXPECT_EQ(policy.choose(t.estimate(), 4), 4);
  // Then every first draft rejected: depth 1's estimate falls and the policy drafts one token.
  for (int r = 0; r < 30; ++r) t.observe(4, 0);
  EXPECT_LT(t.estimate()[0], 0.1);
  EXPECT_EQ(policy.choose(t.estimate(), 4), 1);
  // A rejection at depth 1 verifies nothing deeper: depth 2's counts only decay.
  AcceptanceTracker u(2, 1.0);
  u.observe(2, 1);  // depth 1 accepted, depth 2 rejected
  u.observe(2, 0);  // depth 1 rejected
  EXPECT_DOUBLE_EQ(u.estimate()[0], (1 + 0.5) / (2 + 1));
  EXPECT_DOUBLE_EQ(u.estimate()[1], (0 + 0.5) / (1 + 1));
  u.reset();
  EXPECT_DOUBLE_EQ(u.estimate()[0], 0.5);
}

}  // namespace

// The Jacobi window model against a direct simulation of the chain it describes: a round starts
// with c carried drafts, accepts draft i with probability carried[i - 1] (i <= c) or fresh
// (i > c), and carries D - a drafts on after rejecting draft a + 1 (none after accepting all).
TEST(DraftLength, JacobiRoundTokensMatchesASimulation) {
  const std::vector<double> carried = {0.55, 0.75, 0.7, 0.8, 0.6, 0.9};
  const double fresh = 0.02;
  for (int D : {1, 2, 4, 6}) {
    std::mt19937_64 g(D);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    int c = 0;
    double tokens = 0.0;
    const int rounds = 400000;
    for (int r = 0; r < rounds; ++r) {
      int a = 0;
      while (a < D && u(g) < (a < c ? carried[std::min<size_t>(a, carried.size() - 1)] : fresh))
        ++a;
      tokens += a + 1;
      c = a < D ? D - a : 0;
    }
    EXPECT_NEAR(jacobi_round_tokens(carried, fresh, D), tokens / rounds, 0.01) << "D " << D;
  }
  // Closed forms: nothing accepted (1 token a round); every draft accepted once carried, fresh
  // never: the window alternates between all-carried (D + 1 tokens) and all-fresh (1 token).
  EXPECT_NEAR(jacobi_round_tokens(std::vector<double>(4, 0.0), 0.0, 4), 1.0, 1e-12);
  EXPECT_NEAR(jacobi_round_tokens(std::vector<double>(4, 1.0), 0.0, 4), (1.0 + 5.0) / 2, 1e-12);
}

// Carried and fresh drafts are counted apart; an image whose carried drafts are accepted and
// fresh ones not gets a window longer than the per-depth model would give it.
TEST(DraftLength, JacobiAcceptanceAndWindowChoice) {
  JacobiAcceptance t(6, 0.9);
  for (double a : t.carried()) EXPECT_DOUBLE_EQ(a, 0.5);
  EXPECT_DOUBLE_EQ(t.fresh(), 0.0);
  // 4 drafts, 2 carried, 3 accepted: depths 1-2 carried and accepted, 3 fresh and accepted, 4
  // fresh and rejected.
  t.observe(4, 2, 3);
  const auto c = t.carried();
  EXPECT_DOUBLE_EQ(c[0], (1.0 + 0.5) / 2.0);
  EXPECT_DOUBLE_EQ(t.fresh(), 1.0 / 3.0);
  // A window of carried drafts accepted 80% of the time, fresh ones never, verification 8% more
  // per position: the window's model picks a longer window than the per-depth model.
  JacobiAcceptance w(12, 0.9);
  AcceptanceTracker per_depth(12, 0.9);
  std::mt19937_64 g(3);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  RoundCosts costs;
  for (int k = 1; k <= 13; ++k) costs.verify.push_back(1.0 + 0.08 * (k - 1));
  const DraftLengthPolicy policy(costs, 12);
  int D = 3, carried = 0;
  for (int r = 0; r < 300; ++r) {
    D = policy.choose_jacobi(w, 12, D);
    int a = 0;
    while (a < D && u(g) < (a < std::min(carried, D) ? 0.8 : 0.0)) ++a;
    w.observe(D, std::min(carried, D), a);
    per_depth.observe(D, a);
    carried = a < D ? D - a : 0;
  }
  const int jacobi_choice = policy.choose_jacobi(w, 12, D);
  EXPECT_GE(jacobi_choice, 4);
  EXPECT_GT(jacobi_choice, policy.choose(per_depth.estimate(), 12));
  // The model's choice is its argmax within 2 of the hint.
  for (int L = std::max(1, D - 2); L <= std::min(12, D + 2); ++L)
    EXPECT_GE(jacobi_round_tokens(w.carried(), w.fresh(), jacobi_choice) /
                  policy.round_seconds(jacobi_choice),
              jacobi_round_tokens(w.carried(), w.fresh(), L) / policy.round_seconds(L) - 1e-12);
}

// ---- the policy as the loop drives it: start, then choose and observe per round ---------------
//
// The depth sequences below were worked out from the rules in draft_length.h (the prior 0.5, the
// decayed counts, the argmax of tokens per second; for windows the stationary chain of
// jacobi_round_tokens) by a separate implementation, not by running this one. E.g. from the prior,
// E[tokens(L)] = 2 - 0.5^L, and at verify[L] = 1 + 0.3 L, draft_step 0.1, one draft beats two
// (1.5 / 1.4 = 1.071 against 1.75 / 1.7 = 1.029).

namespace {

RoundCosts linear_costs(int max_depth, double per_position, double draft_step) {
  RoundCosts c;
  for (int k = 1; k <= max_depth + 1; ++k) c.verify.push_back(1.0 + per_position * (k - 1));
  c.draft_step = draft_step;
  return c;
}

// The depths a policy chooses for one image over `rounds` rounds, capped at `cap`: round r drafts
// d tokens, the first c of them carried over (the drafts the last round left unverified; always
// 0 for a draft model), and accepts accepted(r, d, c) of them.
std::vector<int> scripted_depths(const DraftLengthPolicy& policy, int cap, int rounds,
                                 const std::function<int(int, int, int)>& accepted, int hold = 1) {
  ImageAcceptance image = policy.start();
  std::vector<int> depths;
  int carried = 0;
  for (int r = 0; r < rounds; ++r) {
    const int d = hold == 1 ? policy.choose(image, cap) : policy.choose_held(image, cap, hold);
    const int c = std::min(carried, d), a = accepted(r, d, c);
    policy.observe(image, d, c, a);
    carried = a < d ? d - a : 0;
    depths.push_back(d);
  }
  return depths;
}

// All of the first n rounds' drafts accepted, none after.
std::function<int(int, int, int)> all_then_none(int n) {
  return [n](int r, int d, int) { return r < n ? d : 0; };
}

std::vector<int> repeated(std::vector<int> head, int value, int times, std::vector<int> tail = {}) {
  head.insert(head.end(), times, value);
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

// A draft model's rounds: everything accepted, then nothing. The depth climbs to the cap as the
// acceptance is seen and falls back to 1 once the rejections outweigh the decayed history.
TEST(DraftLengthPolicyRounds, DraftModelClimbsToTheCapAndFallsToOne) {
  const DraftLengthPolicy policy(linear_costs(8, 0.3, 0.1), 8);
  EXPECT_EQ(policy.start().depth, 1);  // the prior alone: one draft (above)
  EXPECT_EQ(scripted_depths(policy, 8, 18, all_then_none(6)),
            repeated({1, 2, 4}, 8, 7, {1, 1, 1, 1, 1, 1, 1, 1}));
  // Cheaper verification: the prior drafts 2, the first accepted round 6; a longer history takes
  // longer to forget.
  const DraftLengthPolicy cheap(linear_costs(8, 0.12, 0.04), 8);
  EXPECT_EQ(cheap.start().depth, 2);
  EXPECT_EQ(scripted_depths(cheap, 8, 18, all_then_none(6)), repeated({2, 6}, 8, 13, {2, 1, 1}));
  // Nothing ever accepted: one draft from the second round on.
  EXPECT_EQ(scripted_depths(cheap, 8, 6, all_then_none(0)), repeated({2}, 1, 5));
  // A cap below the policy's choice binds.
  EXPECT_EQ(scripted_depths(cheap, 3, 4, all_then_none(4)), repeated({2}, 3, 3));
}

// A depth held for spans of rounds (choose_held, the device loop's bursts under auto): chosen at
// each span's first round from every round before it (those held observed all the same). A
// choice that repeats the last doubles the span, up to the hold; one that differs starts again at
// a round, so that an image's first rounds, on the prior, and a change of acceptance are followed
// as closely as with a choice every round. A span of s ends where the image's round count reaches
// a multiple of s. Held for one round it is the choice of every round.
TEST(DraftLengthPolicyRounds, AHeldDepthIsChosenAtEachSpansStart) {
  const DraftLengthPolicy policy(linear_costs(8, 0.3, 0.1), 8);
  EXPECT_EQ(scripted_depths(policy, 8, 18, all_then_none(6), 1),
            scripted_depths(policy, 8, 18, all_then_none(6)));
  // Nothing observed: the prior's depth, chosen at rounds 0, 1, 2, 4 and 8 (spans 1, 2, 4, 4, 4;
  // the span of 2 from round 1 and the first of 4 from round 2 end at round 2's and 4's
  // multiples).
  ImageAcceptance image = policy.start();
  std::vector<int> spans, chosen_at;
  for (int r = 0; r < 12; ++r) {
    const int held = image.held;
    EXPECT_EQ(policy.choose_held(image, 8, 4), 1) << "round " << r;
    if (held == 0) spans.push_back(image.span), chosen_at.push_back(r);
  }
  EXPECT_EQ(spans, (std::vector<int>{1, 2, 4, 4, 4}));
  EXPECT_EQ(chosen_at, (std::vector<int>{0, 1, 2, 4, 8}));
  // Acceptance seen in a span's rounds changes the next choice, which starts a span of one.
  for (int r = 0; r < 6; ++r) policy.observe(image, 1, 0, 1);
  EXPECT_EQ(image.held, 0);
  ImageAcceptance copy = image;
  const int deeper = policy.choose(copy, 8);
  EXPECT_GT(deeper, 1);
  EXPECT_EQ(policy.choose_held(image, 8, 4), deeper);
  EXPECT_EQ(image.span, 1);
  // The image's end caps a held depth, and a round with nothing to draft draws none.
  EXPECT_EQ(policy.choose_held(image, 8, 4), deeper);  // chosen again: a span of 2
  EXPECT_EQ(image.span, 2);
  EXPECT_EQ(policy.choose_held(image, 1, 4), 1);
  EXPECT_EQ(policy.choose_held(image, 0, 4), 0);
  // Scripted: all accepted, then nothing; held or not, the depths climb and fall back to 1, held
  // only within spans (a depth changes only where a span starts).
  const std::vector<int> held = scripted_depths(policy, 8, 30, all_then_none(10), 8);
  EXPECT_EQ(held.front(), 1);
  EXPECT_EQ(*std::max_element(held.begin(), held.end()), 8);
  EXPECT_EQ(held.back(), 1);
}

// Spans end on their multiples: two images of a batch that started together, one whose
// acceptance changes (its choices restart at spans of one) and one whose does not, hold their
// top spans over the same rounds, so a burst, which ends where the first image's span does, runs
// the whole span. Every span, short or long, is a power of two (the largest within the hold at
// most: 8 of 8, 4 of 5, 16 of 24) and ends at a round r with (r + 1) % span == 0.
TEST(DraftLengthPolicyRounds, HeldSpansEndTogetherAcrossImages) {
  const DraftLengthPolicy policy(linear_costs(8, 0.3, 0.1), 8);
  constexpr int kRounds = 160;
  for (const auto [hold, top] : {std::pair{8, 8}, std::pair{5, 4}, std::pair{24, 16}}) {
    SCOPED_TRACE("hold " + std::to_string(hold));
    ImageAcceptance steady = policy.start(), changing = policy.start();
    int both_top = 0, top_ends_apart = 0, longest = 0;
    std::vector<int> steady_choices;
    for (int r = 0; r < kRounds; ++r) {
      for (ImageAcceptance* im : {&steady, &changing}) {
        const int held_before = im->held;
        const int d = policy.choose_held(*im, 8, hold);
        if (held_before == 0) {
          // A new span: its last round is r + held.
          EXPECT_EQ((r + im->held + 1) % im->span, 0) << "round " << r << " span " << im->span;
          EXPECT_EQ(im->span & (im->span - 1), 0) << "a span of " << im->span;
          longest = std::max(longest, im->span);
          if (im == &steady) steady_choices.push_back(r);
        }
        // The changing image accepts everything for 20 rounds, then nothing for 20, and so on.
        const bool accept = im == &steady || (r / 20) % 2 == 0;
        policy.observe(*im, d, 0, accept ? d : 0);
      }
      if (steady.span == top && changing.span == top) {
        ++both_top;
        top_ends_apart += steady.held != changing.held;
      }
    }
    EXPECT_EQ(longest, top);
    EXPECT_GT(both_top, 20) << "rounds where both images hold their top span";
    EXPECT_EQ(top_ends_apart, 0) << "top spans that end at different rounds";
    // Once its depth settles, the steady image chooses every top-th round, on the multiples.
    ASSERT_GE(steady_choices.size(), 6u);
    for (size_t i = steady_choices.size() - 5; i < steady_choices.size(); ++i)
      EXPECT_EQ(steady_choices[i], kRounds - top * static_cast<int>(steady_choices.size() - i));
  }
}

// A Jacobi window: its fresh positions hold random tokens (accepted with probability ~1/V), so
// "everything accepted" is every carried draft accepted and the first fresh one rejected (the
// whole window when all of it was carried). The window grows by at most 2 a round (the policy's
// local search) to the cap, stays there while the decayed history (0.98 a round) still favours
// it, and shrinks to 1 when nothing is accepted.
TEST(DraftLengthPolicyRounds, JacobiWindowClimbsToTheCapAndFallsToOne) {
  const DraftLengthPolicy policy(linear_costs(12, 0.08, 0.0), 12, /*carries_drafts=*/true);
  EXPECT_EQ(policy.start().depth, 3);
  auto carried_then_none = [](int n) { return [n](int r, int, int c) { return r < n ? c : 0; }; };
  EXPECT_EQ(scripted_depths(policy, 12, 60, carried_then_none(10)),
            repeated({3, 3, 5, 7, 9, 11}, 12, 44, {10, 8, 6, 4, 2, 1, 1, 1, 1, 1}));
  EXPECT_EQ(scripted_depths(policy, 12, 8, carried_then_none(0)), repeated({3, 3}, 1, 6));
  EXPECT_EQ(scripted_depths(policy, 5, 8, carried_then_none(8)), repeated({3, 3}, 5, 6));
}

// A dynamic tree's costs: candidates down to depth d (top_k 3, total 10), rows of its draft
// forwards (1, then the frontier of 3), verification linear in the positions.
RoundCosts valued_costs(double per_position) {
  RoundCosts c = linear_costs(10, per_position, 0.1);
  c.tree_nodes = {3, 10, 10};
  c.tree_rows = {1, 3, 3};
  c.valued = true;
  return c;
}

// The node budget of a dynamic tree (EAGLE-2's values, issue 41): the count n with the most
// expected tokens per second, (1 + c sum of the best n values) / (drafting + verifying 1 + n).
TEST(DraftLength, NodeBudgetKeepsTheNodesThatPayForThemselves) {
  const std::vector<double> values = {0.9, 0.8, 0.5, 0.3, 0.2, 0.11, 0.05, 0.01};
  for (double per_position : {0.0, 0.05, 0.3, 1.0}) {
    SCOPED_TRACE(per_position);
    const RoundCosts costs = valued_costs(per_position);
    const DraftLengthPolicy policy(costs, 3);
    const ImageAcceptance image = policy.start();
    const double draft = policy.draft_seconds(2);
    int best = 0;
    double best_rate = -1.0, sum = 0.0;
    for (int n = 1; n <= static_cast<int>(values.size()); ++n) {
      sum += values[n - 1];
      const double rate = (1.0 + sum) / (draft + costs.verify[n]);
      if (rate > best_rate + 1e-15) {
        best_rate = rate;
        best = n;
      }
    }
    EXPECT_EQ(policy.choose_nodes(image, 2, values), best);
    // Free verification keeps every node with a value; at a full forward per node, few pay.
    if (per_position == 0.0) {
      EXPECT_EQ(best, 8);
    }
    if (per_position == 1.0) {
      EXPECT_LE(best, 2);
    }
  }
  // A drafter whose values overstate acceptance (nothing accepted of a predicted 3 per round)
  // is taken at the observed rate: fewer nodes; one that understates it, more.
  const DraftLengthPolicy policy(valued_costs(0.05), 3);
  ImageAcceptance over = policy.start(), under = policy.start();
  const int plain = policy.choose_nodes(over, 2, values);
  for (int r = 0; r < 20; ++r) {
    over.depth = under.depth = 2;
    policy.observe(over, 2, 0, 0, 5, 3.0);
    policy.observe(under, 2, 0, 2, 5, 0.5);
  }
  EXPECT_LT(over.values.ratio(), 0.1);
  EXPECT_GT(under.values.ratio(), 2.0);
  EXPECT_LT(policy.choose_nodes(over, 2, values), plain);
  EXPECT_GT(policy.choose_nodes(under, 2, values), plain);
  // Never more than were measured (11 calibrated positions: the root and 10 nodes), never none.
  const std::vector<double> many(20, 1.0);
  EXPECT_EQ(policy.choose_nodes(under, 2, many), 10);
  EXPECT_EQ(policy.choose_nodes(over, 2, std::vector<double>{1e-9}), 1);
}

// The depth of a dynamic tree's round is chosen with the nodes the image's past rounds of each
// depth kept (a chain's L before any): trees that stay small make depth cheap, trees that keep
// many nodes make it dear.
TEST(DraftLength, DynamicTreeDepthReadsTheNodesKept) {
  const DraftLengthPolicy policy(valued_costs(0.3), 3);
  ImageAcceptance image = policy.start();
  EXPECT_DOUBLE_EQ(image.kept.mean(2), 2.0);
  // Every round accepts all it drafts: deep rounds pay while they stay chain-sized.
  ImageAcceptance small = image, wide = image;
  for (int r = 0; r < 15; ++r) {
    const int ds = policy.choose(small, 3), dw = policy.choose(wide, 3);
    policy.observe(small, ds, 0, ds, ds, 1.0 * ds);
    policy.observe(wide, dw, 0, dw, 10, 1.0 * dw);
  }
  EXPECT_NEAR(small.kept.mean(3), 3.0, 1e-12);
  EXPECT_EQ(policy.choose(small, 3), 3);
  EXPECT_GT(wide.kept.mean(wide.depth), 5.0);
  EXPECT_LT(policy.choose(wide, 3), 3);
}

}  // namespace
