// The machine's memory read bandwidth: the bound on decoding speed when every step streams the
// model's weights (tessera bench reports its achieved GB/s against it).
#pragma once

#include <cstddef>
#include <vector>

namespace tessera {

// Best-of-`repeats` GB/s (1e9 bytes/s) of a multi-threaded read over `bytes` of memory, using the
// engine's CPU threads.
double memory_read_bandwidth_gbs(size_t bytes = size_t(1) << 30, int repeats = 5);

// Best-of-`repeats` GB/s of the same read with a linear kernel's arithmetic on it and nothing
// else, for each entry of `rows` (1-32): f32 weights, each multiplied into that many accumulators
// with FMAs, prefetched as the kernel prefetches. How much of the roofline max(bytes / bandwidth,
// flops / peak) a forward can reach on this machine where neither side is negligible (tessera
// bench --verify-cost).
std::vector<double> memory_read_with_fma_gbs(const std::vector<int>& rows,
                                             size_t bytes = size_t(256) << 20, int repeats = 3);

}  // namespace tessera
