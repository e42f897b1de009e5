// glibc's libmvec (>= 2.35) has SIMD variants of expf and erff under the vector function ABI;
// declaring them `omp declare simd` makes the compiler call them in `omp simd` loops (a scalar
// expf or erff costs ~20 ns). A SIMD variant and the scalar function may differ in the last ulp,
// so a caller passes every element through the same SIMD loop (tails padded to whole blocks):
// a value's result must not depend on its position in a tensor (batch invariance).
#pragma once

#include <cmath>

#if TESSERA_HAVE_LIBMVEC
extern "C" {
#pragma omp declare simd notinbranch
float expf(float);
#pragma omp declare simd notinbranch
float erff(float);
}
#endif
