// Measures the machine's memory read bandwidth (the bound for streaming weights while decoding).
#pragma once

#include <cstddef>
#include <vector>

namespace tessera {

// Best-of-`repeats` GB/s (1e9 bytes/s) of a multi-threaded read over `bytes` of memory.
double measure_read_bandwidth_gbs(size_t bytes = size_t(1) << 30, int repeats = 5);

struct ReadWithFma {
  double gbs = 0.0;  // best of the repeats
  double sum = 0.0;  // the arithmetic's result (of the last repeat; tessera/bandwidth.h)
};

// Best-of-`repeats` GB/s of the same read over f32 "weights" with a linear kernel's arithmetic
// and nothing else, for each entry of `rows` (1-32): each w[k] multiplied into an accumulator per
// activation row with one FMA (2 * rows flops per 4 bytes), the weights prefetched as the kernel
// prefetches them. Where arithmetic and memory overlap perfectly it reads at the 1-row rate until
// the FMA peak binds. The weights and activations, and so `sum`, are those of
// tessera::ReadWithFmaProbe.
std::vector<ReadWithFma> measure_read_with_fma(const std::vector<int>& rows,
                                               size_t bytes = size_t(256) << 20, int repeats = 3);

}  // namespace tessera
