// The machine's memory read bandwidth: the bound on decoding speed when every step streams the
// model's weights (tessera bench reports its achieved GB/s against it).
#pragma once

#include <cstddef>
#include <vector>

namespace tessera {

// Best-of-`repeats` GB/s (1e9 bytes/s) of a multi-threaded read over `bytes` of memory, using the
// engine's CPU threads.
double memory_read_bandwidth_gbs(size_t bytes = size_t(1) << 30, int repeats = 5);

// One row count of the read-with-FMA probe below.
struct ReadWithFmaProbe {
  int rows = 0;
  double read_gbs = 0.0;  // best of the repeats
  // The arithmetic's result, so that a caller can tell the FMAs it timed were the ones asked for:
  // over the n = bytes / 4 (rounded down to a multiple of 32) weights w[i] = f32((i mod 1024) *
  // 1e-3), sum_i w[i] sum_{r < rows} x[k(i) rows + r], with the activations x[j] = f32(1 + 1e-3 (j
  // mod 97)) and k(i) = floor(i / 32) mod 128 (a 32-wide panel row per activation set, 128 sets
  // reused cyclically). Accumulated in f32.
  double sum = 0.0;
};

// Best-of-`repeats` GB/s of the same read with a linear kernel's arithmetic on it and nothing
// else, for each entry of `rows` (1-32): f32 weights, each multiplied into that many accumulators
// with FMAs, prefetched as the kernel prefetches. How much of the roofline max(bytes / bandwidth,
// flops / peak) a forward can reach on this machine where neither side is negligible (tessera
// bench --verify-cost).
std::vector<ReadWithFmaProbe> memory_read_with_fma(const std::vector<int>& rows,
                                                   size_t bytes = size_t(256) << 20,
                                                   int repeats = 3);

}  // namespace tessera
