// The machine's memory read bandwidth: the bound on decoding speed when every step streams the
// model's weights (tessera bench reports its achieved GB/s against it).
#pragma once

#include <cstddef>

namespace tessera {

// Best-of-`repeats` GB/s (1e9 bytes/s) of a multi-threaded read over `bytes` of memory, using the
// engine's CPU threads.
double memory_read_bandwidth_gbs(size_t bytes = size_t(1) << 30, int repeats = 5);

}  // namespace tessera
