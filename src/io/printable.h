// Text read from a file, as an error message shows it (tensor names, JSON keys, dtypes).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tessera {

// Control characters escaped (\n, \x01) and cut to about max_bytes bytes with "...", so that a
// message naming a crafted string stays one short line.
std::string printable(std::string_view s, size_t max_bytes = 80);

}  // namespace tessera
