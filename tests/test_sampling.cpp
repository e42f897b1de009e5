// Sampler semantics (LlamaGen / HF order and boundary rules) and the counter-based RNG.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "sampling/rng.h"
#include "sampling/sampler.h"

using namespace tessera;

namespace {
std::vector<int> kept(const std::vector<float>& l) {
  std::vector<int> k;
  for (size_t i = 0; i < l.size(); ++i)
    if (l[i] != -INFINITY) k.push_back(static_cast<int>(i));
  return k;
}
}  // namespace

TEST(SamplerTopK, KeepsTiesAtTheThreshold) {
  std::vector<float> l = {1, 3, 3, 2, 3};
  filter_top_k_top_p(l, 2, 1.0f);  // the 2nd largest value is 3: all three 3s survive
  EXPECT_EQ(kept(l), (std::vector<int>{1, 2, 4}));
  std::vector<float> m = {1, 3, 2, 2, 0};
  filter_top_k_top_p(m, 2, 1.0f);  // threshold 2: both 2s survive
  EXPECT_EQ(kept(m), (std::vector<int>{1, 2, 3}));
  std::vector<float> n = {1, 3, 2};
  filter_top_k_top_p(n, 10, 1.0f);  // k > V keeps everything
  EXPECT_EQ(kept(n), (std::vector<int>{0, 1, 2}));
  // k = V keeps everything too, values untouched (-inf entries stay -inf).
  const std::vector<float> o = {1, -INFINITY, 2, 2, -5};
  std::vector<float> p = o;
  filter_top_k_top_p(p, 5, 1.0f);
  EXPECT_EQ(p, o);
  std::vector<float> q = {1, 3, 2, 2, -5};
  filter_top_k_top_p(q, 4, 1.0f);  // k = V - 1 drops the smallest
  EXPECT_EQ(kept(q), (std::vector<int>{0, 1, 2, 3}));
}

TEST(SamplerTopP, KeepsTheFirstTokenCrossingTheThreshold) {
  // probabilities 0.5, 0.25, 0.125, 0.125 (in shuffled vocabulary order)
  const float ln2 = std::log(2.0f);
  const std::vector<float> base = {-2 * ln2, 0.0f, -ln2, -2 * ln2};
  auto run = [&](float p) {
    std::vector<float> l = base;
    filter_top_k_top_p(l, 0, p);
    return kept(l);
  };
  // Cumulative mass in sorted order: 0.5, 0.75, 0.875, 1. A token is removed when the mass
  // before it already exceeds top_p (HF: remove cum > p, shifted right by one).
  EXPECT_EQ(run(0.4f), (std::vector<int>{1}));           // top-1 always kept
  EXPECT_EQ(run(0.5001f), (std::vector<int>{1, 2}));     // 0.5 <= p: the 0.25 token is kept
  EXPECT_EQ(run(0.7499f), (std::vector<int>{1, 2}));     // 0.75 > p: the 0.125 tokens go
  EXPECT_EQ(run(0.7501f), (std::vector<int>{0, 1, 2}));  // tie broken by index: token 0 first
  EXPECT_EQ(run(0.9f), (std::vector<int>{0, 1, 2, 3}));
}

TEST(SamplerTopP, AppliesAfterTopK) {
  std::vector<float> l = {0.0f, 0.0f, 0.0f, 5.0f};
  filter_top_k_top_p(l, 1, 0.5f);
  EXPECT_EQ(kept(l), (std::vector<int>{3}));
}

TEST(TargetDistribution, GuidanceTemperatureAndGreedy) {
  const std::vector<float> cond = {1.0f, 2.0f, 0.0f}, uncond = {0.5f, 2.5f, 0.0f};
  SamplingParams p;
  p.cfg_scale = 3.0f;
  p.temperature = 2.0f;
  std::vector<float> probs(3);
  target_distribution(cond, uncond, p.cfg_scale, p, probs);
  // guided logits u + 3 (c - u) = {2, 1, 0}; / T = {1, 0.5, 0}
  const double z = std::exp(1.0) + std::exp(0.5) + 1.0;
  EXPECT_NEAR(probs[0], std::exp(1.0) / z, 1e-6);
  EXPECT_NEAR(probs[1], std::exp(0.5) / z, 1e-6);
  EXPECT_NEAR(probs[2], 1.0 / z, 1e-6);
  p.temperature = 0.0f;
  target_distribution(cond, uncond, p.cfg_scale, p, probs);
  EXPECT_EQ(probs, (std::vector<float>{1.0f, 0.0f, 0.0f}));
  // Without the unconditional half the cond logits are used as they are.
  p.temperature = 1.0f;
  target_distribution(cond, {}, 1.0f, p, probs);
  EXPECT_GT(probs[1], probs[0]);
}

TEST(TargetDistribution, CfgIntervalFollowsTheDecodeLoopIndex) {
  SamplingParams p;
  p.cfg_scale = 4.0f;
  p.cfg_interval = 5.0f;
  EXPECT_TRUE(p.guided(0));   // prefill token
  EXPECT_TRUE(p.guided(6));   // loop index 5 <= 5
  EXPECT_FALSE(p.guided(7));  // loop index 6 > 5
  p.cfg_interval = -1.0f;
  EXPECT_TRUE(p.guided(255));
  p.cfg_scale = 1.0f;
  EXPECT_FALSE(p.guided(0));
}

TEST(SampleIndex, InverseCdfSkipsZeroMass) {
  const std::vector<float> probs = {0.25f, 0.0f, 0.75f};
  EXPECT_EQ(sample_index(probs, 0.0), 0);
  EXPECT_EQ(sample_index(probs, 0.2), 0);
  EXPECT_EQ(sample_index(probs, 0.25), 2);
  EXPECT_EQ(sample_index(probs, 0.999999), 2);
  EXPECT_EQ(argmax(std::vector<float>{1, 3, 3}), 1);  // first maximum
}

TEST(Philox, MatchesRandom123KnownAnswers) {
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(CounterRng, DrawsArePureFunctionsOfTheirCoordinates) {
  const CounterRng a(42, 7), b(42, 7), c(43, 7), d(42, 8);
  EXPECT_EQ(a.uniform(3), b.uniform(3));
  EXPECT_NE(a.uniform(3), a.uniform(4));
  EXPECT_NE(a.uniform(3), a.uniform(3, 1));
  EXPECT_NE(a.uniform(3), c.uniform(3));
  EXPECT_NE(a.uniform(3), d.uniform(3));
}

TEST(CounterRng, SamplesMatchTheDistribution) {
  // Chi-square goodness of fit, 5 categories (4 dof), 200k draws; the critical value at
  // significance 1e-4 is 23.5. Fixed seed: the test is deterministic.
  const std::vector<float> probs = {0.1f, 0.2f, 0.3f, 0.15f, 0.25f};
  const int n = 200000;
  std::vector<int> counts(5, 0);
  const CounterRng rng(2024, 0);
  for (int i = 0; i < n; ++i) counts[sample_index(probs, rng.uniform(static_cast<uint32_t>(i)))]++;
  double chi2 = 0.0;
  for (int k = 0; k < 5; ++k) {
    const double e = n * probs[k];
    chi2 += (counts[k] - e) * (counts[k] - e) / e;
  }
  EXPECT_LT(chi2, 23.5);
  double mean = 0.0;
  for (int i = 0; i < n; ++i) mean += rng.uniform(static_cast<uint32_t>(i), 9);
  EXPECT_NEAR(mean / n, 0.5, 0.003);  // 4.6 standard errors
}
