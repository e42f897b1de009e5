// The per-instruction-set builds of the linear kernel (linear_tiles.h) and the run-time choice
// between them. The FMA paths compute a range of panels on the calling thread (the caller shares
// the panels between the pool's threads); the AMX path shares them itself (`parallel` false: on
// the calling thread, for small ops).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace tessera::cpu {

// Panels [p_begin, p_end) of y's columns (32 each), every row; w in panels (linear_panels.h).
void linear_avx512(const float* x, int64_t M, int64_t K, const void* panels, DType w_type,
                   int64_t N, const float* bias, float* y, int64_t p_begin, int64_t p_end);
// bf16 weights only, activations rounded to bf16 (linear_amx.cpp); call only where
// amx_bf16_available().
void linear_amx_bf16(const float* x, int64_t M, int64_t K, const uint16_t* panels, int64_t N,
                     const float* bias, float* y, bool parallel);
// AMX tiles with bf16 multiplies and AVX512-BF16 on this CPU, and this process allowed to use
// them (asked of the kernel once).
bool amx_bf16_available();
void linear_avx2(const float* x, int64_t M, int64_t K, const void* panels, DType w_type, int64_t N,
                 const float* bias, float* y, int64_t p_begin, int64_t p_end);

// The kernel paths this CPU can run, the default first ("avx512", "amx", "avx2", "scalar"). "amx"
// is the AVX-512 path but for bf16 weights, which it multiplies on AMX tiles with activations
// rounded to bf16; it is never the default (linear_kernels.cpp says why).
std::vector<std::string> linear_isas();
// Forces a path (tests, benchmarks); "" goes back to the default: the environment variable
// TESSERA_LINEAR_ISA if set, else the first of linear_isas(). Throws tessera::Error for a path this
// CPU cannot run.
void set_linear_isa(const std::string& isa);

}  // namespace tessera::cpu
