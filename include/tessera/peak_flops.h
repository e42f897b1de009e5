// The machine's arithmetic peak: with the read bandwidth (tessera/bandwidth.h) the two sides of
// the roofline that bound a forward's time (tessera bench --verify-cost).
#pragma once

namespace tessera {

struct PeakFlops {
  double f32_fma_gflops = 0.0;   // f32 fused multiply-adds, every engine thread
  double bf16_dot_gflops = 0.0;  // bf16 dot products (AVX-512-BF16); 0 where the CPU has none
  double amx_bf16_gflops = 0.0;  // bf16 AMX tile multiplies; 0 where the CPU or OS has none
};

// A short in-process measurement (about 0.3 s), best of a few repeats.
PeakFlops measure_peak_flops();

}  // namespace tessera
