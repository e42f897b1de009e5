#include "io/printable.h"

namespace tessera {

std::string printable(std::string_view s, size_t max_bytes) {
  size_t n = s.size();
  if (n > max_bytes) {
    n = max_bytes;
    // Do not cut a UTF-8 sequence: back up over continuation bytes.
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80) --n;
  }
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      static const char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return n < s.size() ? out + "..." : out;
}

}  // namespace tessera
