// Linear layers on the CPU: y = x · w^T with f32 activations and f32/f16/bf16 weights.
//
// Decoding a token multiplies a few activation rows by every weight matrix, so the cost is
// streaming the weights from memory once; verifying k drafted tokens multiplies k rows (2k with
// CFG) and should cost little more until the FMA units, not memory, are the limit. The SIMD body
// (linear_tiles.h) is compiled once per instruction set, and the path is chosen here at run time
// from the CPU's features, so a portable build (-DTESSERA_NATIVE=OFF) runs the fast path too.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "common/vector_math.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/linear_isa.h"
#include "tensor/cpu/linear_panels.h"
#include "tessera/error.h"

namespace tessera::cpu {
namespace {

enum class Isa { Scalar, Avx2, Avx512, Amx };

const char* isa_name(Isa i) {
  return i == Isa::Amx ? "amx" : i == Isa::Avx512 ? "avx512" : i == Isa::Avx2 ? "avx2" : "scalar";
}

std::vector<Isa> supported() {
  std::vector<Isa> v;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) v.push_back(Isa::Avx512);
  // Listed after AVX-512, so never the default: it changes a bf16 model's numbers (activations
  // rounded to bf16) and made vanilla decoding 4-17% slower here while making verification of 8+
  // positions about twice as fast (docs/performance.md, session 20). TESSERA_LINEAR_ISA=amx.
  if (__builtin_cpu_supports("avx512f") && amx_bf16_available()) v.push_back(Isa::Amx);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    v.push_back(Isa::Avx2);
  v.push_back(Isa::Scalar);
  return v;
}

Isa parse_isa(const std::string& s) {
  for (Isa i : supported())
    if (s == isa_name(i)) return i;
  std::string have;
  for (Isa i : supported()) have += std::string(have.empty() ? "" : ", ") + isa_name(i);
  throw Error("linear kernel path '" + s + "' is not one this CPU runs (" + have + ")");
}

// TESSERA_LINEAR_ISA forces a path for the whole process (to compare paths, or to run the AVX2
// path's numbers on an AVX-512 machine); a bad value is an error at the first linear.
Isa default_isa() {
  if (const char* e = std::getenv("TESSERA_LINEAR_ISA"); e && *e) return parse_isa(e);
  return supported().front();
}

std::atomic<int> g_isa{-1};

Isa current() {
  int i = g_isa.load(std::memory_order_relaxed);
  if (i < 0) {
    i = static_cast<int>(default_isa());
    g_isa.store(i, std::memory_order_relaxed);
  }
  return static_cast<Isa>(i);
}

// Reference path for CPUs without AVX2: plain loops over the panels' columns, the same FMA chain
// per output as the SIMD paths (linear_tiles.h), so every path gives the same bits.
template <class T>
void scalar_typed(const float* x, int64_t M, int64_t K, const T* panels, DType w_type, int64_t N,
                  const float* bias, float* y, int64_t p_begin, int64_t p_end) {
  std::vector<float> wk(static_cast<size_t>(K));
  for (int64_t n = p_begin * kPanelRows; n < std::min(N, p_end * kPanelRows); ++n) {
    for (int64_t k = 0; k < K; ++k)
      convert_to_f32(w_type, panels + panel_index(w_type, K, n, k), &wk[k], 1);
    for (int64_t m = 0; m < M; ++m) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc = std::fma(x[m * K + k], wk[k], acc);
      y[m * N + n] = acc + (bias ? bias[n] : 0.0f);
    }
  }
}

void linear_scalar(const float* x, int64_t M, int64_t K, const void* panels, DType w_type,
                   int64_t N, const float* bias, float* y, int64_t p_begin, int64_t p_end) {
  if (w_type == DType::F32)
    scalar_typed(x, M, K, static_cast<const float*>(panels), w_type, N, bias, y, p_begin, p_end);
  else
    scalar_typed(x, M, K, static_cast<const uint16_t*>(panels), w_type, N, bias, y, p_begin, p_end);
}

// A path's kernel over a range of panels, on the calling thread.
using PanelRangeFn = void (*)(const float* x, int64_t M, int64_t K, const void* panels,
                              DType w_type, int64_t N, const float* bias, float* y, int64_t p_begin,
                              int64_t p_end);

// The kernel of the path in use; null on the AMX path for bf16 weights (linear_amx_bf16 shares
// its panels itself, with a tile configuration per thread).
PanelRangeFn panel_range_kernel(DType w_type) {
  switch (current()) {
    case Isa::Amx:
      return w_type == DType::BF16 ? nullptr : linear_avx512;
    case Isa::Avx512:
      return linear_avx512;
    case Isa::Avx2:
      return linear_avx2;
    default:
      return linear_scalar;
  }
}

}  // namespace

const char* linear_isa() {
  return isa_name(current());
}

std::vector<std::string> linear_isas() {
  std::vector<std::string> v;
  for (Isa i : supported()) v.push_back(isa_name(i));
  return v;
}

void set_linear_isa(const std::string& isa) {
  g_isa.store(static_cast<int>(isa.empty() ? default_isa() : parse_isa(isa)));
}

void linear_panels(const float* x, int64_t M, int64_t K, const void* w, DType w_type, int64_t N,
                   const float* bias, float* y) {
  const bool parallel = M * K * N >= kParallelMinMacs;
  const PanelRangeFn kernel = panel_range_kernel(w_type);
  if (!kernel)
    return linear_amx_bf16(x, M, K, static_cast<const uint16_t*>(w), N, bias, y, parallel);
  // Each thread takes a contiguous range of panels (one sequential stream of weights) and runs
  // every row block over it.
  const int64_t P = panel_count(N);
  cpu_pool().run(
      "linear",
      [&](int tid, int team) {
        const IndexRange mine = static_range(P, tid, team);
        kernel(x, M, K, w, w_type, N, bias, y, mine.begin, mine.end);
      },
      parallel && P > 1);
}

bool linear_swiglu_panels(const float* x, int64_t M, int64_t K, const void* w13, DType w_type,
                          int64_t F, float* gate_up, float* y) {
  const PanelRangeFn kernel = panel_range_kernel(w_type);
  if (!kernel || F % kPanelRows != 0) return false;
  // Thread t takes a contiguous range of column panels of w1 and the same of w3: it then holds
  // both halves of its columns and applies SwiGLU to them in the same region, with no join
  // between the linear and the activation (a fork and a join per layer fewer).
  const int64_t pairs = F / kPanelRows, N = 2 * F;
  cpu_pool().run(
      "linear_swiglu",
      [&](int tid, int team) {
        const IndexRange mine = static_range(pairs, tid, team);
        if (mine.begin == mine.end) return;
        kernel(x, M, K, w13, w_type, N, nullptr, gate_up, mine.begin, mine.end);  // w1 x
        kernel(x, M, K, w13, w_type, N, nullptr, gate_up, pairs + mine.begin,
               pairs + mine.end);  // w3 x
        for (int64_t m = 0; m < M; ++m)
          for (int64_t c = mine.begin * kPanelRows; c < mine.end * kPanelRows; c += kSimdBlock)
            swiglu_block(gate_up + m * N + c, gate_up + m * N + F + c, y + m * F + c);
      },
      M * K * N >= kParallelMinMacs && pairs > 1);
  return true;
}

void linear(const float* x, int64_t M, int64_t K, const void* w, DType w_type, int64_t N,
            const float* bias, float* y) {
  std::vector<uint8_t> panels(panel_bytes(w_type, N, K));
  pack_panels(w, w_type, N, K, panels.data());
  linear_panels(x, M, K, panels.data(), w_type, N, bias, y);
}

}  // namespace tessera::cpu
