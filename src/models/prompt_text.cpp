#include "models/prompt_text.h"

#include <locale.h>
#include <wctype.h>

#include <vector>

#include "tessera/error.h"

namespace tessera {

namespace {

// Decodes UTF-8 (shortest forms only, no surrogates); throws on anything else.
std::vector<char32_t> decode_utf8(const std::string& s) {
  std::vector<char32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size())
      throw Error("the prompt is not valid UTF-8 (byte " + std::to_string(i) + ")");
    char32_t c = n == 1 ? b : b & (0x7f >> n);
    for (int k = 1; k < n; ++k) {
      const auto cb = static_cast<unsigned char>(s[i + k]);
      if ((cb >> 6) != 2)
        throw Error("the prompt is not valid UTF-8 (byte " + std::to_string(i + k) + ")");
      c = (c << 6) | (cb & 0x3f);
    }
    const char32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min[n] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
      throw Error("the prompt is not valid UTF-8 (byte " + std::to_string(i) + ")");
    out.push_back(c);
    i += n;
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xc0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xe0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  }
}

// The C.UTF-8 locale (glibc >= 2.35 has it built in), made once; its case and space tables
// cover all of Unicode, unlike the "C" locale's ASCII.
locale_t utf8_locale() {
  static const locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
  if (!loc) throw Error("internal: the C.UTF-8 locale is not available");
  return loc;
}

}  // namespace

std::string lowercase_and_strip(const std::string& utf8) {
  const std::vector<char32_t> text = decode_utf8(utf8);
  const locale_t loc = utf8_locale();
  auto space = [&](char32_t c) {
    // Python's str.isspace also counts the separators U+001C..U+001F and U+0085.
    return iswspace_l(static_cast<wint_t>(c), loc) || (c >= 0x1c && c <= 0x1f) || c == 0x85;
  };
  size_t begin = 0, end = text.size();
  while (begin < end && space(text[begin])) ++begin;
  while (end > begin && space(text[end - 1])) --end;
  std::string out;
  for (size_t i = begin; i < end; ++i)
    append_utf8(out, static_cast<char32_t>(towlower_l(static_cast<wint_t>(text[i]), loc)));
  return out;
}

}  // namespace tessera
