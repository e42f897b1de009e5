// The shared host/device sampling pieces (sampling/philox.h, sampling/sampling_rules.h) against
// the CPU sampler: the CUDA kernel (sampling/cuda/sample_kernels.cu) runs these rules with
// block-wide sums, so here the same steps run with serial sums and must reproduce the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "sampling/philox.h"
#include "sampling/rng.h"
#include "sampling/sampler.h"
#include "sampling/sampling_rules.h"

using namespace tessera;

namespace {

// The kernel's top-k then top-p steps with serial reductions: radix passes over 16-bin
// histograms, then the tie group's survivors in index order. Removed entries become -inf.
void radix_filter(std::vector<float>& l, int top_k, float top_p) {
  const int V = static_cast<int>(l.size());
  if (top_k > 0 && top_k < V) {
    uint32_t prefix = 0, k_left = static_cast<uint32_t>(top_k);
    for (int pass = 0; pass < kRadixPasses; ++pass) {
      uint32_t counts[kRadixBins] = {};
      for (float x : l) {
        const uint32_t key = float_order_key(x);
        if (radix_matches(key, prefix, pass)) ++counts[radix_digit(key, pass)];
      }
      prefix |= top_k_pick(counts, &k_left) << (32 - kRadixBits * (pass + 1));
    }
    for (float& x : l)
      if (float_order_key(x) < prefix) x = -INFINITY;
  }
  if (top_p < 1.0f) {
    float mx = -INFINITY;
    for (float x : l) mx = std::max(mx, x);
    std::vector<float> e(V);
    float total = 0.0f;
    for (int i = 0; i < V; ++i) total += (e[i] = l[i] == -INFINITY ? 0.0f : std::exp(l[i] - mx));
    const float budget = top_p * total;
    uint32_t prefix = 0, count_above = 0;
    float mass_above = 0.0f;
    for (int pass = 0; pass < kRadixPasses; ++pass) {
      uint32_t counts[kRadixBins] = {};
      float mass[kRadixBins] = {};
      for (int i = 0; i < V; ++i) {
        const uint32_t key = float_order_key(l[i]);
        if (l[i] == -INFINITY || !radix_matches(key, prefix, pass)) continue;
        ++counts[radix_digit(key, pass)];
        mass[radix_digit(key, pass)] += e[i];
      }
      prefix |= top_p_pick(counts, mass, budget, &mass_above, &count_above)
                << (32 - kRadixBits * (pass + 1));
    }
    uint32_t group = 0;
    float group_e = 0.0f;
    for (int i = 0; i < V; ++i)
      if (l[i] != -INFINITY && float_order_key(l[i]) == prefix) ++group, group_e = e[i];
    const uint32_t keep = top_p_group_keep(mass_above, count_above, group_e, group, budget);
    uint32_t rank = 0;
    for (float& x : l) {
      if (x == -INFINITY) continue;
      const uint32_t key = float_order_key(x);
      if (key < prefix || (key == prefix && rank++ >= keep)) x = -INFINITY;
    }
  }
}

// Logits drawn from a few values so that ties (and -0 next to +0) are common.
std::vector<float> tied_row(std::mt19937& g, int V) {
  std::uniform_int_distribution<int> pick(0, 7);
  std::normal_distribution<float> n(0.0f, 2.0f);
  const float values[8] = {n(g), n(g), n(g), n(g), 0.0f, -0.0f, n(g), n(g)};
  std::vector<float> l(V);
  for (float& x : l) x = pick(g) < 3 ? values[pick(g)] : n(g);
  return l;
}

}  // namespace

TEST(PhiloxShared, MatchesRandom123KnownAnswers) {
  // Random123's examples/kat_vectors, "philox4x32 10" lines (DEShawResearch/random123).
  struct Kat {
    Philox4x32Block ctr;
    uint32_t k0, k1;
    Philox4x32Block out;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Kat& k : kats) {
    const Philox4x32Block r = philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r.v[i], k.out.v[i]);
  }
}

TEST(PhiloxShared, CounterRngDrawsTheSharedUniform) {
  const uint64_t seed = 0x123456789abcdefull, image = 0x100000007ull;
  const CounterRng rng(seed, image);
  for (uint32_t t = 0; t < 50; ++t)
    for (uint32_t s : {0u, 1u, 0x30000000u}) {
      const double u = counter_uniform(seed, image, t, s);
      EXPECT_EQ(rng.uniform(t, s), u);
      EXPECT_GE(u, 0.0);
      EXPECT_LT(u, 1.0);
    }
}

TEST(SamplingRules, DrawInChunksEqualsSampleIndex) {
  // The kernel walks per-thread chunks from their exclusive prefix sums and takes the first hit
  // (else the last positive index): with exact chunk sums that is sample_index.
  std::mt19937 g(7);
  std::uniform_real_distribution<float> val(0.0f, 1.0f);
  for (int row = 0; row < 300; ++row) {
    const int V = 1 + static_cast<int>(g() % 700);
    std::vector<float> p(V);
    for (float& x : p) x = (g() % 3 == 0) ? 0.0f : val(g);
    if (row % 5 == 0) std::fill(p.begin() + V / 2, p.end(), 0.0f);  // zeros at the top
    if (std::all_of(p.begin(), p.end(), [](float x) { return x == 0.0f; })) p[0] = 1.0f;
    const int chunk = 1 + static_cast<int>(g() % 40);
    for (double u : {0.0, 0.5, double(val(g)), 0.9999999999999999, std::nextafter(1.0, 0.0)}) {
      double total = 0.0;
      for (float x : p) total += x;
      int hit = -1, last = -1;
      double cum = 0.0;
      for (int s = 0; s < V && hit < 0; s += chunk) {
        const int n = std::min(chunk, V - s);
        hit = draw_in_chunk(p.data() + s, n, s, cum, u * total, &last);
        for (int i = 0; i < n; ++i) cum += p[s + i] > 0.0f ? p[s + i] : 0.0f;
      }
      EXPECT_EQ(hit >= 0 ? hit : last, sample_index(p, u)) << "row " << row << " u " << u;
      EXPECT_EQ(draw_row(p.data(), V, u), sample_index(p, u));
    }
  }
  // A target the walk never exceeds (the kernel's tree-summed total can round above its prefix
  // sums): no hit, and the last positive index is the draw.
  const std::vector<float> top = {0.5f, 0.5f, 0.0f};
  int last = -1;
  EXPECT_EQ(draw_in_chunk(top.data(), 3, 0, 0.0, 1.0, &last), -1);
  EXPECT_EQ(last, 1);
}

TEST(SamplingRules, ArgmaxAndGuidanceMatchTheSampler) {
  const std::vector<float> v = {1.0f, 3.0f, -0.0f, 3.0f};
  EXPECT_EQ(argmax_row(v.data(), 4), argmax(v));
  EXPECT_TRUE(argmax_prefers(3.0f, 1, 3.0f, 3));
  EXPECT_FALSE(argmax_prefers(3.0f, 3, 3.0f, 1));
  EXPECT_TRUE(argmax_prefers(4.0f, 9, 3.0f, 1));
  EXPECT_FALSE(finite_logit(NAN));
  EXPECT_FALSE(finite_logit(-INFINITY));
  EXPECT_TRUE(finite_logit(-3e38f));
  for (float x : {-2.5f, 0.0f, 1e-40f, 3.0f, -INFINITY})
    EXPECT_EQ(float_from_order_key(float_order_key(x)), x);
  EXPECT_EQ(float_order_key(-0.0f), float_order_key(0.0f));
  EXPECT_LT(float_order_key(-1e-40f), float_order_key(0.0f));
  // The CPU distribution with guidance equals the shared combine then the CPU steps without it.
  std::mt19937 g(3);
  std::normal_distribution<float> n(0.0f, 3.0f);
  std::vector<float> c(97), u(97), l(97);
  for (int i = 0; i < 97; ++i) c[i] = n(g), u[i] = n(g), l[i] = guided_logit(c[i], u[i], 4.0f);
  SamplingParams p;
  p.cfg_scale = 4.0f;
  p.temperature = 0.7f;
  std::vector<float> a(97), b(97);
  target_distribution(c, u, 4.0f, p, a);
  target_distribution(l, {}, 1.0f, p, b);
  EXPECT_EQ(a, b);
}

TEST(SamplingRules, RadixTopKTopPEqualsFilterOnTiedRows) {
  std::mt19937 g(11);
  int compared = 0, boundary = 0;
  for (int row = 0; row < 2000; ++row) {
    const int V = 1 + static_cast<int>(g() % 300);
    const std::vector<float> l = tied_row(g, V);
    const int top_k = row % 4 == 0 ? 0 : 1 + static_cast<int>(g() % (V + 3));
    const float top_p = row % 3 == 0 ? 1.0f : std::uniform_real_distribution<float>(0.0f, 1.0f)(g);
    std::vector<float> want = l, got = l;
    filter_top_k_top_p(want, top_k, top_p);
    radix_filter(got, top_k, 1.0f);  // top-k alone: exact
    std::vector<float> want_k = l;
    filter_top_k_top_p(want_k, top_k, 1.0f);
    ASSERT_EQ(got, want_k) << "row " << row;
    radix_filter(got, 0, top_p);
    // Top-p sums in another order than the CPU's sorted running sum: a cut within float rounding
    // of top_p may fall one position apart. Such rows are counted, the others must match exactly.
    if (got != want) {
      ++boundary;
      continue;
    }
    ++compared;
  }
  EXPECT_LE(boundary, 4) << "mismatches beyond the rounding allowance";
  EXPECT_GE(compared, 1990);
}

TEST(SamplingRules, TopPCutKeepsTheFirstOfATieGroupByIndex) {
  // Four equal logits: each holds a quarter; top_p 0.5 keeps sorted positions 0..2 (mass before
  // position 2 is 0.5 <= 0.5), i.e. the first three indices.
  std::vector<float> l = {1.0f, 1.0f, 1.0f, 1.0f}, want = l;
  radix_filter(l, 0, 0.5f);
  filter_top_k_top_p(want, 0, 0.5f);
  EXPECT_EQ(l, want);
  EXPECT_EQ(l[3], -INFINITY);
  EXPECT_EQ(l[2], 1.0f);
}
