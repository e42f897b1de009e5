// LlamaGen's caption cleaning (T5Embedder.clean_caption, language/t5.py, from PixArt and
// DeepFloyd IF): URLs, HTML, @names, ids, file names, CJK and stray punctuation removed, quotes
// and dashes unified, lowercased. The ~40 regular expressions run on ICU with Python's `re`
// semantics for \w \s \b; ftfy.fix_text and BeautifulSoup(.., "html.parser").text are
// reimplemented for what captions hold (docs/methods.md names what differs).
#pragma once

#include <string>

namespace tessera {

// One pass of clean_caption on UTF-8 text; invalid UTF-8 is an Error.
std::string clean_caption(const std::string& utf8);

// TextPreprocessing::Clean: clean_caption twice, as T5Embedder.text_preprocessing does.
std::string clean_caption_twice(const std::string& utf8);

}  // namespace tessera
