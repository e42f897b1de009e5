// MAR's diffusion step on the device (sampling/diffusion_rows.h): one thread per element runs
// diffusion_step_element, the host chains' formulas. Compiles without CUDA headers: the stream is
// the runtime's opaque CUstream_st.
#pragma once

#include <cstdint>

#include "sampling/diffusion_rows.h"

struct CUstream_st;

namespace tessera {

// diffusion_step_rows's arguments as device pointers. Throws tessera::Error on a failed launch.
// Asynchronous on `stream`.
void launch_diffusion_step(const float* out, int n, int d, const DiffusionStep& step,
                           const DiffusionRowNoise* rows, float* x, float* mean, float* log_var,
                           double* sum_log_std, float* x_in, CUstream_st* stream);

}  // namespace tessera
