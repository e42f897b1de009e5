// The public bandwidth probes (tessera/bandwidth.h) over the CPU backend's measurement.
#include "tessera/bandwidth.h"

#include "tensor/cpu/bandwidth.h"

namespace tessera {

double memory_read_bandwidth_gbs(size_t bytes, int repeats) {
  return measure_read_bandwidth_gbs(bytes, repeats);
}

std::vector<ReadWithFmaProbe> memory_read_with_fma(const std::vector<int>& rows, size_t bytes,
                                                   int repeats) {
  const std::vector<ReadWithFma> m = measure_read_with_fma(rows, bytes, repeats);
  std::vector<ReadWithFmaProbe> out;
  for (size_t i = 0; i < m.size(); ++i) out.push_back({rows[i], m[i].gbs, m[i].sum});
  return out;
}

}  // namespace tessera
