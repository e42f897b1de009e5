// Measures the machine's memory read bandwidth (the bound for streaming weights while decoding).
#pragma once

#include <cstddef>

namespace tessera {

// Best-of-`repeats` GB/s (1e9 bytes/s) of a multi-threaded read over `bytes` of memory.
double measure_read_bandwidth_gbs(size_t bytes = size_t(1) << 30, int repeats = 5);

}  // namespace tessera
