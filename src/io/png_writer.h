// PNG output (libpng), with text chunks such as "parameters" (the generation settings, in the
// convention of stable-diffusion front-ends) so an image can be reproduced from its file.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

// rgb: height*width*3 bytes, row-major.
void write_png(const std::string& path, const uint8_t* rgb, int width, int height,
               const std::vector<std::pair<std::string, std::string>>& text = {});

// Reads an 8-bit RGB/RGBA PNG (used by tests); returns RGB bytes and fills the text chunks.
std::vector<uint8_t> read_png(const std::string& path, int& width, int& height,
                              std::vector<std::pair<std::string, std::string>>* text = nullptr);

}  // namespace tessera
