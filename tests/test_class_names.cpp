// Prompt -> class matching of classes.json (tessera generate "red apple").
#include <gtest/gtest.h>

#include <functional>

#include "tessera/class_names.h"
#include "tessera/error.h"

using namespace tessera;

namespace {

// Three emoji in two styles; class id = emoji * 2 + style.
const char* kJson = R"({
  "format": "tessera-classes-1", "styles": ["twitter", "google"], "default_style": "twitter",
  "classes": [
    {"name": "red apple", "style": "twitter", "category": "Food & Drink"},
    {"name": "red apple", "style": "google", "category": "Food & Drink"},
    {"name": "green apple", "style": "twitter", "category": "Food & Drink"},
    {"name": "green apple", "style": "google", "category": "Food & Drink"},
    {"name": "grinning face", "style": "twitter", "category": "Smileys & Emotion"},
    {"name": "grinning face", "style": "google", "category": "Smileys & Emotion"}],
  "aliases": {"red apple": ["apple"], "grinning face": ["grinning"]}
})";

ClassNames names() {
  return ClassNames::parse(kJson, 6, "test");
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ClassNames, NormalizesAndMeasuresDistance) {
  EXPECT_EQ(normalize_name("  Red_APPLE!! "), "red apple");
  EXPECT_EQ(normalize_name("T-Rex"), "t rex");
  EXPECT_EQ(edit_distance("apple", "aple"), 1);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);
  EXPECT_EQ(edit_distance("", "abc"), 3);
}

TEST(ClassNames, ExactNameOrAliasInTheRequestedStyle) {
  const ClassNames n = names();
  EXPECT_EQ(n.match("red apple").class_id, 0);  // default style: twitter
  EXPECT_EQ(n.match("Red Apple", "google").class_id, 1);
  EXPECT_EQ(n.match("apple").class_id, 0);  // alias
  EXPECT_EQ(n.match("apple").how, "exact");
  EXPECT_EQ(n.match("grinning", "google").class_id, 5);
  EXPECT_EQ(n.label(5), "grinning face (google)");
}

TEST(ClassNames, WordsThenSpelling) {
  const ClassNames n = names();
  const ClassMatch w = n.match("face");
  EXPECT_EQ(w.class_id, 4);
  EXPECT_EQ(w.how, "words");
  const ClassMatch s = n.match("gren aple", "google");
  EXPECT_EQ(s.class_id, 3);
  EXPECT_EQ(s.how, "spelling");
}

TEST(ClassNames, AmbiguousAndUnknownPromptsListCandidates) {
  const ClassNames n = names();
  EXPECT_EQ(n.match("red").class_id, 0);     // only 'red apple' has the word
  EXPECT_EQ(n.match("apples").class_id, 0);  // one typo from the alias 'apple'
  const ClassNames no_alias = ClassNames::parse(
      R"({"classes": [{"name": "red apple"}, {"name": "green apple"}]})", 2, "test");
  const std::string two = error_of([&] { no_alias.match("apple"); });
  EXPECT_NE(two.find("matches 2 emoji"), std::string::npos) << two;
  EXPECT_NE(two.find("'red apple'"), std::string::npos) << two;
  EXPECT_NE(two.find("'green apple'"), std::string::npos) << two;
  const std::string none = error_of([&] { n.match("submarine"); });
  EXPECT_NE(none.find("no emoji named 'submarine'"), std::string::npos) << none;
  EXPECT_NE(none.find("closest"), std::string::npos) << none;
  EXPECT_NE(error_of([&] { n.match("apple", "openmoji"); }).find("unknown style 'openmoji'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { n.match("  "); }).find("empty prompt"), std::string::npos);
}

TEST(ClassNames, RejectsMalformedFiles) {
  EXPECT_NE(error_of([] {
              ClassNames::parse(kJson, 7, "x.json");
            }).find("x.json: lists 6 classes but the model has 7"),
            std::string::npos);
  EXPECT_NE(error_of([] { ClassNames::parse("{", 1, "x.json"); }).find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              ClassNames::parse(R"({"styles": ["a"], "classes": [{"name": "x", "style": "b"}]})", 1,
                                "x.json");
            }).find("style 'b'"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              ClassNames::parse(R"({"classes": [{"style": "b"}]})", 1, "x.json");
            }).find("malformed entry"),
            std::string::npos);
}

TEST(ClassNames, HeldOutClasses) {
  EXPECT_FALSE(names().classes()[1].held_out);
  const ClassNames held = ClassNames::parse(
      R"({"classes": [{"name": "x"}, {"name": "y"}], "held_out_classes": [1]})", 2, "x.json");
  EXPECT_FALSE(held.classes()[0].held_out);
  EXPECT_TRUE(held.classes()[1].held_out);
  EXPECT_NE(error_of([] {
              ClassNames::parse(R"({"classes": [{"name": "x"}], "held_out_classes": [3]})", 1,
                                "x.json");
            }).find("held_out_classes lists class 3, out of range"),
            std::string::npos);
}

// Issue 39: the emoji itself as a prompt, words that start names, and the alias by which a name
// matched in the list of candidates.
TEST(ClassNames, EmojiCharactersAsPrompts) {
  const ClassNames n = ClassNames::parse(
      R"({"styles": ["twitter", "google"], "classes": [
        {"name": "red apple", "style": "twitter"}, {"name": "red apple", "style": "google"},
        {"name": "hot pepper", "style": "twitter"}, {"name": "hot pepper", "style": "google"}],
        "emoji": {"red apple": "🍎", "hot pepper": "🌶️"}})",
      4, "x.json");
  EXPECT_EQ(n.classes()[0].emoji, "🍎");
  const ClassMatch m = n.match("🍎", "google");
  EXPECT_EQ(m.class_id, 1);
  EXPECT_EQ(m.how, "emoji");
  EXPECT_EQ(n.match(" 🍎 ").class_id, 0);
  // With or without the emoji presentation selector U+FE0F, either way round.
  EXPECT_EQ(n.match("🌶").class_id, 2);
  EXPECT_EQ(n.match("🍎\xEF\xB8\x8F").class_id, 0);
  EXPECT_EQ(n.find_emoji("🌶️", "google"), std::vector<int>{3});
  EXPECT_EQ(n.find_emoji("🌶️"), (std::vector<int>{2, 3}));
  EXPECT_TRUE(n.find_emoji("apple").empty());
  const std::string other = error_of([&] { n.match("🚀"); });
  EXPECT_NE(other.find("'🚀' is not one of this model's emoji"), std::string::npos) << other;
  const std::string none = error_of(
      [] { ClassNames::parse(R"({"classes": [{"name": "red apple"}]})", 1, "x").match("🍎"); });
  EXPECT_NE(none.find("gives no emoji characters"), std::string::npos) << none;
  EXPECT_EQ(none.find("empty prompt"), std::string::npos) << none;
  // Malformed maps are refused.
  EXPECT_NE(error_of([] {
              ClassNames::parse(R"({"classes": [{"name": "x"}], "emoji": {"y": "🍎"}})", 1,
                                "x.json");
            }).find("no class's name"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              ClassNames::parse(R"({"classes": [{"name": "x"}], "emoji": {"x": 3}})", 1, "x.json");
            }).find("1 to 64 bytes"),
            std::string::npos);
}

TEST(ClassNames, WordStartsAndAliasesInTheList) {
  const ClassNames n = ClassNames::parse(
      R"({"classes": [{"name": "strawberry"}, {"name": "grinning face"}, {"name": "cat face"},
        {"name": "dog"}, {"name": "straw hat"}], "aliases": {"dog": ["dog face"]}})",
      5, "x.json");
  EXPECT_EQ(n.find_words("straw"), std::vector<int>{4});  // whole words by default
  EXPECT_EQ(n.find_words("straw", "", true), (std::vector<int>{0, 4}));
  EXPECT_EQ(n.find_words("strawb", "", true), std::vector<int>{0});
  const ClassMatch m = n.match("strawb");
  EXPECT_EQ(m.class_id, 0);
  EXPECT_EQ(m.how, "word starts");
  EXPECT_EQ(n.match("straw").class_id, 4);  // a whole word first
  const std::string face = error_of([&] { n.match("face"); });
  EXPECT_NE(face.find("matches 3 emoji"), std::string::npos) << face;
  EXPECT_NE(face.find("'dog' (as 'dog face')"), std::string::npos) << face;
  EXPECT_NE(face.find("'cat face',"), std::string::npos) << face;  // its own name: no alias
}
