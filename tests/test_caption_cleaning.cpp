// TextPreprocessing::Clean (src/models/caption_cleaning.*) against LlamaGen's own clean_caption:
// tests/fixtures/t5/golden/cleaned.json holds, for the 240 prompts of prompts.json and 160 dirty
// captions (URLs, HTML, entities, percent escapes, CJK, dashes, quotes, fullwidth forms,
// ligatures, ids, file names, stray punctuation), the reference's output after one pass and after
// two (python/make_caption_cleaning_fixtures.py, checked there against language/t5.py).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "models/caption_cleaning.h"
#include "tessera/error.h"
#include "tessera/text_encoder.h"

using namespace tessera;

namespace {

nlohmann::json goldens() {
  return nlohmann::json::parse(
      std::ifstream(std::string(TESSERA_FIXTURES) + "/t5/golden/cleaned.json"));
}

// Inputs whose cleaning is known to differ from the reference's (docs/methods.md): none of the
// goldens today. An entry here needs its reason in docs/methods.md.
const std::set<std::string> kKnownDifferences = {};

}  // namespace

TEST(CaptionCleaning, EqualsLlamaGenOnEveryGolden) {
  const nlohmann::json rows = goldens();
  ASSERT_EQ(rows.size(), 400u);
  int equal = 0;
  for (const auto& row : rows) {
    const std::string text = row.at("text");
    if (kKnownDifferences.count(text)) continue;
    const std::string once = clean_caption(text);
    EXPECT_EQ(once, row.at("once").get<std::string>()) << "one pass of [" << text << "]";
    const std::string twice = clean_caption_twice(text);
    EXPECT_EQ(twice, row.at("twice").get<std::string>()) << "two passes of [" << text << "]";
    equal += once == row.at("once") && twice == row.at("twice");
  }
  EXPECT_EQ(equal, static_cast<int>(rows.size() - kKnownDifferences.size()));
}

// The public entry point: Clean is the two passes, Lower and None are not cleaning.
TEST(CaptionCleaning, PreprocessPromptCleansTwice) {
  for (const auto& row : goldens()) {
    if (!kKnownDifferences.count(row.at("text"))) {
      ASSERT_EQ(preprocess_prompt(row.at("text"), TextPreprocessing::Clean),
                row.at("twice").get<std::string>())
          << row.at("text");
    }
  }
  EXPECT_EQ(preprocess_prompt("&lt;b&gt;Bold&lt;/b&gt;", TextPreprocessing::Clean), "bold< b>");
  EXPECT_EQ(preprocess_prompt(" Visit www.x.com NOW ", TextPreprocessing::Lower),
            "visit www.x.com now");
  EXPECT_EQ(preprocess_prompt(" A+B ", TextPreprocessing::None), " A+B ");
  EXPECT_EQ(LoadOptions{}.text_preprocessing, TextPreprocessing::Clean);
}

TEST(CaptionCleaning, InvalidUtf8IsAnError) {
  for (const std::string& bad :
       std::vector<std::string>{"bad \xff byte", "overlong \xc0\xaf", "surrogate \xed\xa0\x80",
                                "cut \xe2\x82", std::string("nul \0 \xfe", 7)}) {
    EXPECT_THROW(clean_caption(bad), Error) << bad;
    EXPECT_THROW(preprocess_prompt(bad, TextPreprocessing::Clean), Error) << bad;
  }
  // Percent escapes are decoded as the reference decodes them: bad bytes become U+FFFD.
  EXPECT_EQ(clean_caption("caf%C3 ok"), "caf\uFFFD ok");
}
