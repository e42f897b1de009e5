#include "tensor/cpu/host_memory.h"

#include <sys/sysinfo.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <string>

namespace tessera {

namespace {

// The value of a /proc/meminfo field in bytes, or -1.
int64_t meminfo_bytes(const std::string& field) {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == field + ":") return kib * 1024;
  }
  return -1;
}

// A single number from a (pseudo-)file, or -1 ("max", missing or unreadable).
int64_t file_number(const char* path) {
  std::ifstream in(path);
  int64_t v = -1;
  if (!(in >> v)) return -1;
  return v;
}

}  // namespace

int64_t available_host_memory() {
  int64_t avail = meminfo_bytes("MemAvailable");
  if (avail < 0) {
    struct sysinfo si {};
    avail = sysinfo(&si) == 0 ? static_cast<int64_t>(si.freeram) * si.mem_unit
                              : std::numeric_limits<int64_t>::max();
  }
  // cgroup v2, then v1: the container's limit minus what the group already uses.
  for (auto [limit_path, usage_path] :
       {std::pair{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
        std::pair{"/sys/fs/cgroup/memory/memory.limit_in_bytes",
                  "/sys/fs/cgroup/memory/memory.usage_in_bytes"}}) {
    const int64_t limit = file_number(limit_path), used = file_number(usage_path);
    if (limit > 0 && used >= 0 && limit < (int64_t{1} << 60)) {
      avail = std::min(avail, std::max<int64_t>(limit - used, 0));
      break;
    }
  }
  return avail;
}

}  // namespace tessera
