// A PNG image: read_png_memory with its text chunks.
#include <string>
#include <utility>
#include <vector>

#include "fuzz_targets.h"
#include "io/png_reader.h"
#include "tessera/error.h"

namespace tessera::fuzz {

void png_input(const uint8_t* data, size_t size) {
  try {
    int w = 0, h = 0;
    std::vector<std::pair<std::string, std::string>> text;
    const std::vector<uint8_t> rgb = read_png_memory(data, size, "fuzz.png", w, h, &text);
    if (rgb.size() != static_cast<size_t>(w) * h * 3) __builtin_trap();  // the promised layout
  } catch (const Error&) {
  }
}

}  // namespace tessera::fuzz

TESSERA_FUZZ_ENTRY(tessera::fuzz::png_input)
