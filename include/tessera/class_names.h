// Human-readable class names of a class-conditional model (classes.json in its directory), and
// matching of a free-text prompt such as "red apple" to a class id.
#pragma once

#include <string>
#include <vector>

namespace tessera {

struct ClassName {
  std::string name;      // "red apple"
  std::string style;     // "twitter" (empty when the model has no styles)
  std::string category;  // "Food & Drink" (may be empty)
  std::vector<std::string> aliases;
  std::string emoji;  // the emoji's characters ("🍎", UTF-8), "" when classes.json has none
  // The model never saw this class's image in training (a held-out split; its other styles may
  // have been seen). Generated images of such classes are expected to be poor.
  bool held_out = false;
};

// What a prompt resolved to, and how (for the log).
struct ClassMatch {
  int class_id = -1;
  std::string how;  // "exact", "emoji", "words", "word starts" or "spelling"
};

class ClassNames {
 public:
  // True when model_dir has a classes.json.
  static bool present(const std::string& model_dir);
  // Reads and validates model_dir/classes.json; num_classes is the model's class count.
  static ClassNames load(const std::string& model_dir, int num_classes);
  static ClassNames parse(const std::string& json_text, int num_classes, const std::string& origin);

  const std::vector<ClassName>& classes() const { return classes_; }
  const std::vector<std::string>& styles() const { return styles_; }
  const std::string& default_style() const { return default_style_; }
  // "red apple (twitter)"
  std::string label(int class_id) const;

  // Resolves a prompt against names and aliases: the emoji itself ("🍎", with or without the
  // emoji presentation selector U+FE0F), else an exact match (case, spacing and punctuation
  // ignored), else the one name containing all of the prompt's words, else the one name with a
  // word starting with each of them ("straw" -> strawberry), else the one name within a small edit
  // distance. Several candidates, or none, throw an Error that lists the close matches (and the
  // alias by which a name matched). style: one of styles(), or empty for default_style().
  ClassMatch match(const std::string& prompt, const std::string& style = "") const;

  // Class ids whose name or one alias contains every word of `text` (case and punctuation
  // ignored), or with `word_starts` a word starting with each, in `style` (every style when
  // empty; an unknown style throws).
  std::vector<int> find_words(const std::string& text, const std::string& style = "",
                              bool word_starts = false) const;
  // Class ids (in `style`, every style when empty) of the emoji that `text` is ("🍎"); empty
  // when it is none of them.
  std::vector<int> find_emoji(const std::string& text, const std::string& style = "") const;

 private:
  // The style a prompt asks for (empty: default_style()); throws for an unknown one.
  std::string resolve_style(const std::string& style) const;

  std::vector<ClassName> classes_;
  std::vector<std::string> styles_;
  std::string default_style_;
};

// Lowercase, every run of non-alphanumeric characters turned into one space, trimmed.
std::string normalize_name(const std::string& s);
// Levenshtein distance over bytes.
int edit_distance(const std::string& a, const std::string& b);

}  // namespace tessera
