// Measures the CPU's arithmetic peak (the compute side of the roofline, Williams et al. 2009):
// the bound a forward of many rows approaches once the weights are read only once.
#pragma once

#include <cstdint>

namespace tessera {

// Best-of-`repeats` GFLOP/s (1e9 floating-point operations/s, an FMA counted as 2) of
// independent f32 FMA chains on every engine thread; `seconds` is the time of one repeat.
double measure_f32_fma_gflops(double seconds = 0.05, int repeats = 3);
// The same for bf16 dot products (AVX-512-BF16 vdpbf16ps: 2 multiplies and 2 adds per f32 lane);
// 0 when this build or CPU has no such instruction.
double measure_bf16_dot_gflops(double seconds = 0.05, int repeats = 3);

// The same for AMX tile multiplies of bf16 (TDPBF16PS, 16 x 16 x 32 per instruction, full tiles);
// 0 where the CPU or the OS gives no AMX (cpu::amx_bf16_available).
double measure_amx_bf16_gflops(double seconds = 0.05, int repeats = 3);
// `iterations` rounds of four TDPBF16PS on the calling thread; returns the flops done
// (peak_flops_amx.cpp, compiled with the AMX flags).
double amx_bf16_tile_flops(int64_t iterations);

}  // namespace tessera
