// Backend op harness in the spirit of ggml's test-backend-ops: every op of the Backend interface
// (src/tensor/backend.h), run on cpu_backend() over random data with odd shapes and every weight
// dtype, against a naive double-precision reference written here from the interface's contract
// (one reference function per op, a list of cases, a stated tolerance per op). Also the properties
// the engine relies on: linear's batch and thread invariance, add and modulate into their input.
//
// Tolerances are |got - want| <= abs + rel * scale, where scale is |want| for element-wise ops
// and, for ops whose outputs are sums, the sum of the magnitudes of the terms (what f32 rounding
// error is proportional to; the result itself can cancel to ~0). u = 2^-24 ~ 6e-8 below.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "tensor/backend.h"
#include "tensor/cpu/cpu_backend.h"
#include "tessera/error.h"

using namespace tessera;

namespace {

using Vec = std::vector<float>;
using DVec = std::vector<double>;
using Ids = std::vector<int32_t>;

Backend& be() {
  return cpu_backend();
}

constexpr DType kWeightTypes[] = {DType::F32, DType::F16, DType::BF16};

// ---- adapters -----------------------------------------------------------------------------------
// get_rows' ids, rope's positions and AttentionBatch's seq/past/mask are backend I32/U8 tensors;
// the cases describe them as host data and these functions upload them.

void run_get_rows(Backend& b, const Tensor& table, const Ids& ids, Tensor& out) {
  b.get_rows(table, upload_ids(b, ids), out);
}

void run_rope(Backend& b, Tensor& x, int n_rot_heads, int head_dim, const Tensor& cos_sin,
              const Ids& pos) {
  b.rope(x, n_rot_heads, head_dim, cos_sin, upload_ids(b, pos));
}

// One attention call as host data.
struct HostBatch {
  int n_new = 0;
  Ids seq, past;
  std::vector<uint8_t> mask;  // [n_seq_batch][n_new][mask_stride]; empty = causal
  int mask_stride = 0;
  const Tensor* key_visible = nullptr;  // U8 [n_seq_cache][capacity], or null
};

AttentionBatch make_attention_batch(const HostBatch& hb) {
  AttentionBatch ab;
  ab.n_seq = static_cast<int>(hb.seq.size());
  ab.n_new = hb.n_new;
  ab.seq = upload_ids(be(), hb.seq);
  ab.past = upload_ids(be(), hb.past);
  if (!hb.mask.empty())
    ab.mask = be().upload(hb.mask.data(), DType::U8, {static_cast<int64_t>(hb.mask.size())});
  ab.mask_stride = hb.mask_stride;
  ab.key_visible = hb.key_visible;
  return ab;
}

void run_kv_store(Backend& b, const Tensor& qkv, int n_head, int n_kv_head, int head_dim,
                  const HostBatch& hb, Tensor& k_cache, Tensor& v_cache) {
  b.kv_store(qkv, n_head, n_kv_head, head_dim, make_attention_batch(hb), k_cache, v_cache);
}

void run_attention(Backend& b, const Tensor& qkv, int n_head, int n_kv_head, int head_dim,
                   const HostBatch& hb, const Tensor& k_cache, const Tensor& v_cache, Tensor& out) {
  b.attention(qkv, n_head, n_kv_head, head_dim, make_attention_batch(hb), k_cache, v_cache, out);
}

// ---- data ---------------------------------------------------------------------------------------

struct Rng {
  std::mt19937 g;
  explicit Rng(uint32_t seed) : g(seed) {}
  Vec normal(int64_t n, float scale = 1.0f, float offset = 0.0f) {
    std::normal_distribution<float> d(offset, scale);
    Vec v(static_cast<size_t>(n));
    for (float& x : v) x = d(g);
    return v;
  }
  Vec uniform(int64_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    Vec v(static_cast<size_t>(n));
    for (float& x : v) x = d(g);
    return v;
  }
  int integer(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); }  // [lo, hi]
  bool coin(double p) { return std::bernoulli_distribution(p)(g); }
  std::vector<uint8_t> bytes(size_t n) {
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = static_cast<uint8_t>(g());
    return v;
  }
};

Tensor up(const Vec& v, Shape s) {
  return be().upload(v.data(), DType::F32, std::move(s));
}

Vec down(const Tensor& t) {
  Vec v(static_cast<size_t>(t.numel()));
  be().download(t, v.data());
  return v;
}

std::vector<uint8_t> down_bytes(const Tensor& t) {
  std::vector<uint8_t> v(t.nbytes());
  be().download(t, v.data());
  return v;
}

DVec to_double(const Vec& v) {
  return DVec(v.begin(), v.end());
}

// Storage formats decoded from their definitions (not through dtype.cpp).
double ref_f16(uint16_t h) {
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 31) return m ? std::nan("") : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(m, -24);  // subnormal
  return sign * std::ldexp(1024 + m, e - 25);
}

double ref_bf16(uint16_t h) {  // the top half of an f32
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A matrix stored as `dtype` (rounded by convert_from_f32): the bytes the backend gets and the
// values a reference must use.
struct Stored {
  std::vector<uint8_t> bytes;
  DVec values;
};

Stored store_as(const Vec& v, DType dt) {
  Stored s{std::vector<uint8_t>(v.size() * dtype_size(dt)), DVec(v.size())};
  convert_from_f32(v.data(), dt, s.bytes.data(), v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t h;
    switch (dt) {
      case DType::F32:
        s.values[i] = v[i];
        break;
      case DType::F16:
        std::memcpy(&h, s.bytes.data() + 2 * i, 2);
        s.values[i] = ref_f16(h);
        break;
      default:
        std::memcpy(&h, s.bytes.data() + 2 * i, 2);
        s.values[i] = ref_bf16(h);
        break;
    }
  }
  return s;
}

std::string shape_label(std::initializer_list<std::pair<const char*, int64_t>> dims) {
  std::string s;
  for (const auto& [name, v] : dims)
    s += std::string(s.empty() ? "" : " ") + name + "=" + std::to_string(v);
  return s;
}

// Restores the backend's thread count on scope exit.
struct ThreadsGuard {
  int saved = cpu_threads();
  ~ThreadsGuard() { set_cpu_threads(saved); }
};

// ---- comparison ---------------------------------------------------------------------------------

struct Tol {
  double rel, abs;
};
constexpr Tol kExact{0.0, 0.0};

// Worst |got - want| / bound seen per op (printed with TESSERA_OPS_VERBOSE=1, to re-check that the
// tolerances are neither loose nor tight).
std::map<std::string, double>& worst_ratio() {
  static std::map<std::string, double> m;
  return m;
}

class ToleranceReport : public ::testing::Environment {
 public:
  void TearDown() override {
    if (!std::getenv("TESSERA_OPS_VERBOSE")) return;
    for (const auto& [op, r] : worst_ratio())
      std::printf("[backend ops] %-20s worst error = %.3f of the bound\n", op.c_str(), r);
  }
};
[[maybe_unused]] ::testing::Environment* const kReport =
    ::testing::AddGlobalTestEnvironment(new ToleranceReport);

// got[i] within tol.abs + tol.rel * scale[i] of want[i] (scale empty: |want[i]|). NaN only matches
// NaN and infinities only themselves.
::testing::AssertionResult near(const char* op, std::span<const float> got,
                                std::span<const double> want, Tol tol,
                                std::span<const double> scale = {}) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << op << ": " << got.size() << " values, expected " << want.size();
  size_t bad = 0;
  std::ostringstream msg;
  double& w = worst_ratio()[op];
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], e = want[i];
    const double bound = tol.abs + tol.rel * (scale.empty() ? std::fabs(e) : scale[i]);
    bool ok;
    if (std::isnan(e) || std::isinf(e)) {
      ok = std::isnan(e) ? std::isnan(g) : g == e;
    } else {
      const double diff = std::fabs(g - e);
      ok = diff <= bound;
      if (ok && bound > 0) w = std::max(w, diff / bound);
    }
    if (!ok && bad++ < 5)
      msg << "\n  [" << i << "] expected " << e << " got " << g << " (|diff| " << std::fabs(g - e)
          << ", bound " << bound << ")";
  }
  if (bad)
    return ::testing::AssertionFailure()
           << op << ": " << bad << " of " << got.size() << " values off" << msg.str();
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult same_bits(std::span<const float> got, std::span<const float> want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure()
             << "[" << i << "] " << got[i] << " vs " << want[i] << " (bits differ)";
  return ::testing::AssertionSuccess();
}

}  // namespace

// ================================================================================== memory ops

TEST(BackendOps, SetThreads) {
  ThreadsGuard guard;
  set_cpu_threads(1);
  EXPECT_EQ(cpu_threads(), 1);
  set_cpu_threads(2);
  EXPECT_EQ(cpu_threads(), 2);
  set_cpu_threads(0);  // non-positive means one thread
  EXPECT_EQ(cpu_threads(), 1);
}

namespace {
constexpr DType kAllTypes[] = {DType::F32, DType::F16, DType::BF16,
                               DType::I32, DType::I64, DType::U8};
const std::vector<Shape> kMemShapes = {{1}, {7}, {3, 5}, {2, 3, 5}, {1, 1, 33}, {0}, {3, 0, 2}};
}  // namespace

TEST(BackendOps, EmptyAndZeros) {
  Rng rng(1);
  for (DType dt : kAllTypes)
    for (const Shape& s : kMemShapes) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + shape_str(s));
      const size_t bytes = static_cast<size_t>(shape_numel(s)) * dtype_size(dt);
      // Dirty a block of this size first, so that zeros() gets recycled memory to clear.
      { Tensor dirty = be().upload(rng.bytes(bytes).data(), dt, s); }
      for (bool zero : {false, true}) {
        Tensor t = zero ? be().zeros(dt, s) : be().empty(dt, s);
        EXPECT_EQ(t.dtype, dt);
        EXPECT_EQ(t.shape, s);
        EXPECT_EQ(t.nbytes(), bytes);
        EXPECT_EQ(t.backend, &be());
        EXPECT_TRUE(t.defined());
        if (zero) {
          EXPECT_EQ(down_bytes(t), std::vector<uint8_t>(bytes, 0));
        }
        // The memory is usable: a write through copy() reads back.
        const auto pattern = rng.bytes(bytes);
        Tensor src = be().upload(pattern.data(), dt, s);
        be().copy(src, t);
        EXPECT_EQ(down_bytes(t), pattern);
      }
    }
}

TEST(BackendOps, UploadDownload) {
  Rng rng(2);
  for (DType dt : kAllTypes)
    for (const Shape& s : kMemShapes) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + shape_str(s));
      auto host = rng.bytes(static_cast<size_t>(shape_numel(s)) * dtype_size(dt));
      const auto original = host;
      Tensor t = be().upload(host.data(), dt, s);
      EXPECT_EQ(t.dtype, dt);
      EXPECT_EQ(t.shape, s);
      for (auto& b : host) b ^= 0x5a;  // upload copied: later host writes do not reach t
      EXPECT_EQ(down_bytes(t), original);
    }
}

TEST(BackendOps, AdoptHost) {
  Rng rng(3);
  for (DType dt : {DType::F32, DType::BF16, DType::U8}) {
    SCOPED_TRACE(dtype_name(dt));
    const Shape s = {5, 7};
    auto buf = std::make_shared<std::vector<uint8_t>>(rng.bytes(35 * dtype_size(dt)));
    const auto original = *buf;
    std::weak_ptr<std::vector<uint8_t>> watch = buf;
    {
      Tensor t = be().adopt_host(buf->data(), dt, s, buf);
      buf.reset();
      EXPECT_FALSE(watch.expired()) << "the tensor must keep its owner alive";
      EXPECT_EQ(t.dtype, dt);
      EXPECT_EQ(t.shape, s);
      EXPECT_EQ(down_bytes(t), original);
    }
    EXPECT_TRUE(watch.expired()) << "the owner must be released with the tensor";
  }
  // An adopted weight is an ordinary op input.
  const Vec w = rng.normal(3 * 4), x = rng.normal(2 * 4);
  auto owner = std::make_shared<Vec>(w);
  Tensor wt = be().adopt_host(owner->data(), DType::F32, {3, 4}, owner);
  Tensor y = be().empty(DType::F32, {2, 3});
  be().linear(up(x, {2, 4}), wt, nullptr, y);
  DVec want(6);
  for (int m = 0; m < 2; ++m)
    for (int n = 0; n < 3; ++n)
      for (int k = 0; k < 4; ++k)
        want[m * 3 + n] += static_cast<double>(x[m * 4 + k]) * w[n * 4 + k];
  EXPECT_TRUE(near("adopt_host", down(y), want, {1e-6, 1e-7}));
}

TEST(BackendOps, ToF32) {
  // Every f16 and bf16 bit pattern (NaN, infinities, subnormals, -0 included): exact.
  for (DType dt : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    std::vector<uint16_t> all(65536);
    std::iota(all.begin(), all.end(), uint16_t{0});
    Tensor t = be().upload(all.data(), dt, {256, 256});
    Tensor f = be().to_f32(t);
    EXPECT_EQ(f.dtype, DType::F32);
    EXPECT_EQ(f.shape, t.shape);
    DVec want(all.size());
    for (size_t i = 0; i < all.size(); ++i)
      want[i] = dt == DType::F16 ? ref_f16(all[i]) : ref_bf16(all[i]);
    const Vec got = down(f);
    EXPECT_TRUE(near("to_f32", got, want, kExact));
    for (size_t i = 0; i < all.size(); ++i)
      if (want[i] == 0.0) {
        ASSERT_EQ(std::signbit(got[i]), std::signbit(want[i])) << i;
      }
  }
  // f32 is copied bit for bit; f64 is rounded to nearest.
  Rng rng(4);
  Vec v = rng.normal(33, 10.0f);
  v[0] = -0.0f;
  v[1] = INFINITY;
  v[2] = std::numeric_limits<float>::denorm_min();
  EXPECT_TRUE(same_bits(down(be().to_f32(up(v, {3, 11}))), v));
  std::vector<double> d = {1.0 / 3.0, -1e-40, 1e39, 0.1, -7.25};
  Tensor td = be().upload(d.data(), DType::F64, {5});
  DVec want(d.size());
  for (size_t i = 0; i < d.size(); ++i) want[i] = static_cast<float>(d[i]);
  EXPECT_TRUE(near("to_f32", down(be().to_f32(td)), want, kExact));
}

TEST(BackendOps, Copy) {
  Rng rng(5);
  const std::pair<Shape, Shape> shapes[] = {{{7}, {7}}, {{3, 5}, {15}}, {{2, 7, 3}, {6, 7}}};
  for (DType dt : kAllTypes)
    for (const auto& [s, d] : shapes) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + shape_str(s) + " -> " + shape_str(d));
      const auto a = rng.bytes(static_cast<size_t>(shape_numel(s)) * dtype_size(dt));
      Tensor src = be().upload(a.data(), dt, s);
      Tensor dst = be().upload(rng.bytes(a.size()).data(), dt, d);
      be().copy(src, dst);
      EXPECT_EQ(down_bytes(dst), a);
      EXPECT_EQ(down_bytes(src), a);
      EXPECT_EQ(dst.shape, d);
    }
}

// ============================================================================ transformer ops

namespace {
// y[m,n] = sum_k x[m,k] w[n,k] + bias[n], in double on the stored weight values.
// bf16_x: x rounded to bf16 first, as a backend whose linear_rounds_bf16_activations() does with
// bf16 weights.
void ref_linear(const Vec& x, const DVec& w, const Vec* bias, int64_t M, int64_t K, int64_t N,
                DVec& y, DVec& scale, bool bf16_x = false) {
  y.assign(M * N, 0.0);
  scale.assign(M * N, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = bias ? (*bias)[n] : 0.0, a = bias ? std::fabs((*bias)[n]) : 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const float xk = bf16_x ? bf16_to_f32(f32_to_bf16(x[m * K + k])) : x[m * K + k];
        const double t = static_cast<double>(xk) * w[n * K + k];
        s += t;
        a += std::fabs(t);
      }
      y[m * N + n] = s;
      scale[m * N + n] = a;
    }
}

// K values around the kernel's 8/16-wide vectors and 4-vector steps (K % 64 tails of every
// length), N around its 4/6-column blocks; K = 4099 makes linear split the rows into several
// cache blocks (65536 / K < 16 rows per block).
const std::array<int64_t, 2> kLinearKN[] = {{1, 1},   {3, 5},    {13, 7},   {31, 6},
                                            {67, 19}, {100, 13}, {203, 37}, {4099, 7}};
const int64_t kLinearM[] = {1, 2, 3, 5, 7, 17, 33};
}  // namespace

TEST(BackendOps, Linear) {
  // f32 accumulation in the kernel's order (vector lanes, then a horizontal sum): error
  // ~sqrt(K) u sum|x w| in practice; 2e-5 of sum|x w| is >= 4 sqrt(K) u for K <= 4099.
  constexpr Tol kTol{2e-5, 1e-7};
  // One thread: ~170 calls of short parallel loops (fast alone, slower on a loaded machine);
  // LinearBatchAndThreadInvariant shows that two threads give the same bits.
  ThreadsGuard guard;
  set_cpu_threads(1);
  Rng rng(10);
  int idx = 0;
  for (DType dt : kWeightTypes)
    for (const auto& [K, N] : kLinearKN) {
      const Stored w = store_as(rng.normal(N * K, 0.1f), dt);
      Tensor wt = be().upload(w.bytes.data(), dt, {N, K});
      const Vec bias = rng.normal(N);
      Tensor bt = up(bias, {N});
      for (int64_t M : kLinearM) {
        const bool with_bias = ++idx % 2 == 1;
        SCOPED_TRACE(std::string(dtype_name(dt)) + " " +
                     shape_label({{"M", M}, {"K", K}, {"N", N}, {"bias", with_bias}}));
        const Vec x = rng.normal(M * K);
        Tensor y = be().empty(DType::F32, {M, N});
        be().linear(up(x, {M, K}), wt, with_bias ? &bt : nullptr, y);
        DVec want, scale;
        ref_linear(x, w.values, with_bias ? &bias : nullptr, M, K, N, want, scale,
                   dt == DType::BF16 && be().linear_rounds_bf16_activations());
        EXPECT_TRUE(near("linear", down(y), want, kTol, scale));
      }
    }
  // Activations with leading dimensions: rows = numel / K.
  const Stored w = store_as(rng.normal(5 * 9, 0.1f), DType::BF16);
  const Vec x = rng.normal(2 * 3 * 9);
  Tensor y = be().empty(DType::F32, {2, 3, 5});
  be().linear(up(x, {2, 3, 9}), be().upload(w.bytes.data(), DType::BF16, {5, 9}), nullptr, y);
  DVec want, scale;
  ref_linear(x, w.values, nullptr, 6, 9, 5, want, scale, be().linear_rounds_bf16_activations());
  EXPECT_TRUE(near("linear", down(y), want, kTol, scale));
}

TEST(BackendOps, LinearBatchAndThreadInvariant) {
  // backend.h: an output element's summation order depends neither on M nor on the thread count,
  // so a row gives the same bits alone, anywhere in any batch, with one thread or two.
  ThreadsGuard guard;
  Rng rng(11);
  constexpr int64_t kPool = 40;
  for (DType dt : kWeightTypes)
    for (const auto& [K, N] : kLinearKN) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + shape_label({{"K", K}, {"N", N}}));
      const Stored w = store_as(rng.normal(N * K, 0.1f), dt);
      Tensor wt = be().upload(w.bytes.data(), dt, {N, K});
      Tensor bt = up(rng.normal(N), {N});
      const Vec pool = rng.normal(kPool * K);
      std::vector<Vec> solo(kPool);
      set_cpu_threads(1);
      for (int64_t r = 0; r < kPool; ++r) {
        Tensor y = be().empty(DType::F32, {1, N});
        be().linear(up(Vec(pool.begin() + r * K, pool.begin() + (r + 1) * K), {1, K}), wt, &bt, y);
        solo[r] = down(y);
      }
      for (int threads : {1, 2}) {
        set_cpu_threads(threads);
        // Fewer batches with two threads: each call's joins wait longer on a loaded machine.
        const std::vector<int64_t> Ms = threads == 1 ? std::vector<int64_t>{2, 3, 5, 7, 17, 33, 40}
                                                     : std::vector<int64_t>{3, 7, 40};
        for (int64_t M : Ms) {
          std::vector<int64_t> rows(kPool);
          std::iota(rows.begin(), rows.end(), 0);
          std::shuffle(rows.begin(), rows.end(), rng.g);
          Vec x(M * K);
          for (int64_t m = 0; m < M; ++m)
            std::copy_n(pool.begin() + rows[m] * K, K, x.begin() + m * K);
          Tensor y = be().empty(DType::F32, {M, N});
          be().linear(up(x, {M, K}), wt, &bt, y);
          const Vec got = down(y);
          for (int64_t m = 0; m < M; ++m)
            ASSERT_TRUE(same_bits(std::span(got).subspan(m * N, N), solo[rows[m]]))
                << "threads " << threads << " M " << M << " row " << m << " (pool row " << rows[m]
                << ")";
        }
      }
    }
}

TEST(BackendOps, GetRows) {
  // A conversion to f32 is exact: the rows must be the stored values, bit for bit.
  Rng rng(12);
  for (DType dt : kWeightTypes)
    for (int64_t R : {1, 5, 33})
      for (int64_t W : {1, 3, 17, 130})
        for (int64_t n_ids : {1, 4, 9}) {
          SCOPED_TRACE(std::string(dtype_name(dt)) +
                       shape_label({{" rows", R}, {"width", W}, {"ids", n_ids}}));
          const Stored table = store_as(rng.normal(R * W, 2.0f), dt);
          Ids ids(n_ids);
          for (auto& i : ids) i = rng.integer(0, static_cast<int>(R) - 1);  // repeats, any order
          ids.back() = static_cast<int32_t>(R) - 1;                         // the last row
          Tensor out = be().empty(DType::F32, {n_ids, W});
          run_get_rows(be(), be().upload(table.bytes.data(), dt, {R, W}), ids, out);
          DVec want(n_ids * W);
          for (int64_t i = 0; i < n_ids; ++i)
            for (int64_t c = 0; c < W; ++c) want[i * W + c] = table.values[ids[i] * W + c];
          EXPECT_TRUE(near("get_rows", down(out), want, kExact));
        }
}

TEST(BackendOps, RmsNorm) {
  // Sum of squares in f32 (~sqrt(D) u relative), then rsqrt and two products: a few 1e-7.
  constexpr Tol kTol{1e-5, 1e-30};
  Rng rng(13);
  for (int64_t rows : {1, 3, 17})
    for (int64_t D : {1, 7, 33, 130, 1023})
      for (float eps : {1e-6f, 1e-5f}) {
        SCOPED_TRACE(shape_label({{"rows", rows}, {"D", D}}) + " eps " + std::to_string(eps));
        // Small rows make eps matter (mean(x^2) ~ 1e-6 for scale 1e-3).
        const Vec x = rng.normal(rows * D, rows == 3 ? 1e-3f : 1.5f);
        const Vec w = rng.normal(D, 1.0f, 1.0f);
        Tensor y = be().empty(DType::F32, {rows, D});
        be().rms_norm(up(x, {rows, D}), up(w, {D}), eps, y);
        DVec want(rows * D);
        for (int64_t r = 0; r < rows; ++r) {
          double ss = 0.0;
          for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(x[r * D + i]) * x[r * D + i];
          const double inv = 1.0 / std::sqrt(ss / D + eps);
          for (int64_t i = 0; i < D; ++i) want[r * D + i] = x[r * D + i] * inv * w[i];
        }
        EXPECT_TRUE(near("rms_norm", down(y), want, kTol));
      }
}

namespace {
// Element counts around the vector widths, and past the ops' 4096 / 65536 parallel thresholds.
const int64_t kElementwiseN[] = {1, 7, 33, 4097, 65537};

// Normal data with a few extreme values (exp overflow and underflow in the activations).
Vec activation_data(Rng& rng, int64_t n) {
  Vec v = rng.normal(n, 3.0f);
  const float extremes[] = {-90.0f, -20.0f, 20.0f, 90.0f, 0.0f, -0.0f};
  for (size_t i = 0; i < std::size(extremes) && static_cast<int64_t>(i) * 3 < n; ++i)
    v[i * 3] = extremes[i];
  return v;
}
}  // namespace

TEST(BackendOps, Add) {
  // One f32 addition: the double sum of two floats rounded to f32 is the exact expected result.
  Rng rng(14);
  for (int64_t n : kElementwiseN) {
    SCOPED_TRACE("n " + std::to_string(n));
    const Vec a = rng.normal(n), b = rng.normal(n, 4.0f);
    DVec want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = static_cast<float>(static_cast<double>(a[i]) + b[i]);
    Tensor at = up(a, {n}), y = be().empty(DType::F32, {n});
    be().add(at, up(b, {n}), y);
    EXPECT_TRUE(near("add", down(y), want, kExact));
    be().add(at, up(b, {n}), at);  // y aliasing a (the residual stream)
    EXPECT_TRUE(near("add", down(at), want, kExact)) << "aliased output";
  }
}

TEST(BackendOps, Swiglu) {
  // exp, one add, one division, one product: a few ulp (libm's expf <= 1 ulp, libmvec's <= 4).
  constexpr Tol kTol{1e-6, 1e-30};
  Rng rng(15);
  for (int64_t n : kElementwiseN) {
    SCOPED_TRACE("n " + std::to_string(n));
    const Vec g = activation_data(rng, n), u = rng.normal(n);
    Tensor y = be().empty(DType::F32, {n});
    be().swiglu(up(g, {n}), up(u, {n}), y);
    DVec want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = g[i] / (1.0 + std::exp(-double{g[i]})) * u[i];
    EXPECT_TRUE(near("swiglu", down(y), want, kTol));
  }
}

// The stacked form (one [rows, 2F] linear output of w1 and w3): every element bit-identical to
// swiglu on the two halves, for rows of whole SIMD blocks (serial and parallel) and with tails.
TEST(BackendOps, SwigluStackedEqualsSwigluOfTheHalves) {
  Rng rng(18);
  for (const int64_t F : {16, 37, 1024})
    for (const int64_t rows : {1, 5, 64}) {
      SCOPED_TRACE("F " + std::to_string(F) + ", rows " + std::to_string(rows));
      const Vec gu = activation_data(rng, rows * 2 * F);
      Vec g, u;
      for (int64_t r = 0; r < rows; ++r) {
        g.insert(g.end(), gu.begin() + r * 2 * F, gu.begin() + r * 2 * F + F);
        u.insert(u.end(), gu.begin() + r * 2 * F + F, gu.begin() + (r + 1) * 2 * F);
      }
      Tensor want = be().empty(DType::F32, {rows, F}), got = be().empty(DType::F32, {rows, F});
      be().swiglu(up(g, {rows, F}), up(u, {rows, F}), want);
      be().swiglu_stacked(up(gu, {rows, 2 * F}), got);
      const Vec a = down(want), b = down(got);
      for (int64_t i = 0; i < rows * F; ++i) ASSERT_EQ(a[i], b[i]) << "element " << i;
    }
}

// The fused FFN input (linear_swiglu): bit-identical to the linear of the stacked weight then
// swiglu_stacked, for packed and row-major weights, every weight type, F a whole number of
// panels (fused on the CPU) or not (the fallback), serial and threaded sizes, 1 and 2 threads.
TEST(BackendOps, LinearSwigluEqualsLinearThenSwiglu) {
  ThreadsGuard guard;
  Rng rng(19);
  for (DType dt : kWeightTypes)
    for (const int64_t F : {32, 48, 160})
      for (const int64_t K : {24, 96})
        for (const bool packed : {true, false}) {
          const Stored w = store_as(rng.normal(2 * F * K, 0.1f), dt);
          Tensor wt = be().upload(w.bytes.data(), dt, {2 * F, K});
          if (packed) wt = be().pack_linear_weight(wt);
          for (const int64_t rows : {1, 5, 40})
            for (const int threads : {1, 2}) {
              SCOPED_TRACE(std::string(dtype_name(dt)) + " F " + std::to_string(F) + " K " +
                           std::to_string(K) + (packed ? " packed" : " row-major") + " rows " +
                           std::to_string(rows) + " threads " + std::to_string(threads));
              set_cpu_threads(threads);
              const Tensor x = up(rng.normal(rows * K), {rows, K});
              Tensor gate_up = be().empty(DType::F32, {rows, 2 * F});
              Tensor want = be().empty(DType::F32, {rows, F}),
                     got = be().empty(DType::F32, {rows, F});
              be().linear(x, wt, nullptr, gate_up);
              be().swiglu_stacked(gate_up, want);
              Tensor scratch = be().empty(DType::F32, {rows, 2 * F});
              be().linear_swiglu(x, wt, scratch, got);
              ASSERT_TRUE(same_bits(down(got), down(want)));
            }
        }
}

// T5 v1.1's gated GELU from a stacked [rows, 2F] tensor: gelu_tanh of the first half times the
// second, against a double reference (the same bound as gelu_tanh's, scaled by |up|).
TEST(BackendOps, GegluStacked) {
  constexpr Tol kTol{4e-6, 1e-30};
  Rng rng(23);
  for (const int64_t F : {1, 16, 37})
    for (const int64_t rows : {1, 5, 300}) {
      SCOPED_TRACE("F " + std::to_string(F) + ", rows " + std::to_string(rows));
      const Vec gu = activation_data(rng, rows * 2 * F);
      Tensor y = be().empty(DType::F32, {rows, F});
      be().geglu_stacked(up(gu, {rows, 2 * F}), y);
      DVec want(rows * F), scale(rows * F);
      const double c = std::sqrt(2.0 / M_PI);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < F; ++i) {
          const double g = gu[r * 2 * F + i], u = gu[r * 2 * F + F + i];
          const double gelu = 0.5 * g * (1.0 + std::tanh(c * (g + 0.044715 * g * g * g)));
          want[r * F + i] = gelu * u;
          scale[r * F + i] = (std::fabs(gelu) + std::fabs(g)) * std::fabs(u);
        }
      EXPECT_TRUE(near("geglu_stacked", down(y), want, kTol, scale));
    }
}

TEST(BackendOps, Silu) {
  constexpr Tol kTol{1e-6, 1e-30};  // as swiglu
  Rng rng(16);
  for (int64_t n : kElementwiseN) {
    SCOPED_TRACE("n " + std::to_string(n));
    const Vec x = activation_data(rng, n);
    Tensor t = up(x, {n});
    be().silu(t);
    DVec want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = x[i] / (1.0 + std::exp(-double{x[i]}));
    EXPECT_TRUE(near("silu", down(t), want, kTol));
  }
}

TEST(BackendOps, GeluTanh) {
  // 1 + tanh(.) cancels for x < 0, so the error is absolute: ~|x| ulp(1); bound 1e-6 |x|.
  constexpr Tol kTol{1e-6, 0.0};
  Rng rng(17);
  for (int64_t n : kElementwiseN) {
    SCOPED_TRACE("n " + std::to_string(n));
    const Vec x = activation_data(rng, n);
    Tensor t = up(x, {n});
    be().gelu_tanh(t);
    DVec want(n), scale(n);
    const double c = std::sqrt(2.0 / M_PI);
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[i];
      want[i] = 0.5 * v * (1.0 + std::tanh(c * (v + 0.044715 * v * v * v)));
      scale[i] = std::fabs(v);
    }
    EXPECT_TRUE(near("gelu_tanh", down(t), want, kTol, scale));
  }
}

namespace {
// Interleaved pairs: pair p of each of the first n_rot heads of a row is rotated by
// table[pos[row], p] = (cos, sin); every other value is untouched (scale 0: must be exact).
void ref_rope(const Vec& x, int64_t width, int n_rot, int hd, const Vec& table, const Ids& pos,
              DVec& y, DVec& scale) {
  y = to_double(x);
  scale.assign(x.size(), 0.0);
  const int64_t rows = static_cast<int64_t>(x.size()) / width;
  for (int64_t r = 0; r < rows; ++r)
    for (int h = 0; h < n_rot; ++h)
      for (int p = 0; p < hd / 2; ++p) {
        const int64_t i = r * width + h * hd + 2 * p;
        const double c = table[(pos[r] * (hd / 2) + p) * 2],
                     s = table[(pos[r] * (hd / 2) + p) * 2 + 1];
        const double a = x[i], b = x[i + 1];
        y[i] = a * c - b * s;
        y[i + 1] = b * c + a * s;
        scale[i] = scale[i + 1] =
            std::fabs(a * c) + std::fabs(b * s) + std::fabs(b * c) + std::fabs(a * s);
      }
}
}  // namespace

TEST(BackendOps, Rope) {
  // Two products and a difference per value (cancelling): a few u of the products' magnitudes.
  constexpr Tol kTol{1e-6, 0.0};
  Rng rng(18);
  constexpr int kPositions = 23;
  for (int hd : {2, 6, 10, 64})
    for (int n_rot : {0, 1, 3, 5})  // of 7 heads a row (as a qkv row with 3 q and 2+2 kv heads)
      for (int64_t rows : {1, 5, 17}) {
        SCOPED_TRACE(shape_label({{"hd", hd}, {"n_rot", n_rot}, {"rows", rows}}));
        const int64_t width = 7 * hd;
        Vec table(kPositions * (hd / 2) * 2);
        for (size_t i = 0; i < table.size(); i += 2) {
          const float th = std::uniform_real_distribution<float>(-3.2f, 3.2f)(rng.g);
          table[i] = std::cos(th);
          table[i + 1] = std::sin(th);
        }
        Ids pos(rows);
        for (auto& p : pos) p = rng.integer(0, kPositions - 1);
        pos[0] = kPositions - 1;
        const Vec x = rng.normal(rows * width);
        Tensor t = up(x, {rows, width});
        run_rope(be(), t, n_rot, hd, up(table, {kPositions, hd / 2, 2}), pos);
        DVec want, scale;
        ref_rope(x, width, n_rot, hd, table, pos, want, scale);
        EXPECT_TRUE(near("rope", down(t), want, kTol, scale));
      }
}

// ------------------------------------------------------------------ kv_store and attention

namespace {

struct AttnStep {
  Ids seq, past;
  int n_new = 1;
  bool tree = false;  // an explicit random tree mask (else causal)
};

struct AttnShape {
  int n_head, n_kv_head, head_dim, n_seq_cache, capacity;
};

struct AttnCase {
  std::string name;
  AttnShape shape;
  bool key_visible;
  std::vector<AttnStep> steps;
};

// The caches as kv_store's contract lays them out: [n_seq_cache][Hkv][capacity][hd].
struct HostCache {
  int64_t Hkv, cap, hd;
  Vec k, v;
  int64_t at(int64_t seq, int64_t h, int64_t slot) const {
    return ((seq * Hkv + h) * cap + slot) * hd;
  }
};

// New rows r*n_new + j of qkv [rows, (H + 2 Hkv) hd]: k of kv head h at column (H + h) hd, v at
// (H + Hkv + h) hd, written to slot past[r] + j of sequence seq[r].
void ref_kv_store(const Vec& qkv, int H, const HostBatch& hb, HostCache& c) {
  const int64_t width = (H + 2 * c.Hkv) * c.hd;
  for (size_t r = 0; r < hb.seq.size(); ++r)
    for (int j = 0; j < hb.n_new; ++j) {
      const float* row = qkv.data() + (static_cast<int64_t>(r) * hb.n_new + j) * width;
      for (int64_t h = 0; h < c.Hkv; ++h)
        for (int64_t e = 0; e < c.hd; ++e) {
          const int64_t at = c.at(hb.seq[r], h, hb.past[r] + j) + e;
          c.k[at] = row[(H + h) * c.hd + e];
          c.v[at] = row[(H + c.Hkv + h) * c.hd + e];
        }
    }
}

// out[row, h hd + e] = sum_s softmax_s(q.k_s / sqrt(hd)) v_s[e] over the slots s <= own =
// past + j of the query's sequence that it may see: all (causal) or mask[r][j][s] = 1, and not
// hidden by key_visible unless s is its own slot. Query head h reads kv head h / (H / Hkv).
// scale = sum_s p_s |v_s[e]|.
void ref_attention(const Vec& qkv, int H, const HostBatch& hb, const HostCache& c,
                   const std::vector<uint8_t>* visible, DVec& out, DVec& scale) {
  const int64_t hd = c.hd, width = (H + 2 * c.Hkv) * hd, group = H / c.Hkv;
  const int64_t rows = static_cast<int64_t>(hb.seq.size()) * hb.n_new;
  out.assign(rows * H * hd, 0.0);
  scale.assign(rows * H * hd, 0.0);
  for (size_t r = 0; r < hb.seq.size(); ++r)
    for (int j = 0; j < hb.n_new; ++j) {
      const int64_t row = static_cast<int64_t>(r) * hb.n_new + j, seq = hb.seq[r];
      const int64_t own = hb.past[r] + j;
      for (int64_t h = 0; h < H; ++h) {
        const float* q = qkv.data() + row * width + h * hd;
        DVec w(own + 1, 0.0);
        double mx = -INFINITY;
        std::vector<bool> ok(own + 1);
        for (int64_t s = 0; s <= own; ++s) {
          ok[s] = hb.mask.empty() || hb.mask[row * hb.mask_stride + s] != 0;
          if (visible && s != own && !(*visible)[seq * c.cap + s]) ok[s] = false;
          if (!ok[s]) continue;
          double d = 0.0;
          for (int64_t e = 0; e < hd; ++e)
            d += static_cast<double>(q[e]) * c.k[c.at(seq, h / group, s) + e];
          w[s] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, w[s]);
        }
        double z = 0.0;
        for (int64_t s = 0; s <= own; ++s) z += ok[s] ? (w[s] = std::exp(w[s] - mx)) : (w[s] = 0.0);
        if (z == 0.0) continue;  // nothing visible: zeros
        for (int64_t s = 0; s <= own; ++s)
          for (int64_t e = 0; e < hd; ++e) {
            const double p = w[s] / z, v = c.v[c.at(seq, h / group, s) + e];
            out[row * H * hd + h * hd + e] += p * v;
            scale[row * H * hd + h * hd + e] += p * std::fabs(v);
          }
      }
    }
}

// A random draft tree over each sequence's new slots in topological order (parent < child):
// node j sees the past slots but a few random ones, its ancestors and itself. Entries after its
// own slot and the stride padding are random junk that the op must ignore.
void random_tree_mask(Rng& rng, HostBatch& hb) {
  const int n_seq = static_cast<int>(hb.seq.size());
  hb.mask_stride = *std::max_element(hb.past.begin(), hb.past.end()) + hb.n_new + 3;
  hb.mask = rng.bytes(static_cast<size_t>(n_seq) * hb.n_new * hb.mask_stride);
  for (auto& m : hb.mask) m &= 1;
  for (int r = 0; r < n_seq; ++r) {
    std::vector<int> parent(hb.n_new);
    for (int j = 0; j < hb.n_new; ++j) parent[j] = rng.integer(-1, j - 1);
    for (int j = 0; j < hb.n_new; ++j) {
      uint8_t* m = hb.mask.data() + (static_cast<int64_t>(r) * hb.n_new + j) * hb.mask_stride;
      for (int s = 0; s < hb.past[r]; ++s) m[s] = rng.coin(0.85) ? 1 : 0;
      for (int i = 0; i <= j; ++i) m[hb.past[r] + i] = 0;
      for (int a = j; a >= 0; a = parent[a]) m[hb.past[r] + a] = 1;
    }
  }
}

// Runs the steps of a case on the backend and on the reference, comparing the caches after each
// kv_store (exactly: a copy) and, when check_attention, the attention outputs.
void run_attention_case(const AttnCase& c, uint32_t seed, bool check_attention) {
  // Scores and probabilities in f32 (an hd-term dot product, exp, a sum over the keys), then an
  // f32 weighted sum: errors of a few 1e-7 relative to sum_s p_s |v_s|; bound 1e-5 of it.
  constexpr Tol kTol{1e-5, 1e-7};
  SCOPED_TRACE(c.name);
  Rng rng(seed);
  const int H = c.shape.n_head, Hkv = c.shape.n_kv_head, hd = c.shape.head_dim;
  const int n_seq_cache = c.shape.n_seq_cache, capacity = c.shape.capacity;
  const Shape cache_shape = {n_seq_cache, Hkv, capacity, hd};
  const int64_t cache_n = shape_numel(cache_shape);
  HostCache ref{Hkv, capacity, hd, rng.normal(cache_n), rng.normal(cache_n)};  // junk to start
  Tensor kc = up(ref.k, cache_shape), vc = up(ref.v, cache_shape);
  std::vector<uint8_t> visible;
  Tensor vis;
  if (c.key_visible) {
    visible.resize(static_cast<size_t>(n_seq_cache) * capacity);
    for (auto& f : visible) f = rng.coin(0.7) ? 1 : 0;
    vis = be().upload(visible.data(), DType::U8, {n_seq_cache, capacity});
  }
  const int64_t width = static_cast<int64_t>(H + 2 * Hkv) * hd;
  for (size_t si = 0; si < c.steps.size(); ++si) {
    const AttnStep& st = c.steps[si];
    SCOPED_TRACE("step " + std::to_string(si));
    HostBatch hb;
    hb.n_new = st.n_new;
    hb.seq = st.seq;
    hb.past = st.past;
    hb.key_visible = c.key_visible ? &vis : nullptr;
    if (st.tree) random_tree_mask(rng, hb);
    const int64_t rows = static_cast<int64_t>(st.seq.size()) * st.n_new;
    const Vec qkv = rng.normal(rows * width);
    Tensor qt = up(qkv, {rows, width});
    run_kv_store(be(), qt, H, Hkv, hd, hb, kc, vc);
    ref_kv_store(qkv, H, hb, ref);
    ASSERT_TRUE(near("kv_store", down(kc), to_double(ref.k), kExact)) << "k cache";
    ASSERT_TRUE(near("kv_store", down(vc), to_double(ref.v), kExact)) << "v cache";
    if (!check_attention) continue;
    Tensor out = be().empty(DType::F32, {rows, static_cast<int64_t>(H) * hd});
    run_attention(be(), qt, H, Hkv, hd, hb, kc, vc, out);
    DVec want, scale;
    ref_attention(qkv, H, hb, ref, c.key_visible ? &visible : nullptr, want, scale);
    EXPECT_TRUE(near("attention", down(out), want, kTol, scale));
  }
}

// Columns: name, {H, Hkv, hd, n_seq_cache, capacity}, key_visible, steps {seq, past, n_new, tree}.
// Causal: a prefill then decode steps, one sequence and several (different pasts).
const std::vector<AttnCase> kCausalCases = {
    {"prefill+decode", {3, 3, 5, 1, 19}, false, {{{0}, {0}, 7}, {{0}, {7}, 1}, {{0}, {8}, 3}}},
    {"hd16 two seqs", {2, 2, 16, 2, 12}, false, {{{0, 1}, {0, 0}, 5}, {{1, 0}, {5, 5}, 2}}},
    {"hd1", {1, 1, 1, 1, 9}, false, {{{0}, {0}, 4}, {{0}, {4}, 1}}},
    // The AVX-512 path's register counts per head width (4, 3 and 9 chunks of 16 floats; the
    // last one past the compile-time cases) over several 16-key blocks.
    {"hd64 long", {4, 2, 64, 2, 70}, false, {{{0, 1}, {0, 0}, 37}, {{1, 0}, {37, 37}, 6}}},
    {"hd48", {3, 3, 48, 1, 40}, false, {{{0}, {0}, 20}, {{0}, {20}, 5}}},
    {"hd144", {2, 1, 144, 1, 36}, false, {{{0}, {0}, 17}, {{0}, {17}, 4}}},
};
// The head widths whose windows take other row-group kernels (AVX-512): scores and values in
// groups of 4 rows at 32 (the emoji draft's width), 3 and 2 at 96, scores only at 112, neither at
// 128; against the double reference, over several 16-key blocks, windows of 1-7 rows (groups and
// their remainders) and a tree mask.
const std::vector<AttnCase> kGroupWidthCases = {
    {"hd32",
     {4, 2, 32, 2, 48},
     false,
     {{{0, 1}, {0, 0}, 19}, {{1, 0}, {19, 19}, 7}, {{0}, {26}, 1}}},
    {"hd96", {2, 1, 96, 1, 44}, false, {{{0}, {0}, 21}, {{0}, {21}, 5}, {{0}, {26}, 6, true}}},
    {"hd112", {2, 2, 112, 1, 40}, false, {{{0}, {0}, 17}, {{0}, {17}, 7}, {{0}, {24}, 3}}},
    {"hd128", {2, 1, 128, 2, 40}, false, {{{1, 0}, {0, 0}, 18}, {{0, 1}, {18, 18}, 6}}},
};
// GQA/MQA, several sequences out of cache order with different pasts (seq 1 of 3 left alone).
const std::vector<AttnCase> kGqaCases = {
    {"gqa 6/2 seq {2,0}",
     {6, 2, 7, 3, 23},
     false,
     {{{2, 0}, {0, 0}, 5}, {{0}, {5}, 2}, {{2, 0}, {5, 7}, 3}, {{1, 2, 0}, {0, 8, 10}, 1}}},
    {"mqa 4/1", {4, 1, 8, 2, 17}, false, {{{1, 0}, {0, 0}, 6}, {{0, 1}, {6, 6}, 1}}},
    {"gqa 8/2 hd16 decode",
     {8, 2, 16, 4, 20},
     false,
     {{{3, 1, 0, 2}, {0, 0, 0, 0}, 9}, {{2, 0, 3, 1}, {9, 9, 9, 9}, 1}}},
};
// Tree verification masks after a causal prefill, then a rewind (past below what was written).
const std::vector<AttnCase> kTreeCases = {
    {"tree",
     {4, 2, 6, 2, 32},
     false,
     {{{1, 0}, {0, 0}, 4}, {{0, 1}, {4, 4}, 6, true}, {{1, 0}, {6, 5}, 5, true}}},
    {"tree mha hd3", {3, 3, 3, 3, 16}, false, {{{2}, {0}, 9, true}, {{0, 2}, {0, 9}, 4, true}}},
};
// Per-slot key visibility (caption padding), causal and with tree masks.
const std::vector<AttnCase> kKeyVisibleCases = {
    {"visible causal", {2, 1, 5, 2, 15}, true, {{{0, 1}, {0, 0}, 6}, {{1, 0}, {6, 6}, 2}}},
    {"visible tree", {4, 2, 4, 2, 24}, true, {{{1, 0}, {0, 0}, 5}, {{0, 1}, {5, 5}, 7, true}}},
};

}  // namespace

TEST(BackendOps, KvStore) {
  uint32_t seed = 100;
  for (const auto* cases : {&kCausalCases, &kGqaCases, &kTreeCases, &kKeyVisibleCases})
    for (const AttnCase& c : *cases) run_attention_case(c, seed++, false);
}

TEST(BackendOps, AttentionCausal) {
  uint32_t seed = 200;
  for (const AttnCase& c : kCausalCases) run_attention_case(c, seed++, true);
}

TEST(BackendOps, AttentionGroupKernelsAtEveryWidth) {
  uint32_t seed = 250;
  for (const AttnCase& c : kGroupWidthCases) run_attention_case(c, seed++, true);
}

TEST(BackendOps, AttentionGqaMultiSequence) {
  uint32_t seed = 300;
  for (const AttnCase& c : kGqaCases) run_attention_case(c, seed++, true);
}

TEST(BackendOps, AttentionTreeMask) {
  uint32_t seed = 400;
  for (const AttnCase& c : kTreeCases) run_attention_case(c, seed++, true);
}

TEST(BackendOps, AttentionKeyVisible) {
  uint32_t seed = 500;
  for (const AttnCase& c : kKeyVisibleCases) run_attention_case(c, seed++, true);
}

// Batch invariance of attention: a query row gives the same bits whether it is one of a window
// of new rows (verification) or the only new row (a decode step), whatever its position in the
// window, for head widths on each path: scalar at 5; AVX-512 row groups of 4 at 16-48, 3 values
// rows at 64, 2 at 96, scores only at 112, one row at a time at 128 and 144. With one head the
// window's rows are split between the threads.
TEST(BackendOps, AttentionRowDoesNotDependOnItsWindow) {
  for (const int hd : {5, 16, 32, 48, 64, 96, 112, 128, 144})
    for (const int H : {4, 1}) {
      SCOPED_TRACE("hd " + std::to_string(hd) + ", heads " + std::to_string(H));
      Rng rng(600 + hd + H);
      const int Hkv = H == 1 ? 1 : 2, cap = 60, past = 33, n_new = 7;
      const Shape cache_shape = {2, Hkv, cap, hd};
      const int64_t cache_n = shape_numel(cache_shape);
      Tensor kc = up(rng.normal(cache_n), cache_shape), vc = up(rng.normal(cache_n), cache_shape);
      const int64_t width = static_cast<int64_t>(H + 2 * Hkv) * hd, q_dim = int64_t{H} * hd;
      const Vec qkv = rng.normal(n_new * width);
      HostBatch window;
      window.n_new = n_new;
      window.seq = {1};
      window.past = {past};
      Tensor qt = up(qkv, {n_new, width});
      run_kv_store(be(), qt, H, Hkv, hd, window, kc, vc);
      Tensor out = be().empty(DType::F32, {n_new, q_dim});
      run_attention(be(), qt, H, Hkv, hd, window, kc, vc, out);
      const Vec all = down(out);
      for (int j = 0; j < n_new; ++j) {
        HostBatch one;
        one.n_new = 1;
        one.seq = {1};
        one.past = {past + j};
        Tensor q1 = up(Vec(qkv.begin() + j * width, qkv.begin() + (j + 1) * width), {1, width});
        Tensor o1 = be().empty(DType::F32, {1, q_dim});
        run_attention(be(), q1, H, Hkv, hd, one, kc, vc, o1);
        const Vec got = down(o1);
        for (int64_t e = 0; e < q_dim; ++e)
          ASSERT_EQ(got[e], all[j * q_dim + e]) << "row " << j << " element " << e;
      }
    }
}

// ================================================================================ MAE ops

namespace {
// y = (x - mean) / sqrt(var + eps) * gamma + beta per row (biased variance); scale =
// |gamma| (1 + |x^|) + |beta|: the normalised x^ carries an absolute error from the mean.
void ref_norm_row(const float* x, int64_t n, double eps, DVec& xhat) {
  double mean = 0.0, var = 0.0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= n;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= n;
  xhat.resize(n);
  for (int64_t i = 0; i < n; ++i) xhat[i] = (x[i] - mean) / std::sqrt(var + eps);
}
}  // namespace

TEST(BackendOps, LayerNorm) {
  // f32 mean and centred variance (~sqrt(D) u relative each), rsqrt, affine: 1e-5 of the scale.
  constexpr Tol kTol{1e-5, 0.0};
  Rng rng(20);
  int idx = 0;
  for (int64_t rows : {1, 3, 17})
    for (int64_t D : {1, 7, 33, 130, 1023}) {
      const int affine = idx++ % 4;  // none, gamma, gamma and beta, beta
      const bool has_g = affine == 1 || affine == 2, has_b = affine >= 2;
      SCOPED_TRACE(shape_label({{"rows", rows}, {"D", D}, {"gamma", has_g}, {"beta", has_b}}));
      const Vec x = rng.normal(rows * D, 2.0f, 3.0f);  // an offset: the two-pass variance matters
      const Vec g = rng.normal(D, 1.0f, 1.0f), b = rng.normal(D);
      Tensor gt = up(g, {D}), bt = up(b, {D}), y = be().empty(DType::F32, {rows, D});
      constexpr float eps = 1e-6f;
      be().layer_norm(up(x, {rows, D}), has_g ? &gt : nullptr, has_b ? &bt : nullptr, eps, y);
      DVec want(rows * D), scale(rows * D), xhat;
      for (int64_t r = 0; r < rows; ++r) {
        ref_norm_row(x.data() + r * D, D, eps, xhat);
        for (int64_t i = 0; i < D; ++i) {
          const double gi = has_g ? g[i] : 1.0, bi = has_b ? b[i] : 0.0;
          want[r * D + i] = xhat[i] * gi + bi;
          scale[r * D + i] = std::fabs(gi) * (1.0 + std::fabs(xhat[i])) + std::fabs(bi);
        }
      }
      EXPECT_TRUE(near("layer_norm", down(y), want, kTol, scale));
    }
}

TEST(BackendOps, GeluErf) {
  // 1 + erf(.) cancels for x < 0: error ~|x| ulp(1) (SIMD erff, a few ulp); bound 2e-6 |x|.
  constexpr Tol kTol{2e-6, 0.0};
  Rng rng(21);
  for (int64_t n : {1, 7, 15, 16, 17, 33, 4097}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const Vec x = activation_data(rng, n);
    Tensor t = up(x, {n});
    be().gelu_erf(t);
    DVec want(n), scale(n);
    for (int64_t i = 0; i < n; ++i) {
      want[i] = 0.5 * x[i] * (1.0 + std::erf(x[i] / std::sqrt(2.0)));
      scale[i] = std::fabs(x[i]);
    }
    EXPECT_TRUE(near("gelu_erf", down(t), want, kTol, scale));
  }
}

// Plain (MAR's) and with T5's extras: unscaled scores, a relative-position bias per head, and
// padding keys hidden (at least one key of each sequence stays visible, as T5's EOS does).
TEST(BackendOps, SelfAttention) {
  constexpr Tol kTol{1e-5, 1e-7};  // as attention
  Rng rng(22);
  for (const bool t5 : {false, true})
    for (int batch : {1, 2, 3})
      for (int64_t N : {1, 5, 17})
        for (int H : {1, 3})
          for (int hd : {1, 5, 16}) {
            SCOPED_TRACE(shape_label({{"batch", batch}, {"N", N}, {"H", H}, {"hd", hd}}) +
                         (t5 ? " with bias and key mask" : ""));
            const int64_t D = static_cast<int64_t>(H) * hd, rows = batch * N;
            const Vec qkv = rng.normal(rows * 3 * D), bias = rng.normal(H * N * N, 2.0f);
            std::vector<uint8_t> visible(static_cast<size_t>(rows), 1);
            if (t5)
              for (int64_t b = 0; b < batch; ++b)
                for (int64_t s = 1; s < N; ++s) visible[b * N + s] = rng.integer(0, 4) < 3 ? 1 : 0;
            Tensor bias_t = up(bias, {H, N, N});
            Tensor mask_t = be().upload(visible.data(), DType::U8, {batch, N});
            SelfAttentionExtras extras;
            if (t5) extras = {1.0f, &bias_t, &mask_t};
            Tensor out = be().empty(DType::F32, {rows, D});
            be().self_attention(up(qkv, {rows, 3 * D}), batch, H, hd, out, extras);
            // Token i of sequence b attends to the visible tokens of b; q, k, v blocks are
            // head-major.
            DVec want(rows * D, 0.0), scale(rows * D, 0.0);
            for (int64_t b = 0; b < batch; ++b)
              for (int64_t i = 0; i < N; ++i)
                for (int h = 0; h < H; ++h) {
                  const float* q = qkv.data() + (b * N + i) * 3 * D + h * hd;
                  DVec w(N, -INFINITY);
                  double mx = -INFINITY, z = 0.0;
                  for (int64_t s = 0; s < N; ++s) {
                    if (!visible[b * N + s]) continue;
                    const float* k = qkv.data() + (b * N + s) * 3 * D + D + h * hd;
                    double d = 0.0;
                    for (int e = 0; e < hd; ++e) d += static_cast<double>(q[e]) * k[e];
                    w[s] =
                        t5 ? d + bias[(h * N + i) * N + s] : d / std::sqrt(static_cast<double>(hd));
                    mx = std::max(mx, w[s]);
                  }
                  for (double& v : w) z += (v = std::exp(v - mx));
                  for (int64_t s = 0; s < N; ++s)
                    for (int e = 0; e < hd; ++e) {
                      const double v = qkv[(b * N + s) * 3 * D + 2 * D + h * hd + e];
                      want[(b * N + i) * D + h * hd + e] += w[s] / z * v;
                      scale[(b * N + i) * D + h * hd + e] += w[s] / z * std::fabs(v);
                    }
                }
            EXPECT_TRUE(near("self_attention", down(out), want, kTol, scale));
          }
}

TEST(BackendOps, Modulate) {
  // (1 + scale), a product, a sum: <= 3 u of |x (1 + scale)| + |shift|; bound 1e-6 of it.
  constexpr Tol kTol{1e-6, 0.0};
  Rng rng(23);
  for (int64_t n : kElementwiseN) {
    SCOPED_TRACE("n " + std::to_string(n));
    const Vec x = rng.normal(n, 2.0f), sh = rng.normal(n), sc = rng.normal(n, 0.5f);
    DVec want(n), scale(n);
    for (int64_t i = 0; i < n; ++i) {
      want[i] = x[i] * (1.0 + sc[i]) + sh[i];
      scale[i] = std::fabs(x[i] * (1.0 + sc[i])) + std::fabs(sh[i]) + std::fabs(x[i] * sc[i]);
    }
    Tensor xt = up(x, {n}), sht = up(sh, {n}), sct = up(sc, {n}), y = be().empty(DType::F32, {n});
    be().modulate(xt, sht, sct, y);
    const Vec separate = down(y);
    EXPECT_TRUE(near("modulate", separate, want, kTol, scale));
    be().modulate(xt, sht, sct, xt);  // y aliasing x: the same bits
    EXPECT_TRUE(same_bits(down(xt), separate)) << "aliased output";
  }
}

TEST(BackendOps, AddGated) {
  constexpr Tol kTol{1e-6, 0.0};  // a product and a sum: <= 2 u of |h| + |gate u|
  Rng rng(24);
  for (int64_t n : kElementwiseN) {
    SCOPED_TRACE("n " + std::to_string(n));
    const Vec h = rng.normal(n, 2.0f), g = rng.normal(n), u = rng.normal(n);
    Tensor ht = up(h, {n});
    be().add_gated(ht, up(g, {n}), up(u, {n}));
    DVec want(n), scale(n);
    for (int64_t i = 0; i < n; ++i) {
      want[i] = h[i] + static_cast<double>(g[i]) * u[i];
      scale[i] = std::fabs(h[i]) + std::fabs(static_cast<double>(g[i]) * u[i]);
    }
    EXPECT_TRUE(near("add_gated", down(ht), want, kTol, scale));
  }
}

TEST(BackendOps, AddRowsBroadcast) {
  // One f32 addition per value: exact, as add.
  Rng rng(25);
  const std::array<int64_t, 3> cases[] = {
      {1, 1, 1}, {2, 5, 7}, {3, 1, 33}, {3, 5, 1}, {2, 257, 129}};
  for (const auto& [batch, N, D] : cases) {
    SCOPED_TRACE(shape_label({{"batch", batch}, {"N", N}, {"D", D}}));
    const Vec x = rng.normal(batch * N * D), t = rng.normal(N * D);
    Tensor xt = up(x, {batch * N, D});
    be().add_rows_broadcast(xt, up(t, {N, D}));
    DVec want(x.size());
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < N * D; ++i)
        want[b * N * D + i] = static_cast<float>(static_cast<double>(x[b * N * D + i]) + t[i]);
    EXPECT_TRUE(near("add_rows_broadcast", down(xt), want, kExact));
  }
}

// ============================================================================ decoder ops

// The image decoders' convolutions give the same bits with one thread or two, at the sizes that
// split their products between threads (an emoji image's 32x32 and 64x64 layers). The product's
// column slices once followed the thread count, and OpenBLAS computed another slice shape with
// another summation order on some CPUs (an AMD EPYC with AVX-512): a decoded image then depended
// on the threads.
TEST(BackendOps, Conv2dThreadInvariant) {
  ThreadsGuard guard;
  Rng rng(31);
  for (const int64_t side : {32, 64}) {
    SCOPED_TRACE("side " + std::to_string(side));
    const int64_t C = 32, O = 48;
    const Vec x = rng.normal(C * side * side), w = rng.normal(O * C * 9, 0.1f),
              bias = rng.normal(O);
    std::vector<Vec> got;
    for (int threads : {1, 2}) {
      set_cpu_threads(threads);
      Tensor y = be().empty(DType::F32, {1, O, side, side});
      be().conv2d(up(x, {1, C, side, side}), up(w, {O, C, 3, 3}), up(bias, {O}), 1, y);
      got.push_back(down(y));
    }
    EXPECT_TRUE(same_bits(got[0], got[1]));
  }
}

TEST(BackendOps, Conv2d) {
  // SGEMM over C kh kw <= 100 terms: bound 2e-5 of |bias| + sum |w x| (as linear).
  constexpr Tol kTol{2e-5, 1e-7};
  struct Case {
    int64_t B, C, H, W, O, kh, kw, pad;
  };
  const Case cases[] = {{1, 1, 1, 1, 1, 1, 1, 0}, {2, 3, 5, 7, 4, 1, 1, 0},
                        {1, 3, 5, 7, 5, 3, 3, 1}, {2, 5, 6, 3, 7, 3, 3, 0},
                        {1, 2, 4, 5, 3, 2, 3, 1}, {1, 4, 9, 9, 3, 5, 5, 2},
                        {3, 1, 1, 1, 2, 3, 3, 1}, {1, 3, 7, 5, 2, 1, 1, 1}};
  Rng rng(30);
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_label({{"B", c.B},
                              {"C", c.C},
                              {"H", c.H},
                              {"W", c.W},
                              {"O", c.O},
                              {"kh", c.kh},
                              {"kw", c.kw},
                              {"pad", c.pad}}));
    const int64_t Ho = c.H + 2 * c.pad - c.kh + 1, Wo = c.W + 2 * c.pad - c.kw + 1;
    const Vec x = rng.normal(c.B * c.C * c.H * c.W), w = rng.normal(c.O * c.C * c.kh * c.kw, 0.3f),
              bias = rng.normal(c.O);
    Tensor y = be().empty(DType::F32, {c.B, c.O, Ho, Wo});
    be().conv2d(up(x, {c.B, c.C, c.H, c.W}), up(w, {c.O, c.C, c.kh, c.kw}), up(bias, {c.O}),
                static_cast<int>(c.pad), y);
    DVec want(y.numel()), scale(y.numel());
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t o = 0; o < c.O; ++o)
        for (int64_t oy = 0; oy < Ho; ++oy)
          for (int64_t ox = 0; ox < Wo; ++ox) {
            double s = bias[o], a = std::fabs(bias[o]);
            for (int64_t ci = 0; ci < c.C; ++ci)
              for (int64_t i = 0; i < c.kh; ++i)
                for (int64_t j = 0; j < c.kw; ++j) {
                  const int64_t iy = oy + i - c.pad, ix = ox + j - c.pad;
                  if (iy < 0 || iy >= c.H || ix < 0 || ix >= c.W) continue;  // zero padding
                  const double t = static_cast<double>(w[((o * c.C + ci) * c.kh + i) * c.kw + j]) *
                                   x[((b * c.C + ci) * c.H + iy) * c.W + ix];
                  s += t;
                  a += std::fabs(t);
                }
            want[((b * c.O + o) * Ho + oy) * Wo + ox] = s;
            scale[((b * c.O + o) * Ho + oy) * Wo + ox] = a;
          }
    EXPECT_TRUE(near("conv2d", down(y), want, kTol, scale));
  }
}

TEST(BackendOps, GroupNorm) {
  constexpr Tol kTol{1e-5, 0.0};  // as layer_norm (swish adds a few ulp)
  struct Case {
    int64_t B, C, H, W;
    int groups;
    bool swish;
  };
  const Case cases[] = {{1, 6, 3, 5, 1, false}, {2, 6, 3, 5, 2, true},  {1, 6, 1, 1, 3, false},
                        {3, 6, 7, 1, 6, true},  {1, 5, 4, 4, 5, false}, {2, 8, 5, 3, 4, true},
                        {1, 12, 9, 7, 3, true}};
  Rng rng(31);
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_label({{"B", c.B},
                              {"C", c.C},
                              {"H", c.H},
                              {"W", c.W},
                              {"groups", c.groups},
                              {"swish", c.swish}}));
    const int64_t hw = c.H * c.W, cpg = c.C / c.groups;
    const Vec x = rng.normal(c.B * c.C * hw, 2.0f, 1.0f), g = rng.normal(c.C, 1.0f, 1.0f),
              b = rng.normal(c.C);
    constexpr float eps = 1e-6f;
    Tensor y = be().empty(DType::F32, {c.B, c.C, c.H, c.W});
    be().group_norm(up(x, {c.B, c.C, c.H, c.W}), up(g, {c.C}), up(b, {c.C}), c.groups, eps, c.swish,
                    y);
    DVec want(x.size()), scale(x.size()), xhat;
    for (int64_t bi = 0; bi < c.B; ++bi)
      for (int gi = 0; gi < c.groups; ++gi) {
        const int64_t base = (bi * c.C + gi * cpg) * hw;  // a group is contiguous in NCHW
        ref_norm_row(x.data() + base, cpg * hw, eps, xhat);
        for (int64_t i = 0; i < cpg * hw; ++i) {
          const int64_t ch = gi * cpg + i / hw;
          double v = xhat[i] * g[ch] + b[ch];
          if (c.swish) v = v / (1.0 + std::exp(-v));
          want[base + i] = v;
          scale[base + i] = std::fabs(g[ch]) * (1.0 + std::fabs(xhat[i])) + std::fabs(b[ch]);
        }
      }
    EXPECT_TRUE(near("group_norm", down(y), want, kTol, scale));
  }
  Tensor x = be().zeros(DType::F32, {1, 6, 2, 2}), y = be().empty(DType::F32, {1, 6, 2, 2});
  Tensor g = be().zeros(DType::F32, {6});
  EXPECT_THROW(be().group_norm(x, g, g, 4, 1e-6f, false, y), Error);  // 6 channels, 4 groups
}

TEST(BackendOps, UpsampleNearest2x) {
  Rng rng(32);
  const std::array<int64_t, 4> cases[] = {{1, 1, 1, 1}, {2, 3, 5, 7}, {1, 5, 3, 1}};
  for (const auto& [B, C, H, W] : cases) {
    SCOPED_TRACE(shape_label({{"B", B}, {"C", C}, {"H", H}, {"W", W}}));
    const Vec x = rng.normal(B * C * H * W);
    Tensor y = be().empty(DType::F32, {B, C, 2 * H, 2 * W});
    be().upsample_nearest2x(up(x, {B, C, H, W}), y);
    DVec want(y.numel());
    for (int64_t bc = 0; bc < B * C; ++bc)
      for (int64_t i = 0; i < 2 * H; ++i)
        for (int64_t j = 0; j < 2 * W; ++j)
          want[(bc * 2 * H + i) * 2 * W + j] = x[(bc * H + i / 2) * W + j / 2];
    EXPECT_TRUE(near("upsample_nearest2x", down(y), want, kExact));
  }
}

TEST(BackendOps, BatchedMatmul) {
  constexpr Tol kTol{2e-5, 0.0};  // as linear, on |alpha| sum |a b|
  Rng rng(33);
  const std::array<int64_t, 3> shapes[] = {{1, 1, 1}, {3, 5, 7}, {17, 33, 5}, {2, 65, 9}};
  int idx = 0;
  for (int64_t batch : {1, 3})
    for (const auto& [M, K, N] : shapes)
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          const float alpha = std::array{1.0f, 0.37f, -2.0f}[idx++ % 3];
          SCOPED_TRACE(shape_label({{"batch", batch},
                                    {"M", M},
                                    {"K", K},
                                    {"N", N},
                                    {"trans_a", ta},
                                    {"trans_b", tb}}) +
                       " alpha " + std::to_string(alpha));
          const Vec a = rng.normal(batch * M * K), b = rng.normal(batch * K * N);
          // op(a)[m,k] = a[k,m] when transposed (a stored [batch, K, M]); likewise b.
          auto A = [&](int64_t i, int64_t m, int64_t k) {
            return static_cast<double>(ta ? a[(i * K + k) * M + m] : a[(i * M + m) * K + k]);
          };
          auto Bv = [&](int64_t i, int64_t k, int64_t n) {
            return static_cast<double>(tb ? b[(i * N + n) * K + k] : b[(i * K + k) * N + n]);
          };
          Tensor c = be().empty(DType::F32, {batch, M, N});
          be().batched_matmul(up(a, ta ? Shape{batch, K, M} : Shape{batch, M, K}), ta,
                              up(b, tb ? Shape{batch, N, K} : Shape{batch, K, N}), tb, alpha, c);
          DVec want(batch * M * N), scale(batch * M * N);
          for (int64_t i = 0; i < batch; ++i)
            for (int64_t m = 0; m < M; ++m)
              for (int64_t n = 0; n < N; ++n) {
                double s = 0.0, mag = 0.0;
                for (int64_t k = 0; k < K; ++k) {
                  s += A(i, m, k) * Bv(i, k, n);
                  mag += std::fabs(A(i, m, k) * Bv(i, k, n));
                }
                want[(i * M + m) * N + n] = alpha * s;
                scale[(i * M + m) * N + n] = std::fabs(alpha) * mag;
              }
          EXPECT_TRUE(near("batched_matmul", down(c), want, kTol, scale));
        }
}

TEST(BackendOps, SoftmaxRows) {
  // exp (<= 1 ulp) over a sum of n positive terms (~sqrt(n) u): 2e-5 relative for n <= 1023.
  constexpr Tol kTol{2e-5, 0.0};
  Rng rng(34);
  for (int64_t rows : {1, 3, 17})
    for (int64_t n : {1, 2, 7, 33, 1023}) {
      SCOPED_TRACE(shape_label({{"rows", rows}, {"n", n}}));
      Vec x = rng.normal(rows * n, 3.0f);
      for (int64_t i = 0; i < n; ++i) x[i] += 100.0f;  // row 0: exp overflows without the max
      Tensor t = up(x, {rows, n});
      be().softmax_rows(t);
      DVec want(x.size());
      for (int64_t r = 0; r < rows; ++r) {
        const double mx = *std::max_element(x.begin() + r * n, x.begin() + (r + 1) * n);
        double z = 0.0;
        for (int64_t i = 0; i < n; ++i) z += std::exp(x[r * n + i] - mx);
        for (int64_t i = 0; i < n; ++i) want[r * n + i] = std::exp(x[r * n + i] - mx) / z;
      }
      EXPECT_TRUE(near("softmax_rows", down(t), want, kTol));
    }
}

TEST(BackendOps, L2NormalizeRows) {
  // x / max(||x||, eps): a sum of n squares (~sqrt(n) u), sqrt and a division; 1e-5 relative.
  constexpr Tol kTol{1e-5, 0.0};
  Rng rng(35);
  for (int64_t rows : {1, 3, 17})
    for (int64_t n : {1, 7, 33, 1023})
      for (float eps : {1e-12f, 0.5f}) {
        SCOPED_TRACE(shape_label({{"rows", rows}, {"n", n}}) + " eps " + std::to_string(eps));
        Vec x = rng.normal(rows * n, 0.05f);                // norms below and above 0.5
        if (rows > 1) std::fill_n(x.begin() + n, n, 0.0f);  // a zero row stays zero
        Tensor t = up(x, {rows, n});
        be().l2_normalize_rows(t, eps);
        DVec want(x.size());
        for (int64_t r = 0; r < rows; ++r) {
          double ss = 0.0;
          for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[r * n + i]) * x[r * n + i];
          const double norm = std::max(std::sqrt(ss), static_cast<double>(eps));
          for (int64_t i = 0; i < n; ++i) want[r * n + i] = x[r * n + i] / norm;
        }
        EXPECT_TRUE(near("l2_normalize_rows", down(t), want, kTol));
      }
}

TEST(BackendOps, TransposeLast2) {
  Rng rng(36);
  const Shape shapes[] = {{1, 1}, {3, 5}, {2, 3, 5}, {2, 2, 7, 3}};
  for (const Shape& s : shapes) {
    SCOPED_TRACE(shape_str(s));
    const int64_t M = s[s.size() - 2], N = s.back(), batch = shape_numel(s) / (M * N);
    Shape ts = s;
    std::swap(ts[ts.size() - 2], ts.back());
    const Vec x = rng.normal(shape_numel(s));
    Tensor y = be().empty(DType::F32, ts);
    be().transpose_last2(up(x, s), y);
    DVec want(x.size());
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) want[(b * N + n) * M + m] = x[(b * M + m) * N + n];
    EXPECT_TRUE(near("transpose_last2", down(y), want, kExact));
  }
}

TEST(BackendOps, Relu) {
  Rng rng(37);
  Vec x = rng.normal(101);
  x[3] = 0.0f;
  x[4] = -0.0f;
  Tensor t = up(x, {101});
  be().relu(t);
  DVec want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = x[i] > 0 ? x[i] : 0.0;
  EXPECT_TRUE(near("relu", down(t), want, kExact));
}

// Both 2x2 pools over even and odd sizes (an odd last row/column is dropped, PyTorch's floor).
TEST(BackendOps, Pool2x2) {
  constexpr Tol kAvgTol{3e-7, 0.0};  // three f32 additions and a rounding, on sum |x| / 4
  Rng rng(38);
  const std::array<int64_t, 4> cases[] = {{1, 1, 2, 2}, {2, 3, 6, 4}, {1, 5, 7, 5}, {3, 2, 1, 4}};
  for (const auto& [B, C, H, W] : cases) {
    SCOPED_TRACE(shape_label({{"B", B}, {"C", C}, {"H", H}, {"W", W}}));
    const Vec x = rng.normal(B * C * H * W);
    const int64_t Ho = H / 2, Wo = W / 2;
    Tensor ymax = be().empty(DType::F32, {B, C, Ho, Wo}),
           yavg = be().empty(DType::F32, {B, C, Ho, Wo});
    const Tensor xt = up(x, {B, C, H, W});
    be().max_pool2x2(xt, ymax);
    be().avg_pool2x2(xt, yavg);
    DVec want_max(ymax.numel()), want_avg(yavg.numel()), scale(yavg.numel());
    for (int64_t bc = 0; bc < B * C; ++bc)
      for (int64_t i = 0; i < Ho; ++i)
        for (int64_t j = 0; j < Wo; ++j) {
          double mx = -INFINITY, sum = 0, mag = 0;
          for (int64_t di = 0; di < 2; ++di)
            for (int64_t dj = 0; dj < 2; ++dj) {
              const double v = x[(bc * H + 2 * i + di) * W + 2 * j + dj];
              mx = std::max(mx, v);
              sum += v;
              mag += std::fabs(v);
            }
          const int64_t o = (bc * Ho + i) * Wo + j;
          want_max[o] = mx;
          want_avg[o] = sum / 4;
          scale[o] = mag / 4;
        }
    EXPECT_TRUE(near("max_pool2x2", down(ymax), want_max, kExact));
    EXPECT_TRUE(near("avg_pool2x2", down(yavg), want_avg, kAvgTol, scale));
  }
  Tensor x = be().zeros(DType::F32, {1, 1, 4, 4}), bad = be().empty(DType::F32, {1, 1, 3, 2});
  EXPECT_THROW(be().max_pool2x2(x, bad), Error);
}
