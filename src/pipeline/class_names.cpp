#include "tessera/class_names.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "io/printable.h"
#include "io/regular_file.h"
#include "io/strict_json.h"
#include "tessera/error.h"

namespace tessera {

namespace fs = std::filesystem;

std::string normalize_name(const std::string& s) {
  std::string out;
  bool space = false;
  for (unsigned char c : s) {
    if (std::isalnum(c)) {
      if (space && !out.empty()) out += ' ';
      out += static_cast<char>(std::tolower(c));
      space = false;
    } else {
      space = true;
    }
  }
  return out;
}

int edit_distance(const std::string& a, const std::string& b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

bool ClassNames::present(const std::string& model_dir) {
  return fs::exists(fs::path(model_dir) / "classes.json");
}

ClassNames ClassNames::load(const std::string& model_dir, int num_classes) {
  const std::string p = (fs::path(model_dir) / "classes.json").string();
  // The emoji model's 870 classes take about 100 KB.
  return parse(read_small_file(p, size_t{16} << 20), num_classes, p);
}

ClassNames ClassNames::parse(const std::string& text, int num_classes, const std::string& origin) {
  nlohmann::json j;
  try {
    j = parse_strict_json(text, origin);
  } catch (const JsonSyntaxError& e) {
    throw Error(origin + ": not valid JSON (" + e.detail() + ")");
  }
  auto fail = [&](const std::string& what) { throw Error(origin + ": " + what); };
  if (!j.is_object() || !j.contains("classes") || !j["classes"].is_array())
    fail("expected an object with a \"classes\" array");
  ClassNames cn;
  try {
    if (j.contains("styles")) cn.styles_ = j["styles"].get<std::vector<std::string>>();
    cn.default_style_ = j.value("default_style", cn.styles_.empty() ? "" : cn.styles_.front());
    std::map<std::string, std::vector<std::string>> aliases;
    if (j.contains("aliases"))
      aliases = j["aliases"].get<std::map<std::string, std::vector<std::string>>>();
    for (const auto& c : j["classes"]) {
      ClassName x;
      x.name = c.at("name").get<std::string>();
      x.style = c.value("style", "");
      x.category = c.value("category", "");
      if (auto it = aliases.find(x.name); it != aliases.end()) x.aliases = it->second;
      if (!cn.styles_.empty() &&
          std::find(cn.styles_.begin(), cn.styles_.end(), x.style) == cn.styles_.end())
        fail("class " + std::to_string(cn.classes_.size()) + " (" + printable(x.name) +
             ") has style '" + printable(x.style) + "', not one of \"styles\"");
      cn.classes_.push_back(std::move(x));
    }
    if (j.contains("emoji")) {
      // {"red apple": "🍎", ...}: the characters of each emoji name.
      const auto& em = j["emoji"];
      if (!em.is_object()) fail("\"emoji\" must map emoji names to their characters");
      for (const auto& [name, chars] : em.items()) {
        if (!chars.is_string() || chars.get<std::string>().empty() ||
            chars.get<std::string>().size() > 64)
          fail("\"emoji\" of '" + printable(name) + "' must be 1 to 64 bytes of text");
        bool known = false;
        for (ClassName& c : cn.classes_)
          if (c.name == name) {
            c.emoji = chars.get<std::string>();
            known = true;
          }
        if (!known) fail("\"emoji\" names '" + printable(name) + "', which is no class's name");
      }
    }
    if (j.contains("held_out_classes")) {
      const auto& held = j["held_out_classes"];
      if (!held.is_array()) fail("held_out_classes must be a list of class ids");
      for (const auto& v : held) {
        // Read as integers: a float or huge value must not be converted (and wrapped) to an id.
        if (!v.is_number_integer())
          fail("held_out_classes lists " + printable(v.dump()) + ", not a class id");
        const int64_t id =
            v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX ? INT64_MAX : v.get<int64_t>();
        if (id < 0 || id >= static_cast<int64_t>(cn.classes_.size()))
          fail("held_out_classes lists class " + v.dump() + ", out of range");
        cn.classes_[static_cast<size_t>(id)].held_out = true;
      }
    }
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("malformed entry (") + e.what() + ")");
  }
  if (static_cast<int>(cn.classes_.size()) != num_classes)
    fail("lists " + std::to_string(cn.classes_.size()) + " classes but the model has " +
         std::to_string(num_classes));
  if (!cn.styles_.empty() &&
      std::find(cn.styles_.begin(), cn.styles_.end(), cn.default_style_) == cn.styles_.end())
    fail("default_style '" + cn.default_style_ + "' is not one of \"styles\"");
  return cn;
}

std::string ClassNames::label(int id) const {
  const ClassName& c = classes_.at(id);
  return c.style.empty() ? c.name : c.name + " (" + c.style + ")";
}

namespace {

std::vector<std::string> words(const std::string& normalized) {
  std::vector<std::string> w;
  std::stringstream ss(normalized);
  for (std::string x; ss >> x;) w.push_back(x);
  return w;
}

// An emoji as typed, for comparison: without spaces and without U+FE0F (the emoji presentation
// selector, which some keyboards add and others do not).
std::string emoji_key(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 3, "\xEF\xB8\x8F") == 0) {
      i += 2;
      continue;
    }
    if (!std::isspace(static_cast<unsigned char>(s[i]))) out += s[i];
  }
  return out;
}

bool has_non_ascii(const std::string& s) {
  return std::any_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) >= 0x80; });
}

// Whether every word of `want` is a word of `key` (or starts one, with word_starts).
bool has_words(const std::vector<std::string>& want, const std::string& key, bool word_starts) {
  const std::vector<std::string> kw = words(normalize_name(key));
  return std::all_of(want.begin(), want.end(), [&](const std::string& w) {
    return std::any_of(kw.begin(), kw.end(), [&](const std::string& k) {
      return word_starts ? k.rfind(w, 0) == 0 : k == w;
    });
  });
}

std::string join_quoted(const std::vector<std::string>& v, size_t max_items) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < max_items; ++i) s += (i ? ", '" : "'") + v[i] + "'";
  if (v.size() > max_items) s += ", ... (" + std::to_string(v.size()) + " in all)";
  return s;
}

}  // namespace

std::string ClassNames::resolve_style(const std::string& style_in) const {
  const std::string style = style_in.empty() ? default_style_ : style_in;
  if (!styles_.empty() && std::find(styles_.begin(), styles_.end(), style) == styles_.end()) {
    std::string all;
    for (const auto& s : styles_) all += (all.empty() ? "" : ", ") + s;
    throw ParameterError("style", "{style}: unknown style '" + style + "' (one of " + all + ")");
  }
  if (styles_.empty() && !style_in.empty())
    throw ParameterError("style", "{style}: this model has no styles");
  return style;
}

std::vector<int> ClassNames::find_words(const std::string& text, const std::string& style,
                                        bool word_starts) const {
  if (!style.empty()) resolve_style(style);
  const std::vector<std::string> want = words(normalize_name(text));
  auto has_all = [&](const std::string& key) { return has_words(want, key, word_starts); };
  std::vector<int> ids;
  for (size_t i = 0; i < classes_.size(); ++i) {
    const ClassName& c = classes_[i];
    if (!style.empty() && c.style != style) continue;
    if (has_all(c.name) || std::any_of(c.aliases.begin(), c.aliases.end(), has_all))
      ids.push_back(static_cast<int>(i));
  }
  return ids;
}

std::vector<int> ClassNames::find_emoji(const std::string& text, const std::string& style) const {
  if (!style.empty()) resolve_style(style);
  const std::string key = emoji_key(text);
  std::vector<int> ids;
  if (key.empty()) return ids;
  for (size_t i = 0; i < classes_.size(); ++i) {
    const ClassName& c = classes_[i];
    if ((style.empty() || c.style == style) && !c.emoji.empty() && emoji_key(c.emoji) == key)
      ids.push_back(static_cast<int>(i));
  }
  return ids;
}

ClassMatch ClassNames::match(const std::string& prompt, const std::string& style_in) const {
  const std::string style = resolve_style(style_in);
  const std::string q = normalize_name(prompt);
  if (has_non_ascii(prompt)) {  // the emoji itself: "🍎"
    const std::vector<int> ids = find_emoji(prompt, styles_.empty() ? "" : style);
    if (!ids.empty()) return {ids.front(), "emoji"};
    if (q.empty()) {
      const bool mapped = std::any_of(classes_.begin(), classes_.end(),
                                      [](const ClassName& c) { return !c.emoji.empty(); });
      throw Error("'" + prompt + "' is " +
                  (mapped ? "not one of this model's emoji"
                          : "no name, and this model's classes.json gives no emoji characters") +
                  "; give a name, e.g. \"red apple\" (tessera classes lists them)");
    }
  }
  if (q.empty()) throw Error("empty prompt: give an emoji name, e.g. \"red apple\"");

  // Distinct names (one entry per name, whatever its styles) and the class of the wanted style.
  std::vector<std::string> names;
  std::map<std::string, int> class_of;
  std::map<std::string, std::vector<std::string>> keys;  // name -> normalized name + aliases
  for (size_t i = 0; i < classes_.size(); ++i) {
    const ClassName& c = classes_[i];
    if (!styles_.empty() && c.style != style) continue;
    if (class_of.emplace(c.name, static_cast<int>(i)).second) {
      names.push_back(c.name);
      auto& k = keys[c.name];
      k.push_back(normalize_name(c.name));
      for (const auto& a : c.aliases) k.push_back(normalize_name(a));
    }
  }
  // The names listed when several match, each with the alias that matched where its name did not
  // ('dog' (as 'dog face') for "face").
  std::map<std::string, std::string> alias_of;
  auto resolve = [&](const std::vector<std::string>& hits, const char* how) -> ClassMatch {
    if (hits.size() == 1) return {class_of.at(hits[0]), how};
    std::vector<std::string> shown;
    for (const auto& h : hits)
      shown.push_back(alias_of.count(h) ? h + "' (as '" + alias_of.at(h) + "')" : h + "'");
    std::string list;
    for (size_t i = 0; i < shown.size() && i < 12; ++i) list += (i ? ", '" : "'") + shown[i];
    if (shown.size() > 12) list += ", ... (" + std::to_string(shown.size()) + " in all)";
    throw Error("'" + prompt + "' matches " + std::to_string(hits.size()) + " emoji: " + list +
                "; be more specific");
  };
  // The alias of `name` that `matches`, when its name does not.
  auto note_alias = [&](const std::string& name,
                        const std::function<bool(const std::string&)>& matches) {
    if (matches(name)) return;
    for (const auto& a : classes_[class_of.at(name)].aliases)
      if (matches(a)) {
        alias_of[name] = a;
        return;
      }
  };

  std::vector<std::string> exact;
  for (const auto& n : names)
    for (const auto& k : keys[n])
      if (k == q) {
        exact.push_back(n);
        break;
      }
  if (!exact.empty()) {
    // A prompt equal to one emoji's own name wins over aliases of others.
    for (const auto& n : exact)
      if (normalize_name(n) == q) return {class_of.at(n), "exact"};
    for (const auto& n : exact)
      note_alias(n, [&](const std::string& k) { return normalize_name(k) == q; });
    return resolve(exact, "exact");
  }

  // By words: whole words, then words that start with the prompt's ("straw" -> strawberry).
  const std::vector<std::string> want = words(q);
  for (const bool starts : {false, true}) {
    std::vector<std::string> by_words;
    for (int id : find_words(q, styles_.empty() ? "" : style, starts)) {
      const std::string& n = classes_[id].name;
      if (std::find(by_words.begin(), by_words.end(), n) == by_words.end()) by_words.push_back(n);
    }
    for (const auto& n : by_words)
      note_alias(n, [&](const std::string& k) { return has_words(want, k, starts); });
    if (!by_words.empty()) return resolve(by_words, starts ? "word starts" : "words");
  }

  // Spelling: the nearest names by edit distance, accepted within about one typo per 4 letters.
  std::vector<std::pair<int, std::string>> dist;
  for (const auto& n : names) {
    int best = 1 << 30;
    for (const auto& k : keys[n]) best = std::min(best, edit_distance(q, k));
    dist.emplace_back(best, n);
  }
  std::sort(dist.begin(), dist.end());
  const int limit = std::max<int>(1, static_cast<int>(q.size()) / 4);
  std::vector<std::string> close;
  for (const auto& [d, n] : dist)
    if (d == dist.front().first && d <= limit) close.push_back(n);
  if (!close.empty()) return resolve(close, "spelling");
  std::vector<std::string> nearest;
  for (size_t i = 0; i < dist.size() && i < 5; ++i) nearest.push_back(dist[i].second);
  throw Error("no emoji named '" + prompt + "'; closest: " + join_quoted(nearest, 5) +
              " (tessera classes lists them all)");
}

}  // namespace tessera
