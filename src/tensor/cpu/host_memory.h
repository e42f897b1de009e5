// How much host memory a request may still take: what the kernel reports as available, bounded
// by the cgroup limit a container runs under. Checked before large allocations, because Linux
// overcommits: an allocation that cannot be backed succeeds and the OOM killer strikes later.
#pragma once

#include <cstdint>

namespace tessera {

int64_t available_host_memory();

}  // namespace tessera
