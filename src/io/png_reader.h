// Reading PNG images from memory (read_png in tessera/image_io.h reads a file through it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

// The largest image read_png accepts: bounded before any pixel memory is allocated.
inline constexpr uint32_t kMaxPngSide = 16384;
inline constexpr uint64_t kMaxPngPixels = uint64_t{1} << 26;

// Decodes a PNG of any colour type and bit depth to 8-bit RGB (alpha dropped, palette and gray
// expanded). Returns height*width*3 bytes; fills width, height and the text chunks (tEXt, zTXt,
// iTXt; text may be null). Throws tessera::Error "WHERE: ..." for a corrupt or truncated image or
// one larger than kMaxPngSide per side or kMaxPngPixels in all.
std::vector<uint8_t> read_png_memory(const uint8_t* data, size_t size, const std::string& where,
                                     int& width, int& height,
                                     std::vector<std::pair<std::string, std::string>>* text);

}  // namespace tessera
