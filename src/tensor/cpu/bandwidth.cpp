#include "tensor/cpu/bandwidth.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "common/thread_pool.h"
#include "tensor/cpu/linear_panels.h"
#include "tessera/error.h"

namespace tessera {

namespace {

using Buffer = std::unique_ptr<float, void (*)(void*)>;

// n floats, 64-byte aligned, written by the threads that will read them (first touch).
Buffer filled_buffer(size_t n) {
  Buffer buf(static_cast<float*>(std::aligned_alloc(64, n * sizeof(float))), std::free);
  check(buf != nullptr, "memory probe: out of memory");
  parallel_for("memory_probe_fill", static_cast<int64_t>(n),
               [&](int64_t i) { buf.get()[i] = static_cast<float>(i & 1023) * 1e-3f; });
  return buf;
}

// The best GB/s over `repeats` runs of `read()`, which reads `bytes` and returns a sum that is
// kept (so the compiler cannot drop the reads).
template <class Read>
double best_read_gbs(size_t bytes, int repeats, Read read) {
  double best = 0.0;
  volatile float sink = 0.0f;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const float total = read();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink = sink + total;
    best = std::max(best, static_cast<double>(bytes) / dt / 1e9);
  }
  (void)sink;
  return best;
}

}  // namespace

double measure_read_bandwidth_gbs(size_t bytes, int repeats) {
  const size_t n = bytes / sizeof(float) / 64 * 64;
  const Buffer buf = filled_buffer(n);
  return best_read_gbs(n * sizeof(float), repeats, [&] {
    return cpu_pool().run_sum<float>("memory_probe", [&](int tid, int team) {
      const IndexRange blocks = static_range(static_cast<int64_t>(n / 64), tid, team);
      float total = 0.0f;
      for (int64_t blk = blocks.begin; blk < blocks.end; ++blk) {
        const float* p = buf.get() + blk * 64;
#if defined(__AVX512F__)
        __m512 a = _mm512_add_ps(_mm512_load_ps(p), _mm512_load_ps(p + 16));
        __m512 b = _mm512_add_ps(_mm512_load_ps(p + 32), _mm512_load_ps(p + 48));
        total += _mm512_reduce_add_ps(_mm512_add_ps(a, b));
#else
        float s = 0.0f;
        for (int i = 0; i < 64; ++i) s += p[i];
        total += s;
#endif
      }
      return total;
    });
  });
}

namespace {

// Activations per row of the probe: x[k][r] for k = 0..kProbeK-1, reused cyclically (in L1 as a
// kernel's current activations are).
constexpr int kProbeK = 128;

// One thread's share of the read with FMAs: per 128 bytes (two vectors, a 32-column panel row of
// f32 weights) R broadcasts of an activation x[k][r] and 2R FMAs into at most 24 accumulators (the
// register budget of the AVX-512 kernel's 12-row tile; above 12 rows some take two FMAs a step).
// The 128 bytes of a row kPrefetchBytes ahead into L1 and 2 x kPrefetchBytes ahead into L2, as a
// panel's only tile prefetches them (linear_tiles.h).
inline void prefetch_row(const float* row) {
  const char* ahead = reinterpret_cast<const char*>(row) + cpu::kPrefetchBytes;
  for (int b = 0; b < 128; b += 64) {
    _mm_prefetch(ahead + b, _MM_HINT_T0);
    _mm_prefetch(ahead + b + cpu::kPrefetchBytes, _MM_HINT_T1);
  }
}

// k0: the panel row (mod kProbeK) that w starts at, so that a thread's share reads the same
// activations as it would in a single-threaded read and the result does not depend on the split.
template <int R>
float read_with_fma(const float* w, size_t n, const float* x, size_t k0) {
#if defined(__AVX512F__)
  constexpr int kAcc = R < 12 ? R : 12;
  __m512 acc[kAcc][2];
  // Every loop over the accumulators fully unrolled: one index not known at compile time and
  // GCC keeps them all in memory.
#pragma GCC unroll 12
  for (int r = 0; r < kAcc; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const float* xk = x + k0 % kProbeK * R;
  for (size_t i = 0; i < n; i += 32) {
    prefetch_row(w + i);
    const __m512 a = _mm512_load_ps(w + i), b = _mm512_load_ps(w + i + 16);
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r) {
      const __m512 xr = _mm512_set1_ps(xk[r]);
      acc[r % kAcc][0] = _mm512_fmadd_ps(xr, a, acc[r % kAcc][0]);
      acc[r % kAcc][1] = _mm512_fmadd_ps(xr, b, acc[r % kAcc][1]);
    }
    xk = xk + R == x + kProbeK * R ? x : xk + R;
  }
  __m512 s = _mm512_setzero_ps();
#pragma GCC unroll 12
  for (int r = 0; r < kAcc; ++r) s = _mm512_add_ps(s, _mm512_add_ps(acc[r][0], acc[r][1]));
  return _mm512_reduce_add_ps(s);
#elif defined(__FMA__)
  // AVX2: four vectors per 128 bytes, at most 2 rows x 4 = 8 accumulators, 4 weights and a
  // broadcast of 16 registers.
  constexpr int kAcc = R < 2 ? R : 2;
  __m256 acc[kAcc][4];
#pragma GCC unroll 2
  for (int r = 0; r < kAcc; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) acc[r][c] = _mm256_setzero_ps();
  const float* xk = x + k0 % kProbeK * R;
  for (size_t i = 0; i < n; i += 32) {
    prefetch_row(w + i);
    __m256 wv[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) wv[c] = _mm256_load_ps(w + i + 8 * c);
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r) {
      const __m256 xr = _mm256_broadcast_ss(xk + r);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) acc[r % kAcc][c] = _mm256_fmadd_ps(xr, wv[c], acc[r % kAcc][c]);
    }
    xk = xk + R == x + kProbeK * R ? x : xk + R;
  }
  alignas(32) float out[8];
  __m256 s = _mm256_setzero_ps();
#pragma GCC unroll 2
  for (int r = 0; r < kAcc; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) s = _mm256_add_ps(s, acc[r][c]);
  _mm256_store_ps(out, s);
  return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
#else
  float acc[R] = {};
  for (size_t i = 0; i < n; ++i)
    for (int r = 0; r < R; ++r) acc[r] += x[((k0 + i / 32) % kProbeK) * R + r] * w[i];
  float s = 0.0f;
  for (int r = 0; r < R; ++r) s += acc[r];
  return s;
#endif
}

template <int R = 32>
float read_with_fma_rows(int rows, const float* w, size_t n, const float* x, size_t k0) {
  if constexpr (R >= 1) {
    if (rows == R) return read_with_fma<R>(w, n, x, k0);
    return read_with_fma_rows<R - 1>(rows, w, n, x, k0);
  }
  return 0.0f;
}

}  // namespace

std::vector<ReadWithFma> measure_read_with_fma(const std::vector<int>& rows, size_t bytes,
                                               int repeats) {
  for (int r : rows) check(r >= 1 && r <= 32, "read-with-FMA probe: rows must be 1-32");
  check(repeats >= 1, "read-with-FMA probe: repeats must be at least 1");
  const size_t n = bytes / sizeof(float) / 32 * 32;
  const Buffer buf = filled_buffer(n);
  std::vector<float> x(static_cast<size_t>(kProbeK * 32));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 1.0f + 1e-3f * static_cast<float>(i % 97);
  std::vector<ReadWithFma> out;
  for (int rw : rows) {
    ReadWithFma& o = out.emplace_back();
    o.gbs = best_read_gbs(n * sizeof(float), repeats, [&] {
      // Each thread reads one contiguous range, as each takes a contiguous range of panels.
      o.sum = cpu_pool().run_sum<float>("memory_probe", [&](int tid, int team) {
        const size_t threads = static_cast<size_t>(team), t = static_cast<size_t>(tid);
        const size_t per = n / 32 / threads * 32;
        const size_t lo = t * per, hi = t + 1 == threads ? n : lo + per;
        return read_with_fma_rows(rw, buf.get() + lo, hi - lo, x.data(), lo / 32);
      });
      return static_cast<float>(o.sum);
    });
  }
  return out;
}

}  // namespace tessera
