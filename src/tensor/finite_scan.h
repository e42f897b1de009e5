// Scans stored values for NaN and Inf without converting them: a weight file with one NaN would
// otherwise load fine and turn every image into noise.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace tessera {

// Index of the first NaN or Inf among n values of a float dtype (f32, f16, bf16, f64) at data, or
// -1 when all are finite. Other dtypes have no non-finite values: -1. Reads the values as integers
// (an all-ones exponent field) so that the loop vectorises and runs at memory bandwidth.
int64_t first_non_finite(DType dtype, const void* data, int64_t n);

}  // namespace tessera
