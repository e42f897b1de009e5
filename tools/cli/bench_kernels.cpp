#include "bench_kernels.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tessera/bandwidth.h"
#include "tessera/kernel_bench.h"

namespace tessera::cli {

namespace {

// (K, N) of the emoji target's linears (qkv, wo, w1|w3 as one 2F, w2, head) and GPT-B's.
const std::vector<std::pair<int, int>> kShapes = {
    {384, 1152}, {384, 384}, {384, 2048}, {1024, 384}, {384, 1024}, {768, 2304}, {768, 3072}};
const std::vector<int> kRows = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64};

}  // namespace

void bench_kernels(int repeat, bool json) {
  const double gbs = memory_read_bandwidth_gbs();
  nlohmann::json out = {{"isa", linear_kernel_isa()}, {"read_bandwidth_gbs", gbs}, {"runs", {}}};
  if (!json)
    std::printf(
        "linear kernel: path %s, machine read bandwidth %.1f GB/s; cells: us per call "
        "(GFLOPS)\n",
        linear_kernel_isa().c_str(), gbs);
  for (const char* dtype : {"f16", "bf16", "f32"}) {
    if (!json) {
      std::printf("\n%s weights\n| M |", dtype);
      for (const auto& [K, N] : kShapes) std::printf(" %dx%d |", K, N);
      std::printf("\n|---|");
      for (size_t i = 0; i < kShapes.size(); ++i) std::printf("---|");
      std::printf("\n");
    }
    for (int M : kRows) {
      if (!json) std::printf("| %d |", M);
      for (const auto& [K, N] : kShapes) {
        const LinearKernelTiming t = time_linear_kernel(M, K, N, dtype, repeat);
        out["runs"].push_back({{"dtype", dtype},
                               {"M", M},
                               {"K", K},
                               {"N", N},
                               {"us", t.seconds * 1e6},
                               {"gflops", t.gflops},
                               {"weight_gbs", t.weight_gbs}});
        if (!json) std::printf(" %.1f (%.0f) |", t.seconds * 1e6, t.gflops);
        std::fflush(stdout);
      }
      if (!json) std::printf("\n");
    }
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
}

}  // namespace tessera::cli
