// A .npy file: parse_npy, then each conversion of the array.
#include "fuzz_targets.h"
#include "io/npy.h"
#include "tessera/error.h"

namespace tessera::fuzz {

void npy_input(const uint8_t* data, size_t size) {
  NpyArray a;
  try {
    a = parse_npy(data, size, "fuzz.npy");
  } catch (const Error&) {
    return;
  }
  // Each conversion refuses the dtypes it does not take, or out-of-range integers.
  try {
    a.as_f32();
  } catch (const Error&) {
  }
  try {
    a.as_f64();
  } catch (const Error&) {
  }
  try {
    a.as_i32();
  } catch (const Error&) {
  }
}

}  // namespace tessera::fuzz

TESSERA_FUZZ_ENTRY(tessera::fuzz::npy_input)
