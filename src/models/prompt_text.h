// What LlamaGen's T5Embedder does to a prompt before tokenizing it. Its default cleaning
// (clean_caption, twice: ftfy, BeautifulSoup, ~40 regular expressions) is not reproduced here;
// tessera applies its other path, text.lower().strip() (docs/methods.md names the deviation).
#pragma once

#include <string>

namespace tessera {

// The UTF-8 text lowercased (Unicode simple case mapping, glibc's C.UTF-8 tables) and stripped of
// leading and trailing white space, as Python's str.lower().strip() gives it for every character
// whose lowercase is one character. Invalid UTF-8 is an error.
std::string lowercase_and_strip(const std::string& utf8);

}  // namespace tessera
