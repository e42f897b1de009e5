// The CPU linear kernel on every instruction-set path this machine runs: bit-identical to a plain
// loop of one FMA chain per output (the order linear_tiles.h promises), close to a double-precision
// loop, over odd shapes and tails, and bit-identical across M, row position and thread count (the
// batch invariance reproducible sampling and verification rely on); the panel layout; and the
// backend's packed weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/linear_isa.h"
#include "tensor/cpu/linear_panels.h"
#include "tessera/error.h"

using namespace tessera;

namespace {

std::vector<float> normal(size_t n, uint32_t seed, float scale) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Restores the default path and thread count when a test ends, passed or not.
struct PathGuard {
  int threads = cpu_threads();
  ~PathGuard() {
    cpu::set_linear_isa("");
    set_cpu_threads(threads);
  }
};

struct Case {
  DType wt;
  int64_t K, N, max_m;
};

// Weights as stored (`w`, f32 or 16-bit) and the f32 values the kernel sees (`wf`).
struct Weights {
  std::vector<float> wf;
  std::vector<uint16_t> w16;
  const void* data() const {
    return w16.empty() ? static_cast<const void*>(wf.data()) : w16.data();
  }
};

Weights make_weights(DType wt, int64_t N, int64_t K) {
  Weights w;
  w.wf = normal(static_cast<size_t>(N * K), 2, 0.1f);
  if (wt != DType::F32) {
    w.w16.resize(w.wf.size());
    convert_from_f32(w.wf.data(), wt, w.w16.data(), w.wf.size());
    convert_to_f32(wt, w.w16.data(), w.wf.data(), w.wf.size());
  }
  return w;
}

void check_path(const std::string& isa, const Case& c) {
  const int64_t max_m = c.max_m;
  SCOPED_TRACE(isa + " " + dtype_name(c.wt) + " K " + std::to_string(c.K) + " N " +
               std::to_string(c.N));
  cpu::set_linear_isa(isa);
  ASSERT_EQ(std::string(cpu::linear_isa()), isa);
  const Weights w = make_weights(c.wt, c.N, c.K);
  const auto x = normal(static_cast<size_t>(max_m * c.K), 1, 1.0f);
  const auto bias = normal(static_cast<size_t>(c.N), 3, 1.0f);
  set_cpu_threads(2);
  std::vector<float> full(static_cast<size_t>(max_m * c.N));
  cpu::linear(x.data(), max_m, c.K, w.data(), c.wt, c.N, bias.data(), full.data());
  // The AMX path multiplies bf16 weights by activations rounded to bf16, each product exact in
  // f32, summed in the hardware's own order (linear_amx.cpp): its reference is the double sum of
  // those exact products, to within f32 accumulation error over K terms. Every other path is the
  // FMA chain, bit for bit.
  const bool bf16_products = isa == "amx" && c.wt == DType::BF16;
  for (int64_t m = 0; m < max_m; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      double ref = bias[n], ref_bf16 = bias[n], magnitude = std::fabs(bias[n]);
      float chain = 0.0f;
      for (int64_t k = 0; k < c.K; ++k) {
        const float xk = x[m * c.K + k], wk = w.wf[n * c.K + k];
        ref += static_cast<double>(xk) * wk;
        const double p = static_cast<double>(bf16_to_f32(f32_to_bf16(xk))) * wk;
        ref_bf16 += p;
        magnitude += std::fabs(p);
        chain = std::fma(xk, wk, chain);
      }
      const float got = full[m * c.N + n];
      if (bf16_products) {
        ASSERT_NEAR(got, ref_bf16, 4e-7 * static_cast<double>(c.K) * magnitude + 1e-6)
            << "m " << m << " n " << n;
        // Rounding the activations moves an output by at most 2^-9 of its terms' magnitude.
        ASSERT_NEAR(got, ref, magnitude / 256) << "m " << m << " n " << n;
      } else {
        ASSERT_EQ(got, chain + bias[n]) << "m " << m << " n " << n;
        ASSERT_NEAR(got, ref, 1e-4 * (1 + std::fabs(ref))) << "m " << m << " n " << n;
      }
    }
  // Every M from 1 to max_m, on 1 and 2 threads, from any starting row: the same bits per element
  // (the rows of a call land in every register tile and tail path in turn).
  for (int threads : {1, 2}) {
    set_cpu_threads(threads);
    for (int64_t M = 1; M <= max_m; ++M) {
      const int64_t m0 = (M * 7) % (max_m - M + 1);  // a varying first row
      std::vector<float> y(static_cast<size_t>(M * c.N));
      cpu::linear(x.data() + m0 * c.K, M, c.K, w.data(), c.wt, c.N, bias.data(), y.data());
      for (int64_t i = 0; i < M * c.N; ++i)
        ASSERT_EQ(y[i], full[m0 * c.N + i])
            << "threads " << threads << " M " << M << " row " << m0 + i / c.N << " col " << i % c.N;
    }
  }
}

}  // namespace

TEST(LinearKernelPaths, ListsTheDefaultFirstAndScalarLast) {
  const auto isas = cpu::linear_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.back(), "scalar");
  EXPECT_THROW(cpu::set_linear_isa("sse9"), Error);
  // AMX is offered exactly where the CPU and the OS allow it, only beside AVX-512, and never as
  // the default (it changes a bf16 model's numbers).
  const bool amx = std::find(isas.begin(), isas.end(), "amx") != isas.end();
  EXPECT_EQ(amx, cpu::amx_bf16_available() &&
                     std::find(isas.begin(), isas.end(), "avx512") != isas.end());
  EXPECT_NE(isas.front(), "amx");
}

// K: below one vector (13), odd (79, 245); N below one panel (5, 13) and past one with remainder
// columns (37); M 1-70 covers every row-tile remainder of the FMA paths (tiles of 12 and 6 rows)
// and of AMX (16-row tiles, 32-row passes, 0-15 padding rows).
TEST(LinearKernelPaths, EveryPathMatchesReferenceAndIsInvariantAcrossRowsAndThreads) {
  PathGuard guard;
  for (const std::string& isa : cpu::linear_isas())
    for (DType wt : {DType::F32, DType::F16, DType::BF16})
      for (const Case& c : {Case{wt, 13, 5, 70}, Case{wt, 245, 37, 40}, Case{wt, 79, 13, 70}})
        check_path(isa, c);
}

// Past the single-thread threshold for one row too (M*K*N above it at M 1, so every M runs
// threaded); N 300 = 9 panels and 12 columns; K 443 odd.
TEST(LinearKernelPaths, LargeShapesAreInvariantAcrossRowsAndThreads) {
  PathGuard guard;
  for (const std::string& isa : cpu::linear_isas())
    for (DType wt : {DType::F16, DType::BF16}) check_path(isa, Case{wt, 443, 300, 18});
}

// f16 (and f32): element (n, k) of panel n / 32 at k * 32 + n % 32. bf16: AMX weight tiles of 16
// k pairs x 16 columns, two per block of 32 k, K padded to 32. Rows past N and the K padding zero.
TEST(LinearPanels, PackPlacesEveryElementAndZeroFillsThePadding) {
  const int64_t N = 37, K = 45;  // bf16: two blocks of 32 k, the second padded
  std::vector<uint16_t> w(static_cast<size_t>(N * K));
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint16_t>(i + 1);
  for (DType dt : {DType::F16, DType::BF16}) {
    const int64_t Kp = dt == DType::BF16 ? 64 : K;
    ASSERT_EQ(cpu::panel_depth(dt, K), Kp);
    ASSERT_EQ(cpu::panel_bytes(dt, N, K), size_t(64 * Kp * 2));
    std::vector<uint16_t> p(static_cast<size_t>(64 * Kp), 0xffff);
    cpu::pack_panels(w.data(), dt, N, K, p.data());
    std::vector<bool> seen(p.size());
    for (int64_t n = 0; n < 64; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const int64_t at = dt == DType::BF16
                               ? (n / 32) * Kp * 32 + (k / 32) * 1024 + ((n % 32) / 16) * 512 +
                                     ((k % 32) / 2) * 32 + 2 * (n % 16) + k % 2
                               : (n / 32) * K * 32 + k * 32 + n % 32;
        ASSERT_EQ(cpu::panel_index(dt, K, n, k), at);
        EXPECT_EQ(p[at], n < N ? w[n * K + k] : 0) << dtype_name(dt) << " n " << n << " k " << k;
        seen[at] = true;
      }
    for (size_t i = 0; i < p.size(); ++i) {
      if (!seen[i]) {
        ASSERT_EQ(p[i], 0) << dtype_name(dt) << " padding element " << i;
      }
    }
  }
}

// A model's packed weight computes the same bits as the row-major one; ops other than linear
// refuse it instead of reading the panels as rows.
TEST(LinearPanels, BackendPackedWeightsGiveTheSameBitsAndOnlyLinearReadsThem) {
  CpuBackend be;
  const int64_t M = 9, K = 70, N = 45;
  const Weights w = make_weights(DType::F16, N, K);
  const auto x = normal(static_cast<size_t>(M * K), 1, 1.0f);
  const Tensor xt = be.upload(x.data(), DType::F32, {M, K});
  const Tensor rm = be.upload(w.w16.data(), DType::F16, {N, K});
  const Tensor packed = be.pack_linear_weight(rm);
  EXPECT_EQ(packed.layout, Layout::Packed);
  EXPECT_EQ(packed.shape, rm.shape);
  Tensor y1 = be.empty(DType::F32, {M, N}), y2 = be.empty(DType::F32, {M, N});
  be.linear(xt, rm, nullptr, y1);
  be.linear(xt, packed, nullptr, y2);
  for (int64_t i = 0; i < M * N; ++i) ASSERT_EQ(y1.ptr<float>()[i], y2.ptr<float>()[i]) << i;
  std::vector<uint16_t> host(static_cast<size_t>(N * K));
  EXPECT_THROW(be.download(packed, host.data()), Error);
  EXPECT_THROW(be.to_f32(packed), Error);
  EXPECT_THROW(packed.rows(0, 1), Error);
  EXPECT_THROW(be.pack_linear_weight(packed), Error);
}
