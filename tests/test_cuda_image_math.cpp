// The index and scalar math that the CUDA image/MAE kernels share with the host
// (src/tensor/cuda/image_math.h), checked on the CPU against CpuBackend's ops on small odd
// shapes: a GPU kernel built on these functions computes what the CPU backend computes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tensor/backend.h"
#include "tensor/cuda/image_math.h"

using namespace tessera;
using namespace tessera::cuda;

namespace {

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

Tensor up(const std::vector<float>& v, Shape s) {
  return cpu_backend().upload(v.data(), DType::F32, std::move(s));
}

}  // namespace

// im2col through im2col_source, then a plain host matmul plus bias, equals CpuBackend::conv2d.
TEST(CudaImageMath, Im2colMatmulEqualsCpuConv2d) {
  struct Case {
    int64_t B, C, H, W, O, k;
    int pad;
  };
  for (const Case cs : {Case{2, 3, 5, 7, 4, 3, 1}, Case{1, 5, 3, 6, 3, 1, 0},
                        Case{2, 2, 6, 5, 3, 3, 0}, Case{1, 3, 4, 3, 2, 1, 1}}) {
    const int64_t Ho = conv_out_size(cs.H, cs.k, cs.pad), Wo = conv_out_size(cs.W, cs.k, cs.pad);
    const int64_t ckk = cs.C * cs.k * cs.k, hw = Ho * Wo;
    const auto x = randn(cs.B * cs.C * cs.H * cs.W, 1), w = randn(cs.O * ckk, 2),
               bias = randn(cs.O, 3);
    Tensor y = cpu_backend().empty(DType::F32, {cs.B, cs.O, Ho, Wo});
    cpu_backend().conv2d(up(x, {cs.B, cs.C, cs.H, cs.W}), up(w, {cs.O, cs.C, cs.k, cs.k}),
                         up(bias, {cs.O}), cs.pad, y);
    const auto got = download_f32(cpu_backend(), y);
    for (int64_t b = 0; b < cs.B; ++b) {
      const float* xb = x.data() + b * cs.C * cs.H * cs.W;
      for (int64_t o = 0; o < cs.O; ++o)
        for (int64_t p = 0; p < hw; ++p) {
          double acc = bias[o];
          for (int64_t r = 0; r < ckk; ++r) {
            const int64_t src = im2col_source(r, p, cs.H, cs.W, cs.k, cs.k, cs.pad, Wo);
            if (src >= 0) acc += static_cast<double>(w[o * ckk + r]) * xb[src];
          }
          ASSERT_NEAR(got[(b * cs.O + o) * hw + p], acc, 1e-4)
              << "case C=" << cs.C << " k=" << cs.k << " pad=" << cs.pad << " b=" << b << " o=" << o
              << " p=" << p;
        }
    }
  }
}

// The floor-mode pool windows and reductions reproduce CpuBackend's pools bit for bit.
TEST(CudaImageMath, PoolWindowsEqualCpuPools) {
  for (const auto& [H, W] : {std::pair<int64_t, int64_t>{5, 7}, {4, 3}, {2, 2}, {7, 4}}) {
    const int64_t B = 2, C = 3, Ho = H / 2, Wo = W / 2;
    const auto x = randn(B * C * H * W, 4);
    const Tensor xt = up(x, {B, C, H, W});
    Tensor ymax = cpu_backend().empty(DType::F32, {B, C, Ho, Wo});
    Tensor yavg = cpu_backend().empty(DType::F32, {B, C, Ho, Wo});
    cpu_backend().max_pool2x2(xt, ymax);
    cpu_backend().avg_pool2x2(xt, yavg);
    const auto gmax = download_f32(cpu_backend(), ymax), gavg = download_f32(cpu_backend(), yavg);
    for (int64_t t = 0; t < B * C * Ho * Wo; ++t) {
      const float* r0 = x.data() + (t / (Ho * Wo)) * H * W + pool2x2_window(t % (Ho * Wo), W);
      EXPECT_EQ(gmax[t], max4(r0[0], r0[1], r0[W], r0[W + 1])) << H << "x" << W << " t=" << t;
      EXPECT_EQ(gavg[t], avg4(r0[0], r0[1], r0[W], r0[W + 1])) << H << "x" << W << " t=" << t;
    }
  }
}

TEST(CudaImageMath, UpsampleSourceEqualsCpuUpsample) {
  const int64_t B = 2, C = 3, H = 3, W = 5;
  const auto x = randn(B * C * H * W, 5);
  Tensor y = cpu_backend().empty(DType::F32, {B, C, 2 * H, 2 * W});
  cpu_backend().upsample_nearest2x(up(x, {B, C, H, W}), y);
  const auto got = download_f32(cpu_backend(), y);
  const int64_t plane = 4 * H * W;
  for (int64_t t = 0; t < B * C * plane; ++t)
    EXPECT_EQ(got[t], x[(t / plane) * H * W + upsample2x_source(t % plane, W)]) << t;
}

// Statistics as the group_norm kernel forms them (double sums, group_norm_inv_std, swish).
TEST(CudaImageMath, GroupNormStatisticsMatchCpu) {
  const int64_t B = 2, C = 6, H = 3, W = 5, hw = H * W;
  const int groups = 3;
  const float eps = 1e-6f;
  auto x = randn(B * C * hw, 6);
  for (auto& v : x) v = 3.0f + 2.0f * v;  // an offset mean, where one-pass variance would lose
  const auto g = randn(C, 7), be = randn(C, 8);
  for (const bool sw : {false, true}) {
    Tensor y = cpu_backend().empty(DType::F32, {B, C, H, W});
    cpu_backend().group_norm(up(x, {B, C, H, W}), up(g, {C}), up(be, {C}), groups, eps, sw, y);
    const auto got = download_f32(cpu_backend(), y);
    const int64_t cpg = C / groups, n = cpg * hw;
    for (int64_t bg = 0; bg < B * groups; ++bg) {
      const int64_t b = bg / groups, gi = bg % groups, base = (b * C + gi * cpg) * hw;
      double s = 0.0;
      for (int64_t i = 0; i < n; ++i) s += x[base + i];
      const double mean = s / static_cast<double>(n);
      double ss = 0.0;
      for (int64_t i = 0; i < n; ++i) ss += (x[base + i] - mean) * (x[base + i] - mean);
      const float inv = group_norm_inv_std(ss, n, eps), m = static_cast<float>(mean);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t ch = gi * cpg + i / hw;
        float v = (x[base + i] - m) * inv * g[ch] + be[ch];
        if (sw) v = swish(v);
        EXPECT_NEAR(got[base + i], v, 1e-5f * (1.0f + std::fabs(v)))
            << "swish=" << sw << " i=" << i;
      }
    }
  }
}

// gelu_erf_value against CpuBackend::gelu_erf (SIMD erff there: within an ulp or two).
TEST(CudaImageMath, GeluMatchesCpu) {
  std::vector<float> x = randn(67, 9);
  x.insert(x.end(), {0.0f, -6.0f, 6.0f, -0.5f, 10.0f});
  Tensor t = up(x, {static_cast<int64_t>(x.size())});
  cpu_backend().gelu_erf(t);
  const auto got = download_f32(cpu_backend(), t);
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(got[i], gelu_erf_value(x[i]), 1e-6f * (1.0f + std::fabs(got[i]))) << x[i];
}
