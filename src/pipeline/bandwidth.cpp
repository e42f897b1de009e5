// The public bandwidth probes (tessera/bandwidth.h) over the CPU backend's measurement.
#include "tessera/bandwidth.h"

#include "tensor/cpu/bandwidth.h"

namespace tessera {

double memory_read_bandwidth_gbs(size_t bytes, int repeats) {
  return measure_read_bandwidth_gbs(bytes, repeats);
}

std::vector<double> memory_read_with_fma_gbs(const std::vector<int>& rows, size_t bytes,
                                             int repeats) {
  return measure_read_with_fma_gbs(rows, bytes, repeats);
}

}  // namespace tessera
