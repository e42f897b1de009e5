// The public linear-kernel benchmark and path selection (tessera/kernel_bench.h) over cpu::linear.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/linear_panels.h"
#include "tensor/dtype.h"
#include "tessera/error.h"
#include "tessera/kernel_bench.h"

namespace tessera {

LinearKernelTiming time_linear_kernel(int64_t M, int64_t K, int64_t N, const std::string& dtype,
                                      int repeats) {
  const DType wt = parse_dtype(dtype);
  check(wt == DType::F32 || wt == DType::F16 || wt == DType::BF16,
        "linear kernel benchmark: weights must be f32, f16 or bf16, not " + dtype);
  check(M > 0 && K > 0 && N > 0 && repeats > 0, "linear kernel benchmark: sizes must be positive");
  const size_t w_bytes = cpu::panel_bytes(wt, N, K);
  // 96 MB of weights in all: more than any desktop or server L3, so every call reads from memory.
  const size_t copies = std::max<size_t>(1, (size_t(96) << 20) / w_bytes);
  std::vector<float> wf(static_cast<size_t>(N * K));
  // Activations 64-byte aligned, as the backend allocates them: with a vector's 16-byte
  // alignment every 512-bit load of x straddled two cache lines and 4 rows ran 1.4x slower.
  const size_t x_bytes = (static_cast<size_t>(M * K) * sizeof(float) + 63) / 64 * 64;
  std::unique_ptr<float, void (*)(void*)> x_mem(
      static_cast<float*>(std::aligned_alloc(64, x_bytes)), std::free);
  check(x_mem != nullptr, "linear kernel benchmark: out of memory");
  float* x = x_mem.get();
  for (size_t i = 0; i < wf.size(); ++i)
    wf[i] = static_cast<float>((i * 7919) % 201) * 1e-3f - 0.1f;
  for (size_t i = 0; i < static_cast<size_t>(M * K); ++i)
    x[i] = static_cast<float>((i * 104729) % 199) * 1e-2f - 1.0f;
  // Stored and packed as a model's weights are at load (CpuBackend::pack_linear_weight).
  std::vector<uint8_t> stored(static_cast<size_t>(N * K) * dtype_size(wt));
  convert_from_f32(wf.data(), wt, stored.data(), wf.size());
  std::vector<std::vector<uint8_t>> w(copies, std::vector<uint8_t>(w_bytes));
  for (auto& c : w) cpu::pack_panels(stored.data(), wt, N, K, c.data());
  std::vector<float> y(static_cast<size_t>(M * N));
  double best = 1e30;
  for (int r = 0; r <= repeats; ++r) {  // round 0 warms up (page faults, thread pool)
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& c : w) cpu::linear_panels(x, M, K, c.data(), wt, N, nullptr, y.data());
    const double dt =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / copies;
    if (r > 0) best = std::min(best, dt);
  }
  LinearKernelTiming t;
  t.seconds = best;
  t.gflops = 2.0 * M * K * N / best / 1e9;
  t.weight_gbs = static_cast<double>(w_bytes) / best / 1e9;
  return t;
}

std::string linear_kernel_isa() {
  return cpu::linear_isa();
}

}  // namespace tessera
