// The CPU backend's worker threads, as seen from outside: how many a forward uses now and how
// many parallel regions (one wake-up and one join of the workers each) its ops fork.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

// Threads a parallel op uses now: Pipeline::threads(), fewer while other processes keep the
// machine's cores busy (the workers then sleep rather than spin on cores they do not have).
int cpu_threads_in_use();

// Parallel regions by op, counted while counting is on (off by default; on costs a lock per op).
struct CpuRegionCount {
  std::string op;      // the kernel's name: "linear", "attention", "rms_norm", ...
  int64_t forked = 0;  // shared between the threads (or would have been, on a machine not busy)
  int64_t serial = 0;  // ran on the calling thread alone: too small to share, or one thread
};
void count_cpu_regions(bool on);  // also clears the counts
std::vector<CpuRegionCount> cpu_region_counts();

}  // namespace tessera
