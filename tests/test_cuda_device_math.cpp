// The scalar math the CUDA kernels share with the host (src/tensor/cuda/device_math.h), checked
// on the CPU: 16-bit decoding against the CPU backend's conversion, the rope rotation, and the
// split-key softmax merge against a direct softmax.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/cuda/device_math.h"
#include "tensor/dtype.h"
#include "tensor/tree_mask.h"

namespace tessera {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

void expect_decodes_as_cpu(DType dt, float (*decode)(uint16_t)) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> ref(all.size());
  convert_to_f32(dt, all.data(), ref.data(), all.size());
  for (uint32_t i = 0; i < all.size(); ++i) {
    const float got = decode(all[i]);
    if (std::isnan(ref[i])) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << i;
    } else {
      EXPECT_EQ(bits(got), bits(ref[i])) << std::hex << i;  // exact, signed zeros included
    }
  }
}

TEST(CudaDeviceMath, Bf16DecodesEveryPatternAsTheCpu) {
  expect_decodes_as_cpu(DType::BF16, cuda::bf16_to_f32);
}

TEST(CudaDeviceMath, F16DecodesEveryPatternAsTheCpu) {
  expect_decodes_as_cpu(DType::F16, cuda::f16_to_f32);
}

TEST(CudaDeviceMath, RopePairRotatesLikeTheCpuRope) {
  float x0 = 0.75f, x1 = -1.5f;
  const float angle = 0.3f, c = std::cos(angle), s = std::sin(angle);
  cuda::rope_pair(x0, x1, c, s);
  EXPECT_EQ(x0, 0.75f * c - -1.5f * s);
  EXPECT_EQ(x1, -1.5f * c + 0.75f * s);
  EXPECT_NEAR(x0 * x0 + x1 * x1, 0.75f * 0.75f + 1.5f * 1.5f, 1e-5f);  // a rotation
}

// Softmax-weighted sum of `v` over `scores` (-inf = masked), computed directly and by slices
// merged in order as attention_combine_kernel does.
TEST(CudaDeviceMath, SoftmaxMergeOfSlicesEqualsDirectSoftmax) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const int n = 700;
  std::vector<float> sc(n), v(n);
  for (int i = 0; i < n; ++i) {
    sc[i] = nd(rng);
    v[i] = nd(rng);
  }
  for (int i = 256; i < 512; ++i) sc[i] = -INFINITY;  // one slice wholly masked
  float mx = -INFINITY;
  for (float s : sc) mx = std::max(mx, s);
  double num = 0, den = 0;
  for (int i = 0; i < n; ++i) {
    const double p = std::exp(static_cast<double>(sc[i]) - mx);
    num += p * v[i];
    den += p;
  }
  cuda::SoftmaxPartial run{-INFINITY, 0.0f};
  float acc = 0.0f;
  for (int s0 = 0; s0 < n; s0 += 256) {
    const int s1 = std::min(n, s0 + 256);
    float m = -INFINITY;
    for (int i = s0; i < s1; ++i) m = std::max(m, sc[i]);
    float l = 0.0f, a = 0.0f;
    for (int i = s0; i < s1; ++i) {
      const float p = m == -INFINITY ? 0.0f : std::exp(sc[i] - m);
      l += p;
      a += p * v[i];
    }
    const cuda::SoftmaxMerge mg = cuda::softmax_merge(run, {m, l});
    ASSERT_FALSE(std::isnan(mg.scale_a) || std::isnan(mg.scale_b));
    acc = acc * mg.scale_a + a * mg.scale_b;
    run = mg.r;
  }
  EXPECT_EQ(run.m, mx);
  EXPECT_NEAR(acc / run.l, num / den, 1e-5 * std::max(1.0, std::abs(num / den)));
}

TEST(CudaDeviceMath, SoftmaxMergeOfEmptySlicesStaysEmpty) {
  const cuda::SoftmaxMerge mg = cuda::softmax_merge({-INFINITY, 0.0f}, {-INFINITY, 0.0f});
  EXPECT_EQ(mg.r.m, -INFINITY);
  EXPECT_EQ(mg.r.l, 0.0f);
  EXPECT_EQ(mg.scale_a, 0.0f);
  EXPECT_EQ(mg.scale_b, 0.0f);
  const cuda::SoftmaxMerge one = cuda::softmax_merge({-INFINITY, 0.0f}, {2.0f, 3.0f});
  EXPECT_EQ(one.r.m, 2.0f);
  EXPECT_EQ(one.r.l, 3.0f);
  EXPECT_EQ(one.scale_b, 1.0f);
}

// tree_mask.h's entry, shared by the CPU backend and the CUDA kernel: the tree {0: root's child,
// 1: under 0, 2: root's child, 3: under 1} after 5 cached slots.
TEST(TreeMaskEntry, AncestorsAndSelfAfterThePast) {
  const int32_t parents[] = {-1, 0, -1, 1};
  const uint8_t want[4][4] = {{1, 0, 0, 0}, {1, 1, 0, 0}, {0, 0, 1, 0}, {1, 1, 0, 1}};
  for (int j = 0; j < 4; ++j) {
    for (int key = 0; key < 5; ++key) EXPECT_EQ(tree_mask_entry(parents, 5, j, key), 1);
    for (int a = 0; a < 4; ++a)
      EXPECT_EQ(tree_mask_entry(parents, 5, j, 5 + a), want[j][a]) << j << " " << a;
    EXPECT_EQ(tree_mask_entry(parents, 5, j, 9), 0);  // beyond the new rows
  }
}

// A malformed parents array (a row its own parent, a parent after its child) ends the walk: no
// endless loop on a device, no read past row j.
TEST(TreeMaskEntry, MalformedParentsEndTheWalk) {
  const int32_t self_loop[] = {-1, 1, 1};
  EXPECT_EQ(tree_mask_entry(self_loop, 0, 2, 0), 0);
  const int32_t forward[] = {-1, 7, 0};
  EXPECT_EQ(tree_mask_entry(forward, 0, 1, 0), 0);
  EXPECT_EQ(tree_mask_entry(forward, 0, 2, 0), 1);
}

}  // namespace
}  // namespace tessera
