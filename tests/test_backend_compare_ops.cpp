// Every op of the Backend interface (src/tensor/backend.h) run on a backend under test and on the
// CPU backend from the same random inputs, compared (ggml's test-backend-ops). Shapes are odd on
// purpose (not multiples of 8/16/32: the tails of vector and tile loops). Inputs go to each
// backend with upload and results come back with download: a device backend's tensors are never
// read on the host. The double-precision contract of each op is tests/test_backend_ops.cpp's; here
// the CPU backend is the reference.
//
// Tolerances for a backend that is not the CPU (the cpu2 self-check must match bits). u = 2^-24.
//   op                          rel    abs    scale     why
//   memory, get_rows, add,      0      0      -         copies, exact conversions to f32, one
//   kv_store, relu, upsample,                           IEEE operation per value: no rounding
//   transpose, max_pool,                                freedom at all
//   add_rows_broadcast
//   linear f32/f16 weights,     2e-5   1e-6   normwise  K-term f32 dot products summed in another
//   batched_matmul, conv2d                              order: a few sqrt(K) u of the largest
//   linear bf16 weights when    1e-2   1e-6   normwise  bf16 activations (2^-9 each) against f32
//   only one side rounds x                              ones: the 1e-2 bf16 logit target
//   rms_norm, layer_norm,       1e-5   1e-6   element   a reduction; rsqrt/exp/erf/tanh of
//   group_norm, softmax, l2,                            another math library (a few ulp), fma
//   silu, gelu_*, swiglu*, rope
//   modulate, add_gated,        1e-6   1e-6   element   two roundings, maybe fused into one fma
//   avg_pool
//   linear_swiglu               5e-5   1e-6   normwise  linear's error through silu
//   attention, self_attention   1e-5   1e-5   normwise  exp and a weighted sum over up to a few
//                                                       thousand keys; an output averages unit
//                                                       values so its error is ~u * sum p|v| <= 1
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends_under_test.h"
#include "tensor/dtype.h"
#include "tessera/error.h"

using namespace tessera;
using namespace tessera::testing_backends;

namespace {

using Vec = std::vector<float>;
using Ids = std::vector<int32_t>;
using Bytes = std::vector<uint8_t>;

constexpr Tol kExact{0.0, 0.0};
constexpr Tol kDot{2e-5, 1e-6, true};
constexpr Tol kDotBf16Rounded{1e-2, 1e-6, true};
constexpr Tol kMath{1e-5, 1e-6};
constexpr Tol kFma{1e-6, 1e-6};
constexpr Tol kLinearSwiglu{5e-5, 1e-6, true};
constexpr Tol kAttention{1e-5, 1e-5, true};

constexpr DType kWeightTypes[] = {DType::F32, DType::F16, DType::BF16};

struct Rng {
  std::mt19937 g;
  explicit Rng(uint32_t seed) : g(seed) {}
  Vec normal(int64_t n, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    Vec v(static_cast<size_t>(n));
    for (float& x : v) x = d(g);
    return v;
  }
  int integer(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); }
  bool coin(double p) { return std::bernoulli_distribution(p)(g); }
};

Tensor up(Backend& b, const Vec& v, Shape s) {
  return b.upload(v.data(), DType::F32, std::move(s));
}

// v stored as dtype (the bytes a model file would hold).
Tensor up_as(Backend& b, const Vec& v, DType dt, Shape s) {
  Bytes bytes(v.size() * dtype_size(dt));
  convert_from_f32(v.data(), dt, bytes.data(), v.size());
  return b.upload(bytes.data(), dt, std::move(s));
}

Vec down(Backend& b, const Tensor& t) {
  Vec v(static_cast<size_t>(t.numel()));
  b.download(t, v.data());
  return v;
}

Bytes down_bytes(Backend& b, const Tensor& t) {
  Bytes v(t.nbytes());
  b.download(t, v.data());
  return v;
}

std::string dtype_label(DType dt) {
  return dt == DType::F32 ? "f32" : dt == DType::F16 ? "f16" : "bf16";
}

class Ops : public BackendTest {
 protected:
  // Runs `op` (host inputs in, host outputs out) on the reference and on the backend under test
  // and compares the outputs.
  void check(const std::string& op, Tol tol, const std::function<Vec(Backend&)>& run) {
    const Vec want = run(ref());
    const Vec got = run(backend());
    EXPECT_TRUE(same(op, got, want, tol));
  }
};

// ================================================================================== memory

TEST_P(Ops, UploadDownloadEveryDtype) {
  Rng rng(1);
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::U8}) {
    SCOPED_TRACE(static_cast<int>(dt));
    Bytes host(37 * 5 * dtype_size(dt));
    for (auto& x : host) x = static_cast<uint8_t>(rng.g());
    Tensor t = backend().upload(host.data(), dt, {37, 5});
    EXPECT_EQ(down_bytes(backend(), t), host);
    Bytes other(host.size());
    for (auto& x : other) x = static_cast<uint8_t>(rng.g());
    backend().upload_into(other.data(), t);
    Bytes back(host.size());
    backend().download_async(t, back.data());
    backend().synchronize();
    EXPECT_EQ(back, other);
    Tensor z = backend().zeros(dt, {3, 7, 11});
    EXPECT_EQ(down_bytes(backend(), z), Bytes(z.nbytes(), 0));
    Tensor e = backend().empty(dt, {13, 3});
    EXPECT_EQ(e.nbytes(), 13 * 3 * dtype_size(dt));
  }
}

TEST_P(Ops, AdoptHostToF32AndCopy) {
  Rng rng(2);
  const Vec v = rng.normal(29 * 17, 3.0f);
  for (DType dt : kWeightTypes) {
    SCOPED_TRACE(dtype_label(dt));
    auto bytes = std::make_shared<Bytes>(v.size() * dtype_size(dt));
    convert_from_f32(v.data(), dt, bytes->data(), v.size());
    check("adopt_host+to_f32", kExact, [&](Backend& b) {
      Tensor t = b.adopt_host(bytes->data(), dt, {29, 17}, bytes);
      return down(b, b.to_f32(t));
    });
    check("copy", kExact, [&](Backend& b) {
      Tensor src = up_as(b, v, dt, {29, 17}), dst = b.zeros(dt, {17, 29});
      b.copy(src, dst);
      return down(b, b.to_f32(dst));
    });
  }
}

// ================================================================================== transformer

TEST_P(Ops, LinearEveryDtype) {
  struct Case {
    int64_t M, K, N;
  };
  // K % 8 == 0 with M <= 16 takes the CUDA backend's small-M kernel (several tiles in flight,
  // K spanning more than one group of them); the others its general kernel.
  const Case cases[] = {{1, 7, 5},     {3, 67, 33},   {13, 129, 47}, {61, 257, 37},
                        {70, 95, 131}, {1, 384, 37},  {2, 1280, 65}, {5, 1032, 17},
                        {16, 264, 9},  {9, 2056, 33}, {40, 384, 21}};
  Rng rng(3);
  const bool rounds_differ =
      backend().linear_rounds_bf16_activations() != ref().linear_rounds_bf16_activations();
  for (DType dt : kWeightTypes)
    for (const Case& c : cases)
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(dtype_label(dt) + " M " + std::to_string(c.M) + " K " + std::to_string(c.K) +
                     " N " + std::to_string(c.N) + (with_bias ? " bias" : ""));
        const Vec x = rng.normal(c.M * c.K), w = rng.normal(c.N * c.K, 0.2f),
                  bias = rng.normal(c.N);
        const Tol tol = dt == DType::BF16 && rounds_differ ? kDotBf16Rounded : kDot;
        check("linear", tol, [&](Backend& b) {
          // Packed as a model packs its weights at load.
          Tensor wt = b.pack_linear_weight(up_as(b, w, dt, {c.N, c.K}));
          Tensor bt = up(b, bias, {c.N}), y = b.empty(DType::F32, {c.M, c.N});
          b.linear(up(b, x, {c.M, c.K}), wt, with_bias ? &bt : nullptr, y);
          return down(b, y);
        });
      }
}

// Batch invariance (backend.h): each output row of linear has the bits it has when its row of x
// is multiplied alone, whatever M, across the row counts where a backend switches kernels.
TEST_P(Ops, LinearRowsDoNotDependOnTheBatch) {
  Rng rng(31);
  Backend& b = backend();
  for (DType dt : kWeightTypes)
    for (const int64_t K : {int64_t{264}, int64_t{1032}}) {
      const int64_t N = 19, M = 70;
      const Vec x = rng.normal(M * K), w = rng.normal(N * K, 0.2f);
      Tensor wt = b.pack_linear_weight(up_as(b, w, dt, {N, K}));
      Tensor xt = up(b, x, {M, K});
      Tensor alone = b.empty(DType::F32, {1, N});
      for (const int64_t m : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}, int64_t{16},
                              int64_t{17}, int64_t{64}, int64_t{70}}) {
        SCOPED_TRACE(dtype_label(dt) + " K " + std::to_string(K) + " M " + std::to_string(m));
        Tensor y = b.empty(DType::F32, {m, N});
        b.linear(xt.rows(0, m), wt, nullptr, y);
        const Vec all = down(b, y);
        for (const int64_t r : {int64_t{0}, m / 2, m - 1}) {
          b.linear(xt.rows(r, 1), wt, nullptr, alone);
          const Vec one = down(b, alone);
          EXPECT_EQ(0, std::memcmp(one.data(), all.data() + r * N, N * sizeof(float)))
              << "row " << r;
        }
      }
    }
}

TEST_P(Ops, GetRowsEveryDtype) {
  Rng rng(4);
  const Vec table = rng.normal(37 * 45);
  Ids ids(23);
  for (auto& i : ids) i = rng.integer(0, 36);
  ids[0] = 36;
  ids[1] = ids[2] = 0;  // repeats
  for (DType dt : kWeightTypes) {
    SCOPED_TRACE(dtype_label(dt));
    check("get_rows", kExact, [&](Backend& b) {
      Tensor out = b.empty(DType::F32, {23, 45});
      b.get_rows(up_as(b, table, dt, {37, 45}), upload_ids(b, ids), out);
      return down(b, out);
    });
  }
}

TEST_P(Ops, RowNorms) {
  Rng rng(5);
  for (int64_t rows : {1, 5, 17})
    for (int64_t D : {7, 33, 385}) {
      SCOPED_TRACE("rows " + std::to_string(rows) + " D " + std::to_string(D));
      const Vec x = rng.normal(rows * D, 2.0f), g = rng.normal(D), bta = rng.normal(D);
      check("rms_norm", kMath, [&](Backend& b) {
        Tensor y = b.empty(DType::F32, {rows, D});
        b.rms_norm(up(b, x, {rows, D}), up(b, g, {D}), 1e-5f, y);
        return down(b, y);
      });
      for (bool affine : {false, true})
        check("layer_norm", kMath, [&](Backend& b) {
          Tensor gt = up(b, g, {D}), bt = up(b, bta, {D}), y = b.empty(DType::F32, {rows, D});
          b.layer_norm(up(b, x, {rows, D}), affine ? &gt : nullptr, affine ? &bt : nullptr, 1e-6f,
                       y);
          return down(b, y);
        });
      check("softmax_rows", kMath, [&](Backend& b) {
        Tensor t = up(b, x, {rows, D});
        b.softmax_rows(t);
        return down(b, t);
      });
      check("l2_normalize_rows", kMath, [&](Backend& b) {
        Tensor t = up(b, x, {rows, D});
        b.l2_normalize_rows(t, 1e-12f);
        return down(b, t);
      });
    }
}

TEST_P(Ops, ElementWise) {
  Rng rng(6);
  for (int64_t n : {1, 7, 33, 1001}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const Vec a = rng.normal(n, 3.0f), c = rng.normal(n), d = rng.normal(n, 0.5f);
    check("add", kExact, [&](Backend& b) {
      Tensor at = up(b, a, {n}), y = b.empty(DType::F32, {n});
      b.add(at, up(b, c, {n}), y);
      b.add(at, y, at);  // into its input
      Vec out = down(b, y), aliased = down(b, at);
      out.insert(out.end(), aliased.begin(), aliased.end());
      return out;
    });
    check("swiglu", kMath, [&](Backend& b) {
      Tensor y = b.empty(DType::F32, {n});
      b.swiglu(up(b, a, {n}), up(b, c, {n}), y);
      return down(b, y);
    });
    using Unary = void (Backend::*)(Tensor&);
    const std::pair<const char*, Unary> unary[] = {{"silu", &Backend::silu},
                                                   {"gelu_tanh", &Backend::gelu_tanh},
                                                   {"gelu_erf", &Backend::gelu_erf},
                                                   {"relu", &Backend::relu}};
    for (const auto& [name, fn] : unary)
      check(name, std::string(name) == "relu" ? kExact : kMath, [&, fn = fn](Backend& b) {
        Tensor t = up(b, a, {n});
        (b.*fn)(t);
        return down(b, t);
      });
    check("modulate", kFma, [&](Backend& b) {
      Tensor xt = up(b, a, {n}), sh = up(b, c, {n}), sc = up(b, d, {n});
      Tensor y = b.empty(DType::F32, {n});
      b.modulate(xt, sh, sc, y);
      b.modulate(xt, sh, sc, xt);  // into its input
      Vec out = down(b, y), aliased = down(b, xt);
      out.insert(out.end(), aliased.begin(), aliased.end());
      return out;
    });
    check("add_gated", kFma, [&](Backend& b) {
      Tensor h = up(b, a, {n});
      b.add_gated(h, up(b, c, {n}), up(b, d, {n}));
      return down(b, h);
    });
  }
}

// Rows moved within a tensor, every read before any write: a compaction's chain (a row both a
// source and a later destination), scattered pairs, 4-byte rows and odd byte widths.
TEST_P(Ops, MoveRows) {
  Rng rng(17);
  const int64_t rows = 40;
  const std::vector<int32_t> from = {3, 4, 6, 7, 30, 0, 12}, to = {2, 3, 4, 5, 31, 12, 39};
  for (const auto& [dt, width] :
       {std::pair{DType::F32, int64_t{6}}, {DType::U8, int64_t{7}}, {DType::BF16, int64_t{5}}}) {
    SCOPED_TRACE(std::string(dtype_name(dt)) + " width " + std::to_string(width));
    Bytes bytes(static_cast<size_t>(rows * width) * dtype_size(dt));
    for (auto& b : bytes) b = static_cast<uint8_t>(rng.integer(0, 255));
    const Bytes want = [&] {
      Backend& b = ref();
      Tensor t = b.upload(bytes.data(), dt, {rows, width});
      b.move_rows(t, b.upload(from.data(), DType::I32, {7}), b.upload(to.data(), DType::I32, {7}));
      return down_bytes(b, t);
    }();
    Backend& b = backend();
    Tensor t = b.upload(bytes.data(), dt, {rows, width});
    b.move_rows(t, b.upload(from.data(), DType::I32, {7}), b.upload(to.data(), DType::I32, {7}));
    EXPECT_EQ(down_bytes(b, t), want);
    // The reference itself: row 39 got row 12's old bytes, not row 0's moved there first.
    const size_t rb = static_cast<size_t>(width) * dtype_size(dt);
    EXPECT_EQ(0, std::memcmp(want.data() + 3 * rb, bytes.data() + 4 * rb, rb));
    EXPECT_EQ(0, std::memcmp(want.data() + 12 * rb, bytes.data() + 0 * rb, rb));
    EXPECT_EQ(0, std::memcmp(want.data() + 39 * rb, bytes.data() + 12 * rb, rb));
  }
}

// A tensor larger than the device's memory is one error naming the sizes, before anything is
// allocated, and the backend works on afterwards (CUDA: cudaMallocAsync's error is cleared).
TEST_P(Ops, AllocationLargerThanTheMemoryIsAnError) {
  Backend& b = backend();
  const int64_t rows = b.available_memory() / (int64_t{1} << 20) + (int64_t{1} << 20);
  try {
    (void)b.empty(DType::F32, {rows, 1 << 18});  // rows MiB: a TiB more than is free
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(rows) + " MiB tensor"), std::string::npos) << m;
  }
  const std::vector<float> x = {1.0f, 2.0f, 3.0f};
  std::vector<float> back(3);
  b.download(b.upload(x.data(), DType::F32, {3}), back.data());
  EXPECT_EQ(back, x);
}

// Rows copied from one buffer into another whose rows hold as many bytes (another dtype and
// width): I32 tokens into a forward's inputs, U8 rows into F32 pairs, odd byte widths; a source
// row copied twice. Rows not named keep their bytes.
TEST_P(Ops, CopyRows) {
  Rng rng(18);
  struct Case {
    DType src_dt;
    int64_t src_rows, src_width;
    DType dst_dt;
    int64_t dst_rows, dst_width;
  };
  const std::vector<int32_t> from = {0, 5, 2, 2, 8, 1}, to = {7, 0, 3, 11, 2, 6};
  for (const Case& c :
       {Case{DType::I32, 9, 1, DType::I32, 12, 1}, Case{DType::U8, 10, 8, DType::F32, 13, 2},
        Case{DType::U8, 9, 3, DType::U8, 14, 3}}) {
    SCOPED_TRACE(std::string(dtype_name(c.src_dt)) + " to " + dtype_name(c.dst_dt));
    auto random_bytes = [&](size_t n) {
      Bytes b(n);
      for (auto& x : b) x = static_cast<uint8_t>(rng.integer(0, 255));
      return b;
    };
    const size_t rb = static_cast<size_t>(c.src_width) * dtype_size(c.src_dt);
    const Bytes src = random_bytes(static_cast<size_t>(c.src_rows) * rb);
    const Bytes dst = random_bytes(static_cast<size_t>(c.dst_rows) * rb);
    auto run = [&](Backend& b) {
      const Tensor s = b.upload(src.data(), c.src_dt, {c.src_rows, c.src_width});
      Tensor d = b.upload(dst.data(), c.dst_dt, {c.dst_rows, c.dst_width});
      b.copy_rows(s, b.upload(from.data(), DType::I32, {6}), d,
                  b.upload(to.data(), DType::I32, {6}));
      return down_bytes(b, d);
    };
    const Bytes want = run(ref());
    EXPECT_EQ(run(backend()), want);
    for (int64_t r = 0; r < c.dst_rows; ++r) {
      const auto it = std::find(to.begin(), to.end(), static_cast<int32_t>(r));
      const uint8_t* expect =
          it == to.end() ? dst.data() + r * rb : src.data() + from[it - to.begin()] * rb;
      EXPECT_EQ(0, std::memcmp(want.data() + r * rb, expect, rb)) << "row " << r;
    }
  }
}

TEST_P(Ops, AddScalarI32) {
  Rng rng(16);
  for (int64_t n : {1, 7, 1001}) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int32_t& x : v) x = rng.integer(-1000, 1000);
    check("add_scalar_i32 n " + std::to_string(n), kExact, [&](Backend& b) {
      Tensor t = b.upload(v.data(), DType::I32, {n});
      b.add_scalar_i32(t, 3);
      b.add_scalar_i32(t, -1);
      std::vector<int32_t> out(static_cast<size_t>(n));
      b.download(t, out.data());
      return Vec(out.begin(), out.end());
    });
  }
}

TEST_P(Ops, SwigluStackedAndFused) {
  Rng rng(7);
  for (int64_t rows : {1, 5, 19})
    for (int64_t F : {3, 37}) {
      const int64_t K = 53;
      SCOPED_TRACE("rows " + std::to_string(rows) + " F " + std::to_string(F));
      const Vec gu = rng.normal(rows * 2 * F, 2.0f), x = rng.normal(rows * K);
      const Vec w13 = rng.normal(2 * F * K, 0.2f);
      check("swiglu_stacked", kMath, [&](Backend& b) {
        Tensor y = b.empty(DType::F32, {rows, F});
        b.swiglu_stacked(up(b, gu, {rows, 2 * F}), y);
        return down(b, y);
      });
      check("geglu_stacked", kMath, [&](Backend& b) {
        Tensor y = b.empty(DType::F32, {rows, F});
        b.geglu_stacked(up(b, gu, {rows, 2 * F}), y);
        return down(b, y);
      });
      for (DType dt : kWeightTypes)
        check("linear_swiglu " + dtype_label(dt),
              dt == DType::BF16 && backend().linear_rounds_bf16_activations() !=
                                       ref().linear_rounds_bf16_activations()
                  ? kDotBf16Rounded
                  : kLinearSwiglu,
              [&](Backend& b) {
                Tensor w = b.pack_linear_weight(up_as(b, w13, dt, {2 * F, K}));
                Tensor scratch = b.empty(DType::F32, {rows, 2 * F}),
                       y = b.empty(DType::F32, {rows, F});
                b.linear_swiglu(up(b, x, {rows, K}), w, scratch, y);
                return down(b, y);
              });
    }
}

TEST_P(Ops, Rope) {
  Rng rng(8);
  constexpr int kPositions = 23;
  for (int hd : {2, 6, 10, 64})
    for (int n_rot : {0, 3, 5})
      for (int64_t rows : {1, 17}) {
        SCOPED_TRACE("hd " + std::to_string(hd) + " n_rot " + std::to_string(n_rot) + " rows " +
                     std::to_string(rows));
        const int64_t width = 7 * hd;
        Vec table(kPositions * (hd / 2) * 2);
        for (size_t i = 0; i < table.size(); i += 2) {
          const float th = std::uniform_real_distribution<float>(-3.2f, 3.2f)(rng.g);
          table[i] = std::cos(th);
          table[i + 1] = std::sin(th);
        }
        Ids pos(rows);
        for (auto& p : pos) p = rng.integer(0, kPositions - 1);
        const Vec x = rng.normal(rows * width);
        check("rope", kMath, [&](Backend& b) {
          Tensor t = up(b, x, {rows, width});
          b.rope(t, n_rot, hd, up(b, table, {kPositions, hd / 2, 2}), upload_ids(b, pos));
          return down(b, t);
        });
      }
}

// ================================================================================== attention

struct AttnStep {
  Ids seq, past;
  int n_new = 1;
  bool tree = false;   // an explicit random tree mask (else causal)
  bool attend = true;  // false: kv_store only (filling a long context)
};

struct AttnCase {
  const char* name;
  int H, Hkv, hd, n_seq_cache, capacity;
  bool key_visible;
  std::vector<AttnStep> steps;
};

// A random draft tree over each sequence's new slots in topological order: node j sees most past
// slots, its ancestors and itself. Entries after its own slot and the stride's padding are junk.
void random_tree_mask(Rng& rng, const AttnStep& st, Bytes& mask, int& stride) {
  const int n_seq = static_cast<int>(st.seq.size());
  stride = *std::max_element(st.past.begin(), st.past.end()) + st.n_new + 3;
  mask.resize(static_cast<size_t>(n_seq) * st.n_new * stride);
  for (auto& m : mask) m = rng.coin(0.5) ? 1 : 0;
  for (int r = 0; r < n_seq; ++r) {
    std::vector<int> parent(st.n_new);
    for (int j = 0; j < st.n_new; ++j) parent[j] = rng.integer(-1, j - 1);
    for (int j = 0; j < st.n_new; ++j) {
      uint8_t* m = mask.data() + (static_cast<int64_t>(r) * st.n_new + j) * stride;
      for (int s = 0; s < st.past[r]; ++s) m[s] = rng.coin(0.85) ? 1 : 0;
      for (int i = 0; i <= j; ++i) m[st.past[r] + i] = 0;
      for (int a = j; a >= 0; a = parent[a]) m[st.past[r] + a] = 1;
    }
  }
}

const std::vector<AttnCase> kAttnCases = {
    {"causal prefill+decode", 3, 3, 5, 1, 19, false, {{{0}, {0}, 7}, {{0}, {7}, 1}, {{0}, {8}, 3}}},
    {"causal hd64 two seqs", 4, 4, 64, 2, 70, false, {{{0, 1}, {0, 0}, 37}, {{1, 0}, {37, 37}, 6}}},
    {"gqa 6/2, pasts differ",
     6,
     2,
     7,
     3,
     23,
     false,
     {{{2, 0}, {0, 0}, 5}, {{0}, {5}, 2}, {{2, 0}, {5, 7}, 3}, {{1, 2, 0}, {0, 8, 10}, 1}}},
    {"mqa 4/1 hd48", 4, 1, 48, 2, 41, false, {{{1, 0}, {0, 0}, 19}, {{0, 1}, {19, 19}, 1}}},
    {"tree mask",
     4,
     2,
     6,
     2,
     32,
     false,
     {{{1, 0}, {0, 0}, 4}, {{0, 1}, {4, 4}, 6, true}, {{1, 0}, {6, 5}, 5, true}}},
    {"tree hd96", 2, 1, 96, 1, 44, false, {{{0}, {0}, 21}, {{0}, {21}, 5, true}}},
    {"key_visible causal", 2, 1, 5, 2, 15, true, {{{0, 1}, {0, 0}, 6}, {{1, 0}, {6, 6}, 2}}},
    {"key_visible tree", 4, 2, 4, 2, 24, true, {{{1, 0}, {0, 0}, 5}, {{0, 1}, {5, 5}, 7, true}}},
    // A few thousand keys (split over keys on a GPU): filled by kv_store, then verified.
    {"long context gqa",
     4,
     2,
     64,
     2,
     3001,
     false,
     {{{0, 1}, {0, 0}, 2987, false, false}, {{1, 0}, {2987, 2987}, 5}, {{0}, {2992}, 3, true}}},
};

TEST_P(Ops, KvStoreAndAttention) {
  uint32_t seed = 100;
  for (const AttnCase& c : kAttnCases) {
    SCOPED_TRACE(c.name);
    Rng rng(seed++);
    const Shape cache_shape = {c.n_seq_cache, c.Hkv, c.capacity, c.hd};
    const int64_t cache_n = shape_numel(cache_shape);
    const Vec k0 = rng.normal(cache_n), v0 = rng.normal(cache_n);  // junk to start
    Bytes visible(static_cast<size_t>(c.n_seq_cache) * c.capacity);
    for (auto& f : visible) f = rng.coin(0.7) ? 1 : 0;
    const int64_t width = static_cast<int64_t>(c.H + 2 * c.Hkv) * c.hd;
    struct HostStep {
      Vec qkv;
      Bytes mask;
      int stride = 0;
    };
    std::vector<HostStep> host(c.steps.size());
    for (size_t i = 0; i < c.steps.size(); ++i) {
      const AttnStep& st = c.steps[i];
      host[i].qkv = rng.normal(static_cast<int64_t>(st.seq.size()) * st.n_new * width);
      if (st.tree) random_tree_mask(rng, st, host[i].mask, host[i].stride);
    }
    // Outputs per step (the attention's), then both caches at the end.
    auto run = [&](Backend& b) {
      std::vector<Vec> outs;
      Tensor kc = up(b, k0, cache_shape), vc = up(b, v0, cache_shape);
      Tensor vis = b.upload(visible.data(), DType::U8, {c.n_seq_cache, c.capacity});
      for (size_t i = 0; i < c.steps.size(); ++i) {
        const AttnStep& st = c.steps[i];
        const int64_t rows = static_cast<int64_t>(st.seq.size()) * st.n_new;
        AttentionBatch ab;
        ab.n_seq = static_cast<int>(st.seq.size());
        ab.n_new = st.n_new;
        ab.seq = upload_ids(b, st.seq);
        ab.past = upload_ids(b, st.past);
        if (st.tree) {
          ab.mask =
              b.upload(host[i].mask.data(), DType::U8, {static_cast<int64_t>(host[i].mask.size())});
          ab.mask_stride = host[i].stride;
        }
        ab.key_visible = c.key_visible ? &vis : nullptr;
        Tensor qkv = up(b, host[i].qkv, {rows, width});
        b.kv_store(qkv, c.H, c.Hkv, c.hd, ab, kc, vc);
        if (!st.attend) continue;
        Tensor out = b.empty(DType::F32, {rows, static_cast<int64_t>(c.H) * c.hd});
        b.attention(qkv, c.H, c.Hkv, c.hd, ab, kc, vc, out);
        outs.push_back(down(b, out));
      }
      outs.push_back(down(b, kc));
      outs.push_back(down(b, vc));
      return outs;
    };
    const auto want = run(ref()), got = run(backend());
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i + 2 < want.size(); ++i)
      EXPECT_TRUE(
          same("attention (output " + std::to_string(i) + ")", got[i], want[i], kAttention));
    EXPECT_TRUE(same("kv_store k cache", got[want.size() - 2], want[want.size() - 2], kExact));
    EXPECT_TRUE(same("kv_store v cache", got[want.size() - 1], want[want.size() - 1], kExact));
  }
}

// Tree masks expanded from parents where the backend runs: the backend's bytes against the
// reference's, and the reference's against the ancestor closure written here.
TEST_P(Ops, ExpandTreeMask) {
  Rng rng(31);
  for (int n_new : {1, 2, 7, 40}) {
    SCOPED_TRACE("n_new " + std::to_string(n_new));
    const int n_seq = 3;
    std::vector<int32_t> parents(static_cast<size_t>(n_seq) * n_new), past(n_seq);
    int stride = 0;
    for (int r = 0; r < n_seq; ++r) {
      past[r] = rng.integer(0, 50);
      stride = std::max(stride, past[r] + n_new);
      for (int a = 0; a < n_new; ++a) parents[r * n_new + a] = rng.integer(-1, a - 1);
    }
    stride += 3;  // slots beyond every sequence's new rows stay 0
    Bytes want(static_cast<size_t>(n_seq) * n_new * stride, 0);
    for (int r = 0; r < n_seq; ++r)
      for (int j = 0; j < n_new; ++j) {
        uint8_t* m = want.data() + (static_cast<size_t>(r) * n_new + j) * stride;
        std::fill_n(m, past[r], uint8_t{1});
        for (int a = j; a >= 0; a = parents[r * n_new + a]) m[past[r] + a] = 1;
      }
    auto run = [&](Backend& b) {
      Tensor par = upload_ids(b, parents), len = upload_ids(b, past);
      Tensor mask = b.empty(DType::U8, {static_cast<int64_t>(want.size())});
      b.expand_tree_mask(par, len, n_new, stride, mask);
      return down_bytes(b, mask);
    };
    EXPECT_EQ(run(ref()), want);
    EXPECT_EQ(run(backend()), want);
  }
}

// ================================================================================== MAE / MAR

TEST_P(Ops, SelfAttentionAndRowBroadcast) {
  Rng rng(9);
  struct Case {
    int batch, N, H, hd;
  };
  for (const Case& c :
       {Case{1, 1, 1, 3}, Case{2, 17, 3, 7}, Case{1, 65, 2, 64}, Case{3, 9, 5, 16}}) {
    SCOPED_TRACE("batch " + std::to_string(c.batch) + " N " + std::to_string(c.N) + " H " +
                 std::to_string(c.H) + " hd " + std::to_string(c.hd));
    const int64_t rows = static_cast<int64_t>(c.batch) * c.N, D = c.H * c.hd;
    const Vec qkv = rng.normal(rows * 3 * D), table = rng.normal(c.N * D);
    check("self_attention", kAttention, [&](Backend& b) {
      Tensor out = b.empty(DType::F32, {rows, D});
      b.self_attention(up(b, qkv, {rows, 3 * D}), c.batch, c.H, c.hd, out, {});
      return down(b, out);
    });
    // T5's form: unscaled, a relative-position bias, every third key of a sequence hidden.
    const Vec bias = rng.normal(static_cast<int64_t>(c.H) * c.N * c.N, 2.0f);
    std::vector<uint8_t> visible(static_cast<size_t>(rows), 1);
    for (int64_t r = 0; r < rows; ++r) visible[r] = r % c.N % 3 != 2;
    check("self_attention with bias and key mask", kAttention, [&](Backend& b) {
      Tensor out = b.empty(DType::F32, {rows, D});
      Tensor bias_t = up(b, bias, {c.H, c.N, c.N});
      Tensor mask_t = b.upload(visible.data(), DType::U8, {c.batch, c.N});
      b.self_attention(up(b, qkv, {rows, 3 * D}), c.batch, c.H, c.hd, out,
                       {1.0f, &bias_t, &mask_t});
      return down(b, out);
    });
    check("add_rows_broadcast", kExact, [&](Backend& b) {
      Tensor x = up(b, std::vector<float>(qkv.begin(), qkv.begin() + rows * D), {rows, D});
      b.add_rows_broadcast(x, up(b, table, {c.N, D}));
      return down(b, x);
    });
  }
}

// ================================================================================== images

TEST_P(Ops, Conv2dGroupNormUpsample) {
  struct Case {
    int64_t B, C, H, W, O, kh, kw, pad;
    int groups;
  };
  const Case cases[] = {{1, 1, 1, 1, 1, 1, 1, 0, 1}, {2, 3, 5, 7, 4, 1, 1, 0, 3},
                        {1, 6, 5, 7, 5, 3, 3, 1, 2}, {2, 5, 6, 3, 7, 3, 3, 0, 5},
                        {1, 4, 9, 9, 3, 5, 5, 2, 4}, {1, 12, 13, 11, 9, 3, 3, 1, 3}};
  Rng rng(10);
  for (const Case& c : cases) {
    SCOPED_TRACE("B " + std::to_string(c.B) + " C " + std::to_string(c.C) + " H " +
                 std::to_string(c.H) + " W " + std::to_string(c.W) + " O " + std::to_string(c.O) +
                 " k " + std::to_string(c.kh) + "x" + std::to_string(c.kw));
    const Vec x = rng.normal(c.B * c.C * c.H * c.W), w = rng.normal(c.O * c.C * c.kh * c.kw, 0.3f);
    const Vec bias = rng.normal(c.O), g = rng.normal(c.C), bt = rng.normal(c.C);
    const int64_t Ho = c.H + 2 * c.pad - c.kh + 1, Wo = c.W + 2 * c.pad - c.kw + 1;
    check("conv2d", kDot, [&](Backend& b) {
      Tensor y = b.empty(DType::F32, {c.B, c.O, Ho, Wo});
      b.conv2d(up(b, x, {c.B, c.C, c.H, c.W}), up(b, w, {c.O, c.C, c.kh, c.kw}), up(b, bias, {c.O}),
               static_cast<int>(c.pad), y);
      return down(b, y);
    });
    for (bool swish : {false, true})
      check(swish ? "group_norm+swish" : "group_norm", kMath, [&](Backend& b) {
        Tensor y = b.empty(DType::F32, {c.B, c.C, c.H, c.W});
        b.group_norm(up(b, x, {c.B, c.C, c.H, c.W}), up(b, g, {c.C}), up(b, bt, {c.C}), c.groups,
                     1e-6f, swish, y);
        return down(b, y);
      });
    check("upsample_nearest2x", kExact, [&](Backend& b) {
      Tensor y = b.empty(DType::F32, {c.B, c.C, 2 * c.H, 2 * c.W});
      b.upsample_nearest2x(up(b, x, {c.B, c.C, c.H, c.W}), y);
      return down(b, y);
    });
    check("max_pool2x2", kExact, [&](Backend& b) {
      Tensor y = b.empty(DType::F32, {c.B, c.C, c.H / 2, c.W / 2});
      b.max_pool2x2(up(b, x, {c.B, c.C, c.H, c.W}), y);
      return down(b, y);
    });
    check("avg_pool2x2", kFma, [&](Backend& b) {
      Tensor y = b.empty(DType::F32, {c.B, c.C, c.H / 2, c.W / 2});
      b.avg_pool2x2(up(b, x, {c.B, c.C, c.H, c.W}), y);
      return down(b, y);
    });
  }
}

TEST_P(Ops, BatchedMatmulAndTranspose) {
  Rng rng(11);
  struct Shape3 {
    int64_t M, K, N;
  };
  int idx = 0;
  for (int64_t batch : {1, 3})
    for (const Shape3& s : {Shape3{1, 1, 1}, Shape3{3, 5, 7}, Shape3{17, 33, 5}, Shape3{2, 65, 9}})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          const float alpha = std::array{1.0f, 0.37f, -2.0f}[idx++ % 3];
          SCOPED_TRACE("batch " + std::to_string(batch) + " M " + std::to_string(s.M) + " K " +
                       std::to_string(s.K) + " N " + std::to_string(s.N) + " ta " +
                       std::to_string(ta) + " tb " + std::to_string(tb));
          const Vec a = rng.normal(batch * s.M * s.K), bm = rng.normal(batch * s.K * s.N);
          check("batched_matmul", kDot, [&](Backend& b) {
            Tensor at = up(b, a, ta ? Shape{batch, s.K, s.M} : Shape{batch, s.M, s.K});
            Tensor bt = up(b, bm, tb ? Shape{batch, s.N, s.K} : Shape{batch, s.K, s.N});
            Tensor c = b.empty(DType::F32, {batch, s.M, s.N});
            b.batched_matmul(at, ta, bt, tb, alpha, c);
            return down(b, c);
          });
          check("transpose_last2", kExact, [&](Backend& b) {
            Tensor y = b.empty(DType::F32, {batch, s.K, s.M});
            b.transpose_last2(up(b, a, {batch, s.M, s.K}), y);
            return down(b, y);
          });
        }
}

// ================================================================================== the harness

// The comparison can fail: one output element of the backend under test changed (by one ulp for
// the bit-exact self-check, by well over the tolerance otherwise, or made NaN) is reported.
TEST_P(Ops, PerturbedOutputIsReported) {
  ASSERT_NE(&backend(), &ref()) << "the backend under test is the reference itself";
  Rng rng(12);
  const int64_t M = 5, K = 67, N = 33;
  const Vec x = rng.normal(M * K), w = rng.normal(N * K, 0.2f);
  auto run = [&](Backend& b) {
    Tensor y = b.empty(DType::F32, {M, N});
    b.linear(up(b, x, {M, K}), b.pack_linear_weight(up(b, w, {N, K})), nullptr, y);
    return down(b, y);
  };
  const Vec want = run(ref());
  Vec got = run(backend());
  ASSERT_TRUE(same("linear", got, want, kDot));
  const size_t i = 17;
  const float saved = got[i];
  got[i] = exact() ? std::nextafter(saved, INFINITY) : saved + 1.0f + std::fabs(saved);
  const auto r = same("linear", got, want, kDot);
  EXPECT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("[17]"), std::string::npos) << r.message();
  got[i] = NAN;
  EXPECT_FALSE(same("linear", got, want, kDot));
  got[i] = saved;
  got.pop_back();
  EXPECT_FALSE(same("linear", got, want, kDot)) << "a missing value";
}

INSTANTIATE_TEST_SUITE_P(Backends, Ops, ::testing::ValuesIn(kBackendNames), backend_param_name);

}  // namespace

// The tolerance mode of the comparator (a device backend's) on its own: within the bound passes,
// beyond it fails, normwise scales by the output's largest value.
TEST(BackendCompare, ToleranceBounds) {
  const std::vector<float> want = {100.0f, 0.001f, -3.0f};
  std::vector<float> got = want;
  EXPECT_TRUE(compare_outputs("t", got, want, {1e-3, 0.0}, false));
  got[1] = 0.0011f;  // 10% off one small value: element-wise fails, normwise (bound 0.1) passes
  EXPECT_FALSE(compare_outputs("t", got, want, {1e-3, 0.0}, false));
  EXPECT_TRUE(compare_outputs("t", got, want, {1e-3, 0.0, true}, false));
  got[1] = 0.2f;
  EXPECT_FALSE(compare_outputs("t", got, want, {1e-3, 0.0, true}, false));
  EXPECT_FALSE(compare_outputs("t", got, want, {0.0, 0.0}, true));
}
