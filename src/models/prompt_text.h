// LlamaGen's T5Embedder without its caption cleaning (use_text_preprocessing=False):
// text.lower().strip(), TextPreprocessing::Lower. The cleaning is models/caption_cleaning.h.
#pragma once

#include <string>

namespace tessera {

// The UTF-8 text lowercased (Unicode simple case mapping, glibc's C.UTF-8 tables) and stripped of
// leading and trailing white space, as Python's str.lower().strip() gives it for every character
// whose lowercase is one character. Invalid UTF-8 is an error.
std::string lowercase_and_strip(const std::string& utf8);

}  // namespace tessera
