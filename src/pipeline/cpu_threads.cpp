// The public view of the CPU worker pool (tessera/cpu_threads.h).
#include "tessera/cpu_threads.h"

#include "common/thread_pool.h"

namespace tessera {

int cpu_threads_in_use() {
  return cpu_pool().team();
}

void count_cpu_regions(bool on) {
  cpu_pool().reset_counts();
  cpu_pool().set_counting(on);
}

std::vector<CpuRegionCount> cpu_region_counts() {
  std::vector<CpuRegionCount> out;
  for (const RegionCount& c : cpu_pool().counts()) out.push_back({c.name, c.forked, c.serial});
  return out;
}

}  // namespace tessera
