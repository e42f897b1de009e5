// The public peak probe (tessera/peak_flops.h) over the CPU backend's measurement.
#include "tessera/peak_flops.h"

#include "tensor/cpu/peak_flops.h"

namespace tessera {

PeakFlops measure_peak_flops() {
  PeakFlops p;
  p.f32_fma_gflops = measure_f32_fma_gflops();
  p.bf16_dot_gflops = measure_bf16_dot_gflops();
  p.amx_bf16_gflops = measure_amx_bf16_gflops();
  return p;
}

}  // namespace tessera
