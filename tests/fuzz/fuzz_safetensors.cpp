// A .safetensors file: SafeTensorsFile::parse, then every tensor's bytes and f32 conversion.
#include "fuzz_targets.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "tessera/error.h"

namespace tessera::fuzz {

void safetensors_input(const uint8_t* data, size_t size) {
  try {
    const SafeTensorsFile f =
        SafeTensorsFile::parse(MappedFile::from_bytes("fuzz.safetensors", data, size));
    for (const auto& [name, t] : f.tensors()) {
      // Read every byte the header claims (AddressSanitizer reports a range outside the input).
      const auto* p = static_cast<const unsigned char*>(t.data);
      volatile unsigned sum = 0;
      for (size_t i = 0; i < t.nbytes; ++i) sum = sum + p[i];
      if (t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16)
        f.read_f32(name);
    }
  } catch (const Error&) {
  }
}

}  // namespace tessera::fuzz

TESSERA_FUZZ_ENTRY(tessera::fuzz::safetensors_input)
