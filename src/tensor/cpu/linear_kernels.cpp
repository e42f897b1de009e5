// Linear layers on the CPU: y = x · w^T with f32 activations and f32/f16/bf16 weights.
//
// Decoding a token multiplies a few activation rows by every weight matrix, so the cost is
// streaming the weights from memory once; verifying k drafted tokens multiplies k rows (2k with
// CFG) and should cost little more until the FMA units, not memory, are the limit. The SIMD body
// (linear_tiles.h) is compiled once per instruction set, and the path is chosen here at run time
// from the CPU's features, so a portable build (-DTESSERA_NATIVE=OFF) runs the fast path too.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/thread_pool.h"
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

// Reference path for CPUs without AVX2: plain loops over the panels, the same FMA chain per
// output as the SIMD paths (linear_tiles.h), so every path gives the same bits.
template <class T>
void scalar_typed(const float* x, int64_t M, int64_t K, const T* panels, DType w_type, int64_t N,
                  const float* bias, float* y, bool parallel) {
  parallel_for(
      "linear", N,
      [&](int64_t n) {
        std::vector<float> wk(static_cast<size_t>(K));
        for (int64_t k = 0; k < K; ++k)
          convert_to_f32(w_type, panels + panel_index(w_type, K, n, k), &wk[k], 1);
        for (int64_t m = 0; m < M; ++m) {
          float acc = 0.0f;
          for (int64_t k = 0; k < K; ++k) acc = std::fma(x[m * K + k], wk[k], acc);
          y[m * N + n] = acc + (bias ? bias[n] : 0.0f);
        }
      },
      parallel);
}

void linear_scalar(const float* x, int64_t M, int64_t K, const void* panels, DType w_type,
                   int64_t N, const float* bias, float* y, bool parallel) {
  if (w_type == DType::F32)
    scalar_typed(x, M, K, static_cast<const float*>(panels), w_type, N, bias, y, parallel);
  else
    scalar_typed(x, M, K, static_cast<const uint16_t*>(panels), w_type, N, bias, y, parallel);
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
  switch (current()) {
    case Isa::Amx:
      if (w_type == DType::BF16)
        return linear_amx_bf16(x, M, K, static_cast<const uint16_t*>(w), N, bias, y, parallel);
      return linear_avx512(x, M, K, w, w_type, N, bias, y, parallel);
    case Isa::Avx512:
      return linear_avx512(x, M, K, w, w_type, N, bias, y, parallel);
    case Isa::Avx2:
      return linear_avx2(x, M, K, w, w_type, N, bias, y, parallel);
    default:
      return linear_scalar(x, M, K, w, w_type, N, bias, y, parallel);
  }
}

void linear(const float* x, int64_t M, int64_t K, const void* w, DType w_type, int64_t N,
            const float* bias, float* y) {
  std::vector<uint8_t> panels(panel_bytes(w_type, N, K));
  pack_panels(w, w_type, N, K, panels.data());
  linear_panels(x, M, K, panels.data(), w_type, N, bias, y);
}

}  // namespace tessera::cpu
