// Image-decoder ops on the CPU (NCHW, f32). Convolutions are im2col + OpenBLAS SGEMM per image,
// so an image's pixels do not depend on how many images share the batch.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/thread_pool.h"
#include "tensor/cpu/cpu_backend.h"
#include "tessera/error.h"

namespace tessera {

namespace {

// C[M, N] = alpha op(A) op(B) + beta C (row-major) with the columns split in slices of a fixed
// width, which the pool's threads share, each calling OpenBLAS on its own slices. OpenBLAS itself
// runs single-threaded (CpuBackend::CpuBackend): its pthreads pool busy-waits with sched_yield
// after every call and took the CPUs from the token steps that follow a decode (`generate -n 16`
// on the emoji model: 5.30 s with OpenBLAS's threads, 4.53 s with one). The slices never depend on
// the thread count: OpenBLAS may pick another kernel, with another order of summation, for
// another shape (on an AMD EPYC with AVX-512, slices sized by the team made the VQ decoder's
// pixels differ between 1 and 2 threads), so every thread count makes the same calls.
void sgemm_columns(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                   const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                   int64_t ldc) {
  // Slices of 512 columns (whole 16-column groups): smaller ones cost more in packing than they
  // save; a small product is one slice.
  constexpr int64_t kSlice = 512;
  const int64_t slices = M * N * K >= cpu::kParallelMinMacs ? std::max<int64_t>(1, N / kSlice) : 1;
  const int64_t per = slices == 1 ? N : kSlice;
  parallel_for(
      "sgemm", slices,
      [&](int64_t sl) {
        const int64_t n0 = sl * per, n1 = sl + 1 == slices ? N : std::min(N, n0 + per);
        if (n1 <= n0) return;
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(M),
                    static_cast<int>(n1 - n0), static_cast<int>(K), alpha, A, static_cast<int>(lda),
                    trans_b ? B + n0 * ldb : B + n0, static_cast<int>(ldb), beta, C + n0,
                    static_cast<int>(ldc));
      },
      slices > 1);
}

}  // namespace

void CpuBackend::conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, int pad, Tensor& y) {
  const int64_t B = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t O = w.dim(0), kh = w.dim(2), kw = w.dim(3);
  check(w.dim(1) == C && w.dtype == DType::F32,
        "internal: conv2d weight " + shape_str(w.shape) + " for input " + shape_str(x.shape));
  const int64_t Ho = H + 2 * pad - kh + 1, Wo = W + 2 * pad - kw + 1;
  check(y.dim(0) == B && y.dim(1) == O && y.dim(2) == Ho && y.dim(3) == Wo,
        "internal: conv2d output shape " + shape_str(y.shape));
  const int64_t ckk = C * kh * kw, hw = Ho * Wo;
  const float* wp = w.ptr<float>();
  const float* bp = bias.ptr<float>();
  std::vector<float> col;
  for (int64_t b = 0; b < B; ++b) {
    const float* xb = x.ptr<float>() + b * C * H * W;
    float* yb = y.ptr<float>() + b * O * hw;
    const float* rhs = xb;
    if (!(kh == 1 && kw == 1 && pad == 0)) {
      col.assign(static_cast<size_t>(ckk * hw), 0.0f);
      parallel_for("im2col", C, [&](int64_t c) {
        for (int64_t i = 0; i < kh; ++i) {
          for (int64_t j = 0; j < kw; ++j) {
            float* dst = col.data() + ((c * kh + i) * kw + j) * hw;
            for (int64_t oy = 0; oy < Ho; ++oy) {
              const int64_t iy = oy + i - pad;
              if (iy < 0 || iy >= H) continue;
              for (int64_t ox = 0; ox < Wo; ++ox) {
                const int64_t ix = ox + j - pad;
                if (ix >= 0 && ix < W) dst[oy * Wo + ox] = xb[(c * H + iy) * W + ix];
              }
            }
          }
        }
      });
      rhs = col.data();
    }
    for (int64_t o = 0; o < O; ++o)
      for (int64_t p = 0; p < hw; ++p) yb[o * hw + p] = bp[o];
    sgemm_columns(false, false, O, hw, ckk, 1.0f, wp, ckk, rhs, hw, 1.0f, yb, hw);
  }
}

void CpuBackend::group_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, int groups,
                            float eps, bool swish, Tensor& y) {
  const int64_t B = x.dim(0), C = x.dim(1), hw = x.numel() / (B * C);
  check(C % groups == 0, "group_norm: " + std::to_string(C) + " channels not divisible by " +
                             std::to_string(groups) + " groups");
  const int64_t cpg = C / groups;
  const float* xp = x.ptr<float>();
  const float* g = gamma.ptr<float>();
  const float* be = beta.ptr<float>();
  float* yp = y.ptr<float>();
  parallel_for("group_norm", B * groups, [&](int64_t bg) {
    const int64_t b = bg / groups, gi = bg % groups;
    const int64_t base = (b * C + gi * cpg) * hw, n = cpg * hw;
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < n; ++i) mean += xp[base + i];
    mean /= static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) {
      const double d = xp[base + i] - mean;
      var += d * d;
    }
    var /= static_cast<double>(n);  // biased variance, as torch.nn.GroupNorm
    const float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
    const float m = static_cast<float>(mean);
    for (int64_t c = 0; c < cpg; ++c) {
      const int64_t ch = gi * cpg + c;
      for (int64_t i = 0; i < hw; ++i) {
        float v = (xp[base + c * hw + i] - m) * inv * g[ch] + be[ch];
        if (swish) v = v / (1.0f + std::exp(-v));
        yp[base + c * hw + i] = v;
      }
    }
  });
}

void CpuBackend::upsample_nearest2x(const Tensor& x, Tensor& y) {
  const int64_t BC = x.dim(0) * x.dim(1), H = x.dim(2), W = x.dim(3);
  const float* xp = x.ptr<float>();
  float* yp = y.ptr<float>();
  parallel_for("upsample_nearest2x", BC, [&](int64_t c) {
    for (int64_t i = 0; i < 2 * H; ++i)
      for (int64_t j = 0; j < 2 * W; ++j)
        yp[(c * 2 * H + i) * 2 * W + j] = xp[(c * H + i / 2) * W + j / 2];
  });
}

void CpuBackend::batched_matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                                float alpha, Tensor& c) {
  const int64_t batch = a.dim(0);
  const int64_t M = trans_a ? a.dim(2) : a.dim(1), K = trans_a ? a.dim(1) : a.dim(2);
  const int64_t N = trans_b ? b.dim(1) : b.dim(2);
  check((trans_b ? b.dim(2) : b.dim(1)) == K && c.dim(1) == M && c.dim(2) == N,
        "internal: batched_matmul shapes");
  for (int64_t i = 0; i < batch; ++i) {
    sgemm_columns(trans_a, trans_b, M, N, K, alpha, a.ptr<float>() + i * a.dim(1) * a.dim(2),
                  a.dim(2), b.ptr<float>() + i * b.dim(1) * b.dim(2), b.dim(2), 0.0f,
                  c.ptr<float>() + i * M * N, N);
  }
}

void CpuBackend::softmax_rows(Tensor& x) {
  const int64_t n = x.dim(-1), rows = x.numel() / n;
  float* p = x.ptr<float>();
  parallel_for("softmax_rows", rows, [&](int64_t r) {
    float* v = p + r * n;
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, v[i]);
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s += (v[i] = std::exp(v[i] - mx));
    for (int64_t i = 0; i < n; ++i) v[i] /= s;
  });
}

void CpuBackend::l2_normalize_rows(Tensor& x, float eps) {
  const int64_t n = x.dim(-1), rows = x.numel() / n;
  float* p = x.ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    float* v = p + r * n;
    float ss = 0.0f;
    for (int64_t i = 0; i < n; ++i) ss += v[i] * v[i];
    const float norm = std::max(std::sqrt(ss), eps);  // F.normalize: x / max(||x||, eps)
    for (int64_t i = 0; i < n; ++i) v[i] /= norm;
  }
}

void CpuBackend::transpose_last2(const Tensor& x, Tensor& y) {
  const int64_t M = x.dim(-2), N = x.dim(-1), batch = x.numel() / (M * N);
  const float* xp = x.ptr<float>();
  float* yp = y.ptr<float>();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) yp[(b * N + n) * M + m] = xp[(b * M + m) * N + n];
}

void CpuBackend::relu(Tensor& x) {
  const int64_t n = x.numel();
  float* p = x.ptr<float>();
  parallel_for("relu", n, [&](int64_t i) { p[i] = p[i] > 0.0f ? p[i] : 0.0f; });
}

namespace {

// Shared loop of the 2x2 pools; `reduce` maps a window's four values to one.
template <class Reduce>
void pool2x2(const Tensor& x, Tensor& y, const char* op, Reduce reduce) {
  const int64_t B = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t Ho = H / 2, Wo = W / 2;
  check(y.ndim() == 4 && y.dim(0) == B && y.dim(1) == C && y.dim(2) == Ho && y.dim(3) == Wo,
        std::string("internal: ") + op + " output " + shape_str(y.shape) + " for input " +
            shape_str(x.shape));
  const float* xp = x.ptr<float>();
  float* yp = y.ptr<float>();
  parallel_for(op, B * C, [&](int64_t c) {
    const float* xc = xp + c * H * W;
    float* yc = yp + c * Ho * Wo;
    for (int64_t i = 0; i < Ho; ++i)
      for (int64_t j = 0; j < Wo; ++j) {
        const float* r0 = xc + (2 * i) * W + 2 * j;
        yc[i * Wo + j] = reduce(r0[0], r0[1], r0[W], r0[W + 1]);
      }
  });
}

}  // namespace

void CpuBackend::max_pool2x2(const Tensor& x, Tensor& y) {
  pool2x2(x, y, "max_pool2x2", [](float a, float b, float c, float d) {
    return std::max(std::max(a, b), std::max(c, d));
  });
}

void CpuBackend::avg_pool2x2(const Tensor& x, Tensor& y) {
  // Summed in window order, then scaled, as PyTorch's CPU kernel does.
  pool2x2(x, y, "avg_pool2x2",
          [](float a, float b, float c, float d) { return (((a + b) + c) + d) * 0.25f; });
}

}  // namespace tessera
