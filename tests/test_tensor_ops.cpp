// Tensor layer: dtype conversions, the CPU linear kernel (accuracy and reproducibility across
// batch sizes and thread counts), attention over a multi-sequence cache.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <string>

#include "tensor/backend.h"
#include "tensor/cpu/cpu_backend.h"

using namespace tessera;

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (down).
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
  // 1 + 3*2^-8 is halfway: rounds up to the even mantissa.
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);
  EXPECT_FLOAT_EQ(bf16_to_f32(0x3f80), 1.0f);
}

TEST(DType, F16RoundTripsAndRounds) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.333251953125f})
    EXPECT_EQ(f16_to_f32(f32_to_f16(v)), v) << v;
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // overflows to inf
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048.0f), 0x3c00);  // halfway: to even
}

namespace {
std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}
}  // namespace

class LinearKernel : public ::testing::TestWithParam<DType> {};

namespace {
void check_linear(DType wt, int64_t M, int64_t K, int64_t N) {
  auto x = randn(M * K, 1);
  auto wf = randn(N * K, 2, 0.1f);
  auto bias = randn(N, 3);
  std::vector<uint16_t> w16(N * K);
  const void* w = wf.data();
  if (wt != DType::F32) {
    convert_from_f32(wf.data(), wt, w16.data(), wf.size());
    convert_to_f32(wt, w16.data(), wf.data(), wf.size());  // the values the kernel sees
    w = w16.data();
  }
  std::vector<float> y(M * N);
  cpu::linear(x.data(), M, K, w, wt, N, bias.data(), y.data());
  // The AMX path multiplies bf16 weights by bf16-rounded activations (linear_amx.cpp).
  const bool round_x = wt == DType::BF16 && cpu_backend().linear_rounds_bf16_activations();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double ref = bias[n];
      for (int64_t k = 0; k < K; ++k) {
        const float xk = round_x ? bf16_to_f32(f32_to_bf16(x[m * K + k])) : x[m * K + k];
        ref += static_cast<double>(xk) * wf[n * K + k];
      }
      EXPECT_NEAR(y[m * N + n], ref, 1e-4 * (1 + std::fabs(ref)));
    }
  // Each row alone, and with one thread, gives bit-identical results.
  const int saved = cpu_threads();
  for (int threads : {1, 2}) {
    set_cpu_threads(threads);
    for (int64_t m = 0; m < M; ++m) {
      std::vector<float> row(N);
      cpu::linear(x.data() + m * K, 1, K, w, wt, N, bias.data(), row.data());
      for (int64_t n = 0; n < N; ++n) ASSERT_EQ(row[n], y[m * N + n]);
    }
  }
  set_cpu_threads(saved);
}

}  // namespace

TEST_P(LinearKernel, MatchesDoublePrecisionReferenceAndIsBatchInvariant) {
  // Odd sizes exercise every tail path: rows and columns outside whole dot_block tiles, and K % W
  // chunks; the second shape has more rows and a K with up to three K % 4W chunks.
  for (const auto& [M, K, N] :
       {std::array<int64_t, 3>{7, 203, 37}, std::array<int64_t, 3>{13, 245, 29}}) {
    SCOPED_TRACE("M " + std::to_string(M) + " K " + std::to_string(K) + " N " + std::to_string(N));
    check_linear(GetParam(), M, K, N);
  }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, LinearKernel,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16));

// MAR's exact GELU: close to the double-precision formula (torch.nn.GELU computes the same in
// float), and a value's result does not depend on where it sits in the tensor (the SIMD erf is
// used for every element, tail included): the batch invariance MAR's verification relies on.
TEST(GeluErf, MatchesDoubleReferenceAndIsPositionIndependent) {
  const int64_t n = 16 * 5000 + 7;  // parallel (> 65536 elements), with a padded tail
  auto x = randn(n, 5, 3.0f);
  Backend& be = cpu_backend();
  Tensor t = be.upload(x.data(), DType::F32, {n});
  be.gelu_erf(t);
  const float* y = t.ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i], ref = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    ASSERT_NEAR(y[i], ref, 2e-6 * (1.0 + std::fabs(ref))) << "x = " << v;
  }
  for (int64_t shift : {1, 5, 9, 15}) {  // every value lands elsewhere in its block, or in the tail
    std::vector<float> xs(n + shift, 0.25f);
    std::copy(x.begin(), x.end(), xs.begin() + shift);
    Tensor u = be.upload(xs.data(), DType::F32, {n + shift});
    be.gelu_erf(u);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(u.ptr<float>()[i + shift], y[i]) << "shift " << shift;
  }
}

TEST(Swiglu, MatchesDoubleReferenceAndIsPositionIndependent) {
  const int64_t n = 16 * 300 + 7;  // parallel (>= 4096 elements), with a padded tail
  auto g = randn(n, 6, 3.0f), u = randn(n, 7, 1.0f);
  Backend& be = cpu_backend();
  Tensor y = be.empty(DType::F32, {n});
  be.swiglu(be.upload(g.data(), DType::F32, {n}), be.upload(u.data(), DType::F32, {n}), y);
  for (int64_t i = 0; i < n; ++i) {
    const double ref = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
    ASSERT_NEAR(y.ptr<float>()[i], ref, 2e-6 * (1.0 + std::fabs(ref))) << "g = " << g[i];
  }
  for (int64_t shift : {1, 5, 9, 15}) {  // every value lands elsewhere in its block, or in the tail
    std::vector<float> gs(n + shift, 0.25f), us(n + shift, 0.5f);
    std::copy(g.begin(), g.end(), gs.begin() + shift);
    std::copy(u.begin(), u.end(), us.begin() + shift);
    Tensor ys = be.empty(DType::F32, {n + shift});
    be.swiglu(be.upload(gs.data(), DType::F32, {n + shift}),
              be.upload(us.data(), DType::F32, {n + shift}), ys);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(ys.ptr<float>()[i + shift], y.ptr<float>()[i]) << "shift " << shift;
  }
}

TEST(Silu, MatchesDoubleReferenceAndIsPositionIndependent) {
  const int64_t n = 16 * 300 + 9;  // parallel (>= 4096 elements), with a padded tail
  auto x = randn(n, 8, 4.0f);
  Backend& be = cpu_backend();
  Tensor y = be.upload(x.data(), DType::F32, {n});
  be.silu(y);
  for (int64_t i = 0; i < n; ++i) {
    const double ref = x[i] / (1.0 + std::exp(-static_cast<double>(x[i])));
    ASSERT_NEAR(y.ptr<float>()[i], ref, 2e-6 * (1.0 + std::fabs(ref))) << "x = " << x[i];
  }
  for (int64_t shift : {1, 5, 9, 15}) {  // every value lands elsewhere in its block, or in the tail
    std::vector<float> xs(n + shift, 0.25f);
    std::copy(x.begin(), x.end(), xs.begin() + shift);
    Tensor ys = be.upload(xs.data(), DType::F32, {n + shift});
    be.silu(ys);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(ys.ptr<float>()[i + shift], y.ptr<float>()[i]) << "shift " << shift;
  }
}

TEST(Attention, MultiSequenceCacheMatchesDirectSoftmax) {
  Backend& be = cpu_backend();
  const int H = 2, hd = 4, cap = 8, kv = H * hd;
  const int width = 3 * kv;
  Tensor kc = be.zeros(DType::F32, {2, H, cap, hd}), vc = be.zeros(DType::F32, {2, H, cap, hd});
  // Sequence 1 gets 3 tokens, then 2 more in one call; check the last call's outputs.
  auto a = randn(3 * width, 4), b = randn(2 * width, 5);
  const int32_t seq1 = 1, past0 = 0, past3 = 3;
  AttentionBatch p1;
  p1.n_seq = 1;
  p1.n_new = 3;
  p1.seq = upload_ids(be, std::span(&seq1, 1));
  p1.past = upload_ids(be, std::span(&past0, 1));
  Tensor q1 = be.upload(a.data(), DType::F32, {3, width});
  Tensor o1 = be.empty(DType::F32, {3, kv});
  be.kv_store(q1, H, H, hd, p1, kc, vc);
  be.attention(q1, H, H, hd, p1, kc, vc, o1);
  AttentionBatch p2 = p1;
  p2.n_new = 2;
  p2.past = upload_ids(be, std::span(&past3, 1));
  Tensor q2 = be.upload(b.data(), DType::F32, {2, width});
  Tensor o2 = be.empty(DType::F32, {2, kv});
  be.kv_store(q2, H, H, hd, p2, kc, vc);
  be.attention(q2, H, H, hd, p2, kc, vc, o2);
  std::vector<float> all(a);
  all.insert(all.end(), b.begin(), b.end());
  for (int j = 0; j < 2; ++j)
    for (int h = 0; h < H; ++h) {
      const int row = 3 + j;
      std::vector<double> s(row + 1);
      double mx = -1e30;
      for (int t = 0; t <= row; ++t) {
        double d = 0;
        for (int e = 0; e < hd; ++e)
          d += all[row * width + h * hd + e] * all[t * width + kv + h * hd + e];
        s[t] = d / std::sqrt(static_cast<double>(hd));
        mx = std::max(mx, s[t]);
      }
      double z = 0;
      for (auto& v : s) z += (v = std::exp(v - mx));
      for (int e = 0; e < hd; ++e) {
        double ref = 0;
        for (int t = 0; t <= row; ++t) ref += s[t] / z * all[t * width + 2 * kv + h * hd + e];
        EXPECT_NEAR(o2.ptr<float>()[j * kv + h * hd + e], ref, 1e-5);
      }
    }
  // Sequence 0 was never written.
  for (int i = 0; i < cap * kv; ++i) ASSERT_EQ(kc.ptr<float>()[i], 0.0f);
}
