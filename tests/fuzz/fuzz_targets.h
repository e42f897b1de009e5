// The fuzz targets' bodies (tests/fuzz/fuzz_*.cpp): each feeds bytes to one reader and uses what
// it returns. A reader may accept the input or throw tessera::Error, which the body catches; any
// other exception, crash or sanitizer report is a bug. libFuzzer calls them through
// LLVMFuzzerTestOneInput (TESSERA_FUZZ builds); tessera_tests replays the committed corpus and
// regression inputs through them (tests/test_io_robustness.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::fuzz {

void safetensors_input(const uint8_t* data, size_t size);
void npy_input(const uint8_t* data, size_t size);
void config_input(const uint8_t* data, size_t size);  // config.json and classes.json
void png_input(const uint8_t* data, size_t size);

}  // namespace tessera::fuzz

// One libFuzzer entry point per target binary.
#ifdef TESSERA_FUZZ_MAIN
#define TESSERA_FUZZ_ENTRY(body)                                            \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { \
    body(data, size);                                                       \
    return 0;                                                               \
  }
#else
#define TESSERA_FUZZ_ENTRY(body)
#endif
