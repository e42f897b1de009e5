// Writing generated images: one PNG per image (numbered _0000.. when several) or one grid sheet,
// each with its generation parameters in a PNG text chunk.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::cli {

// path_0000.png style names when n > 1.
std::string numbered(const std::string& path, size_t i, size_t n);

// px: n RGB images [n, size, size, 3].
void write_pngs(const std::vector<uint8_t>& px, int n, int size, const std::string& out, bool grid,
                const std::vector<std::string>& params);

}  // namespace tessera::cli
