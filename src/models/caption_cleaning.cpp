// LlamaGen's clean_caption on ICU. The steps, in the reference's order:
//   1. urllib.parse.unquote_plus; strip; lower (ICU root full case mapping = Python str.lower)
//   2. "<person>", two URL rules
//   3. BeautifulSoup(text, "html.parser").text: tags, comments and <script>/<style> contents
//      dropped, character references decoded, as Python's html.parser tokenizes them and bs4
//      decodes them (html_parser_text below)
//   4. @names, CJK blocks, dashes, quotes, &quot; &amp, IP addresses, ids, file names, punctuation
//   5. more than 3 of '-' and '_': all become spaces
//   6. basic_clean: ftfy.fix_text (its default fixers except fix_encoding: see fix_text below),
//      html.unescape twice, strip
//   7. codes like jc6640, "free shipping", "click for ...", "page 12", sizes 3x4, spacing after
//      punctuation, white space runs, enclosing quotes, leading and trailing punctuation; strip
// Python's `re` and ICU differ in \w \s \b; the patterns are written in Python's syntax and
// translated (icu_syntax) so that they match what Python's do. Differences: docs/methods.md.
#include "models/caption_cleaning.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "tessera/error.h"

namespace tessera {

namespace {

using icu::RegexMatcher;
using icu::RegexPattern;
using icu::UnicodeString;

void check(UErrorCode status, const char* what) {
  if (U_FAILURE(status))
    throw Error(std::string("internal: ICU ") + what + ": " + u_errorName(status));
}

// ---- Python `re` syntax on ICU -------------------------------------------------------------

// Python's \w on str patterns: str.isalnum() or '_' (letters, numbers); ICU's \w also takes
// marks and joiners. Python's \s: str.isspace(); ICU's lacks \v, U+001C..U+001F and U+0085.
constexpr std::string_view kWord = R"([\p{L}\p{N}_])";
constexpr std::string_view kNotWord = R"([^\p{L}\p{N}_])";
constexpr std::string_view kSpace = R"([\t-\r\x{1c}-\x{20}\x{85}\p{Z}])";
constexpr std::string_view kNotSpace = R"([^\t-\r\x{1c}-\x{20}\x{85}\p{Z}])";

std::string icu_syntax(std::string_view py) {
  std::string out;
  for (size_t i = 0; i < py.size(); ++i) {
    if (py[i] != '\\' || i + 1 == py.size()) {
      out += py[i];
      continue;
    }
    const char c = py[++i];
    if (c == 'w') {
      out += kWord;
    } else if (c == 'W') {
      out += kNotWord;
    } else if (c == 's') {
      out += kSpace;
    } else if (c == 'S') {
      out += kNotSpace;
    } else if (c == 'b') {  // a boundary between Python's \w and \W (ICU's ignores marks)
      out += "(?:(?<=";
      out += kWord;
      out += ")(?!";
      out += kWord;
      out += ")|(?<!";
      out += kWord;
      out += ")(?=";
      out += kWord;
      out += "))";
    } else {
      out += '\\';
      out += c;
    }
  }
  return out;
}

std::unique_ptr<RegexPattern> compile(std::string_view py, uint32_t flags = 0) {
  UErrorCode status = U_ZERO_ERROR;
  UParseError where;
  // UNIX_LINES: `$` matches before a final "\n" only, as Python's does.
  std::unique_ptr<RegexPattern> p(RegexPattern::compile(UnicodeString::fromUTF8(icu_syntax(py)),
                                                        flags | UREGEX_UNIX_LINES, where, status));
  if (U_FAILURE(status))
    throw Error("internal: caption cleaning pattern " + std::string(py) + ": " +
                u_errorName(status) + " at " + std::to_string(where.offset));
  return p;
}

// A replacement rule: pattern (Python syntax), replacement (ICU syntax: $1 for Python's \1).
struct Rule {
  const char* pattern;
  const char* replacement;
};

struct Rules {
  std::vector<std::unique_ptr<RegexPattern>> patterns;
  std::vector<UnicodeString> replacements;
  explicit Rules(std::initializer_list<Rule> rules) {
    for (const Rule& r : rules) {
      patterns.push_back(compile(r.pattern));
      replacements.push_back(UnicodeString::fromUTF8(r.replacement));
    }
  }
  UnicodeString apply(UnicodeString text) const {
    for (size_t i = 0; i < patterns.size(); ++i) {
      UErrorCode status = U_ZERO_ERROR;
      std::unique_ptr<RegexMatcher> m(patterns[i]->matcher(text, status));
      check(status, "matcher");
      UnicodeString out = m->replaceAll(replacements[i], status);
      check(status, "replaceAll");
      text = out;
    }
    return text;
  }
};

#define URL_TAIL R"([a-zA-Z0-9.\-]+[.](?:com|co|ru|net|org|edu|gov|it)[\w/-]*\b\/?(?!@))"

const Rules& before_html() {
  static const Rules rules{
      {R"(<person>)", "person"},
      {R"(\b((?:https?:(?:\/{1,3}|[a-zA-Z0-9%])|)" URL_TAIL "))", ""},
      {R"(\b((?:www:(?:\/{1,3}|[a-zA-Z0-9%])|)" URL_TAIL "))", ""},
  };
  return rules;
}

const Rules& after_html() {
  static const Rules rules{
      {R"(@[\w\d]+\b)", ""},        // @nickname
      {R"([\u31c0-\u31ef]+)", ""},  // CJK strokes
      {R"([\u31f0-\u31ff]+)", ""},  // katakana phonetic extensions
      {R"([\u3200-\u32ff]+)", ""},  // enclosed CJK letters and months
      {R"([\u3300-\u33ff]+)", ""},  // CJK compatibility
      {R"([\u3400-\u4dbf]+)", ""},  // CJK unified ideographs extension A
      {R"([\u4dc0-\u4dff]+)", ""},  // Yijing hexagram symbols
      {R"([\u4e00-\u9fff]+)", ""},  // CJK unified ideographs
      {R"([\u002D\u058A\u05BE\u1400\u1806\u2010-\u2015\u2E17\u2E1A\u2E3A\u2E3B\u2E40\u301C)"
       R"(\u3030\u30A0\uFE31\uFE32\uFE58\uFE63\uFF0D]+)",
       "-"},  // every dash
      {"[`\u00b4\u00ab\u00bb\u201c\u201d\u00a8]", "\""},
      {"[\u2018\u2019]", "'"},
      {R"(&quot;?)", ""},
      {R"(&amp)", ""},
      {R"(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})", " "},  // IP addresses
      {R"(\d:\d\d\s+$)", ""},                          // article ids
      {R"(\\n)", " "},                                 // a literal backslash-n
      {R"(#\d{1,3}\b)", ""},
      {R"(#\d{5,}\b)", ""},
      {R"(\b\d{6,}\b)", ""},
      {R"([\S]+\.(?:png|jpg|jpeg|bmp|webp|eps|pdf|apk|mp4))", ""},  // file names
      {R"([\"\']{2,})", "\""},
      {R"([\.]{2,})", " "},
      // The reference's bad_punct_regex, every character escaped for ICU's set syntax.
      {"[\\#\u00ae\u2022\u00a9\u2122\\&\\@\u00b7\u00ba\u00bd\u00be\u00bf\u00a1\u00a7\\~\\)\\("
       "\\]\\[\\}\\{\\|\\\\\\/\\*]{1,}",
       " "},
      {R"(\s+\.\s+)", " "},
  };
  return rules;
}

const Rules& after_basic_clean() {
  static const Rules rules{
      {R"(\b[a-zA-Z]{1,3}\d{3,15}\b)", ""},  // jc6640
      {R"(\b[a-zA-Z]+\d+[a-zA-Z]+\b)", ""},  // jc6640vc
      {R"(\b\d+[a-zA-Z]+\d+\b)", ""},        // 6640vc231
      {R"((worldwide\s+)?(free\s+)?shipping)", ""},
      {R"((free\s)?download(\sfree)?)", ""},
      {R"(\bclick\b\s(?:for|on)\s\w+)", ""},
      {R"(\b(?:png|jpg|jpeg|bmp|webp|eps|pdf|apk|mp4)(\simage[s]?)?)", ""},
      {R"(\bpage\s+\d+\b)", ""},
      {R"(\b\d*[a-zA-Z]+\d+[a-zA-Z]+\d+[a-zA-Z\d]*\b)", " "},  // j2d1a2a
      {"\\b\\d+\\.?\\d*[x\u0445\u00d7]\\d+\\.?\\d*\\b", ""},   // sizes 3x4
      {R"(\b\s+\:\s+)", ": "},
      {R"((\D[,\./])\b)", "$1 "},
      {R"(\s+)", " "},
      {R"(^[\"\']([\w\W]+)[\"\']$)", "$1"},
      {R"(^[\'\_,\-\:;])", ""},
      {R"([\'\_,\-\:\-\+]$)", ""},
      {R"(^\.\S+$)", ""},
  };
  return rules;
}

#undef URL_TAIL

// ---- Unicode helpers -----------------------------------------------------------------------

// Python's str.isspace.
bool py_space(UChar32 c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 ||
         u_charType(c) == U_SPACE_SEPARATOR || c == 0x2028 || c == 0x2029;
}

// Python's str.strip().
UnicodeString py_strip(const UnicodeString& s) {
  int32_t begin = 0, end = s.length();
  while (begin < end && py_space(s.char32At(begin))) begin = s.moveIndex32(begin, 1);
  while (end > begin && py_space(s.char32At(end - 1))) end = s.moveIndex32(end, -1);
  return UnicodeString(s, begin, end - begin);
}

std::string to_utf8(const UnicodeString& s) {
  std::string out;
  s.toUTF8String(out);
  return out;
}

// Windows-1252 for 0x80..0x9F, the bytes it leaves undefined kept as the C1 control.
UChar32 windows_1252(UChar32 c) {
  static const char16_t table[32] = {0x20ac, 0x81,   0x201a, 0x192,  0x201e, 0x2026, 0x2020, 0x2021,
                                     0x2c6,  0x2030, 0x160,  0x2039, 0x152,  0x8d,   0x17d,  0x8f,
                                     0x90,   0x2018, 0x2019, 0x201c, 0x201d, 0x2022, 0x2013, 0x2014,
                                     0x2dc,  0x2122, 0x161,  0x203a, 0x153,  0x9d,   0x17e,  0x178};
  return c >= 0x80 && c <= 0x9f ? table[c - 0x80] : c;
}

// ---- HTML5 named character references ------------------------------------------------------

struct Entity {
  const char* name;
  const char* text;
};
constexpr Entity kEntities[] = {
#include "models/html_entities.inc"
};

// The text of the entity `name` (with its ';' if it has one), or nullptr.
const char* html5_entity(const std::string& name) {
  const Entity* end = kEntities + sizeof(kEntities) / sizeof(kEntities[0]);
  const Entity* it = std::lower_bound(
      kEntities, end, name, [](const Entity& e, const std::string& n) { return n > e.name; });
  return it != end && name == it->name ? it->text : nullptr;
}

// ---- urllib.parse.unquote_plus -------------------------------------------------------------

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// '+' is a space; %XX escapes in each run of ASCII characters are bytes, decoded as UTF-8 with
// U+FFFD for each maximal invalid subsequence (Python's errors="replace", ICU's fromUTF8).
std::string unquote_plus(const std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) >= 0x80) {
      out += s[i++];
      continue;
    }
    size_t j = i;
    while (j < s.size() && static_cast<unsigned char>(s[j]) < 0x80) ++j;
    std::string bytes;
    for (size_t k = i; k < j; ++k) {
      if (s[k] == '+') {
        bytes += ' ';
      } else if (s[k] == '%' && k + 2 < j && hex_value(s[k + 1]) >= 0 && hex_value(s[k + 2]) >= 0) {
        bytes += static_cast<char>(hex_value(s[k + 1]) * 16 + hex_value(s[k + 2]));
        k += 2;
      } else {
        bytes += s[k];
      }
    }
    out += to_utf8(UnicodeString::fromUTF8(bytes));
    i = j;
  }
  return out;
}

// ---- BeautifulSoup(text, "html.parser").text -----------------------------------------------

// Python's html.parser (3.11) as bs4 drives it (convert_charrefs=False; feed, then close):
// markup is dropped, character references are decoded by bs4, and the text between is kept.
// A construct left open at the end (feed stops there) is taken as text as close() takes it.
class HtmlText {
 public:
  explicit HtmlText(const UnicodeString& s) : s_(s), n_(s.length()) {}

  UnicodeString run() {
    int32_t i = 0;
    while (i < n_) {
      if (!cdata_.isEmpty()) {  // <script> or <style>: raw text up to its end tag, not kept
        const int32_t j = find_cdata_end(i);
        if (j < 0) return out_;  // never closed: the rest is dropped
        i = j;
        const int32_t k = s_.indexOf(u'>', j + 1);
        cdata_.remove();
        i = k + 1;
        continue;
      }
      int32_t j = i;
      while (j < n_ && s_[j] != u'<' && s_[j] != u'&') ++j;
      out_.append(s_, i, j - i);
      i = j;
      if (i == n_) break;
      const int32_t k = s_[i] == u'<' ? markup(i) : reference(i);
      if (k == kIncomplete) {
        if (!end_) {
          end_ = true;  // feed() stopped here; close() parses on with end=True
          continue;
        }
        if (s_[i] == u'<') {
          int32_t e = s_.indexOf(u'>', i + 1);
          if (e < 0) {
            e = s_.indexOf(u'<', i + 1);
            if (e < 0) e = i + 1;
          } else {
            e += 1;
          }
          out_.append(s_, i, e - i);
          i = e;
          continue;
        }
        out_.append(s_, i, n_ - i);  // end=True: the rest is text
        return out_;
      }
      if (k == kRestIsText) {
        out_.append(s_, rest_from_, n_ - rest_from_);
        return out_;
      }
      i = k;
    }
    return out_;
  }

 private:
  static constexpr int32_t kIncomplete = -1;
  static constexpr int32_t kRestIsText = -2;

  bool letter(int32_t i) const {
    return i < n_ && ((s_[i] >= u'a' && s_[i] <= u'z') || (s_[i] >= u'A' && s_[i] <= u'Z'));
  }
  bool starts(int32_t i, const char16_t* what) const {
    const UnicodeString w(what);
    return s_.compare(i, w.length(), w) == 0;
  }
  // End of the match of `p` anchored at i, or -1.
  int32_t match_at(const RegexPattern& p, int32_t i, int32_t* group_start = nullptr,
                   int32_t* group_end = nullptr) const {
    UErrorCode status = U_ZERO_ERROR;
    std::unique_ptr<RegexMatcher> m(p.matcher(s_, status));
    check(status, "matcher");
    m->useTransparentBounds(true);
    m->region(i, n_, status);
    check(status, "region");
    if (!m->lookingAt(status)) return -1;
    if (group_start) *group_start = m->start(1, status);
    if (group_end) *group_end = m->end(1, status);
    return m->end(status);
  }

  int32_t find_cdata_end(int32_t i) const {
    static const auto script = compile(R"(</\s*script\s*>)", UREGEX_CASE_INSENSITIVE);
    static const auto style = compile(R"(</\s*style\s*>)", UREGEX_CASE_INSENSITIVE);
    UErrorCode status = U_ZERO_ERROR;
    std::unique_ptr<RegexMatcher> m((cdata_ == u"script" ? *script : *style).matcher(s_, status));
    check(status, "matcher");
    if (!m->find(i, status)) return -1;
    return m->start(status);
  }

  // After a '<': the end of the markup (dropped), kIncomplete, or the end of text kept.
  int32_t markup(int32_t i) {
    if (letter(i + 1)) return start_tag(i);
    if (starts(i, u"</")) {
      const int32_t gt = s_.indexOf(u'>', i + 1);
      return gt < 0 ? kIncomplete : gt + 1;  // an end tag or a bogus comment
    }
    if (starts(i, u"<!--")) {
      static const auto close = compile(R"(--\s*>)");
      UErrorCode status = U_ZERO_ERROR;
      std::unique_ptr<RegexMatcher> m(close->matcher(s_, status));
      if (!m->find(i + 4, status)) return kIncomplete;
      return m->end(status);
    }
    if (starts(i, u"<?") || starts(i, u"<!")) {
      const int32_t gt = s_.indexOf(u'>', i + 2);
      return gt < 0 ? kIncomplete : gt + 1;
    }
    if (i + 1 < n_) {
      out_.append(u'<');
      return i + 1;
    }
    return kIncomplete;
  }

  int32_t start_tag(int32_t i) {
    // html.parser's locatestarttagend_tolerant and check_for_whole_start_tag.
    static const auto locate =
        compile(R"(<[a-zA-Z][^\t\n\r\f />\x00]*(?:[\s/]*(?:(?<=['"\s/])[^\s/>][^\s/=>]*)"
                R"((?:\s*=+\s*(?:'[^']*'|"[^"]*"|(?!['"])[^>\s]*)\s*)?(?:\s|/(?!>))*)*)?\s*)");
    static const auto tag_name = compile(R"(<([a-zA-Z][^\t\n\r\f />\x00]*))");
    const int32_t j = match_at(*locate, i);
    const UChar next = j < n_ ? s_[j] : 0;
    int32_t end = 0;
    if (next == u'>') {
      end = j + 1;
    } else if (next == u'/') {
      if (starts(j, u"/>")) {
        end = j + 2;
      } else {
        return kIncomplete;
      }
    } else if (j == n_ || (next < 0x80 && (std::isalpha(next) || next == u'=' || next == u'/'))) {
      return kIncomplete;
    } else {
      const int32_t k = j > i ? j : i + 1;  // not a tag: its text is kept
      out_.append(s_, i, k - i);
      return k;
    }
    int32_t gs = 0, ge = 0;
    match_at(*tag_name, i, &gs, &ge);
    UnicodeString name(s_, gs, ge - gs);
    name.toLower(icu::Locale::getRoot());
    if (s_[end - 2] != u'/' && (name == u"script" || name == u"style")) cdata_ = name;
    return end;
  }

  // After a '&': a character reference decoded (bs4), or the '&' kept.
  int32_t reference(int32_t i) {
    static const auto charref = compile(R"(&#(?:[0-9]+|[xX][0-9a-fA-F]+)[^0-9a-fA-F])");
    static const auto entityref = compile(R"(&([a-zA-Z][-.a-zA-Z0-9]*)[^a-zA-Z0-9])");
    if (starts(i, u"&#")) {
      const int32_t k = match_at(*charref, i);
      if (k >= 0) {
        UnicodeString digits(s_, i + 2, k - 1 - (i + 2));
        const bool hex = digits[0] == u'x' || digits[0] == u'X';
        if (hex) digits.remove(0, 1);
        uint64_t v = 0;
        for (int32_t d = 0; d < digits.length() && v <= 0x10ffff; ++d)
          v = v * (hex ? 16 : 10) + hex_value(static_cast<char>(digits[d]));
        UChar32 c = 0xfffd;
        if (v != 0 && v <= 0x10ffff && !(v >= 0xd800 && v <= 0xdfff))
          c = windows_1252(static_cast<UChar32>(v));
        out_.append(c);
        return s_[k - 1] == u';' ? k : k - 1;
      }
      const bool semicolon = s_.indexOf(u';', i) >= 0;
      if (!end_) {
        end_ = true;  // feed() consumes "&#" when a ';' follows, then stops
        if (semicolon) {
          out_.append(s_, i, 2);
          return i + 2;
        }
        return i;
      }
      if (semicolon) out_.append(s_, i, 2);
      rest_from_ = semicolon ? i + 2 : i;
      return kRestIsText;
    }
    int32_t gs = 0, ge = 0;
    const int32_t k = match_at(*entityref, i, &gs, &ge);
    if (k >= 0) {
      const std::string name = to_utf8(UnicodeString(s_, gs, ge - gs));
      const char* text = html5_entity(name);
      if (!text) text = html5_entity(name + ";");
      if (text) {
        out_.append(UnicodeString::fromUTF8(text));
      } else {
        out_.append(u'&');
        out_.append(s_, gs, ge - gs);
      }
      return s_[k - 1] == u';' ? k : k - 1;
    }
    if (letter(i + 1) || (i + 1 < n_ && s_[i + 1] == u'#')) {  // html.parser's `incomplete`
      if (!end_) return kIncomplete;
      rest_from_ = i + 2 == n_ ? i + 1 : i;
      return kRestIsText;
    }
    if (i + 1 < n_) {
      out_.append(u'&');
      return i + 1;
    }
    return kIncomplete;
  }

  const UnicodeString& s_;
  const int32_t n_;
  UnicodeString out_;
  UnicodeString cdata_;  // "script" or "style" inside those elements
  bool end_ = false;     // close() is parsing: open constructs are text
  int32_t rest_from_ = 0;
};

// ---- html.unescape -------------------------------------------------------------------------

// s with each match of `pattern` replaced: replace(a, b, out) appends what stands for s[a, b).
template <class Replace>
UnicodeString replace_matches(const UnicodeString& s, const RegexPattern& pattern,
                              Replace&& replace) {
  UErrorCode status = U_ZERO_ERROR;
  std::unique_ptr<RegexMatcher> m(pattern.matcher(s, status));
  UnicodeString out;
  int32_t last = 0;
  while (m->find(status)) {
    const int32_t a = m->start(status), b = m->end(status);
    out.append(s, last, a - last);
    last = b;
    replace(a, b, out);
  }
  out.append(s, last, s.length() - last);
  return out;
}

// Python's html.unescape: numeric references (with html5's replacements for invalid ones) and
// named ones, the longest known prefix of an unknown name decoded.
UnicodeString html_unescape(const UnicodeString& s) {
  if (s.indexOf(u'&') < 0) return s;
  static const auto ref = compile(R"(&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?))");
  return replace_matches(s, *ref, [&s](int32_t a, int32_t b, UnicodeString& out) {
    const UnicodeString body(s, a + 1, b - a - 1);
    if (body[0] == u'#') {
      const bool hex = body.length() > 1 && (body[1] == u'x' || body[1] == u'X');
      uint64_t v = 0;
      for (int32_t d = hex ? 2 : 1; d < body.length() && body[d] != u';'; ++d)
        if (v <= 0x10ffff) v = v * (hex ? 16 : 10) + hex_value(static_cast<char>(body[d]));
      if (v == 0) {
        out.append(static_cast<UChar32>(0xfffd));
      } else if (v == 0x0d) {
        out.append(u'\r');
      } else if (v >= 0x80 && v <= 0x9f) {
        out.append(windows_1252(static_cast<UChar32>(v)));
      } else if ((v >= 0xd800 && v <= 0xdfff) || v > 0x10ffff) {
        out.append(static_cast<UChar32>(0xfffd));
      } else if ((v >= 0x1 && v <= 0x8) || (v >= 0xe && v <= 0x1f) || (v >= 0x7f && v <= 0x9f) ||
                 (v >= 0xfdd0 && v <= 0xfdef) || v == 0xb || (v & 0xfffe) == 0xfffe) {
        // Python's _invalid_codepoints: dropped
      } else {
        out.append(static_cast<UChar32>(v));
      }
      return;
    }
    const std::string name = to_utf8(body);
    if (const char* text = html5_entity(name)) {
      out.append(UnicodeString::fromUTF8(text));
      return;
    }
    for (size_t x = name.size() - 1; x > 1; --x)
      if (const char* text = html5_entity(name.substr(0, x))) {
        out.append(UnicodeString::fromUTF8(text));
        out.append(UnicodeString::fromUTF8(name.substr(x)));
        return;
      }
    out.append(u'&').append(body);
  });
}

// ---- ftfy.fix_text -------------------------------------------------------------------------

// ftfy's HTML unescaping ("auto": only in text without a '<'): &name; and &#..; references.
UnicodeString ftfy_unescape(const UnicodeString& s) {
  if (s.indexOf(u'&') < 0) return s;
  static const auto ref = compile(R"(&#?[0-9A-Za-z]{1,24};)");
  return replace_matches(s, *ref, [&s](int32_t a, int32_t b, UnicodeString& out) {
    const UnicodeString whole(s, a, b - a);
    if (const char* text = html5_entity(to_utf8(UnicodeString(s, a + 1, b - a - 1)))) {
      out.append(UnicodeString::fromUTF8(text));
    } else if (whole.startsWith(u"&#")) {
      const UnicodeString u = html_unescape(whole);
      out.append(u.indexOf(u';') >= 0 ? whole : u);
    } else {
      out.append(whole);
    }
  });
}

UnicodeString map_chars(const UnicodeString& s) {
  // fix_c1_controls, fix_latin_ligatures, fix_character_width, uncurl_quotes, in that order
  // (each maps characters one by one, so one pass does them in turn).
  static const char* const ligatures[][2] = {
      {"\u0132", "IJ"},      {"\u0133", "ij"}, {"\u0149", "\u02bcn"}, {"\u01f1", "DZ"},
      {"\u01f2", "Dz"},      {"\u01f3", "dz"}, {"\u01c4", "D\u017d"}, {"\u01c5", "D\u017e"},
      {"\u01c6", "d\u017e"}, {"\u01c7", "LJ"}, {"\u01c8", "Lj"},      {"\u01c9", "lj"},
      {"\u01ca", "NJ"},      {"\u01cb", "Nj"}, {"\u01cc", "nj"},      {"\ufb00", "ff"},
      {"\ufb01", "fi"},      {"\ufb02", "fl"}, {"\ufb03", "ffi"},     {"\ufb04", "ffl"},
      {"\ufb05", "\u017ft"}, {"\ufb06", "st"}};
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfkc = icu::Normalizer2::getNFKCInstance(status);
  check(status, "NFKC");
  UnicodeString out;
  for (int32_t i = 0; i < s.length(); i = s.moveIndex32(i, 1)) {
    UChar32 c = windows_1252(s.char32At(i));
    UnicodeString piece(c);
    for (const auto& l : ligatures)
      if (UnicodeString::fromUTF8(l[0]).char32At(0) == c) piece = UnicodeString::fromUTF8(l[1]);
    UnicodeString widened;
    for (int32_t k = 0; k < piece.length(); k = piece.moveIndex32(k, 1)) {
      const UChar32 p = piece.char32At(k);
      if (p == 0x3000) {
        widened.append(u' ');
      } else if (p >= 0xff01 && p <= 0xffef) {
        widened.append(nfkc->normalize(UnicodeString(p), status));
      } else {
        widened.append(p);
      }
    }
    for (int32_t k = 0; k < widened.length(); k = widened.moveIndex32(k, 1)) {
      const UChar32 p = widened.char32At(k);
      if (p == 0x2bc || (p >= 0x2018 && p <= 0x201b)) {
        out.append(u'\'');
      } else if (p >= 0x201c && p <= 0x201f) {
        out.append(u'"');
      } else {
        out.append(p);
      }
    }
  }
  check(status, "NFKC");
  return out;
}

bool ftfy_control(UChar32 c) {
  return (c <= 0x08) || c == 0x0b || (c >= 0x0e && c <= 0x1f) || c == 0x7f ||
         (c >= 0x206a && c <= 0x206f) || c == 0xfeff || (c >= 0xfff9 && c <= 0xfffc);
}

// One line of ftfy.fix_and_explain: its fixers until nothing changes.
UnicodeString fix_segment(UnicodeString text, bool unescape) {
  static const auto crlf = compile(R"(\r\n|[\r\u2028\u2029\u0085])");
  static const auto ansi = compile("\\x{1b}\\[((?:\\d|;)*)([a-zA-Z])");
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  check(status, "NFC");
  while (true) {
    const UnicodeString before = text;
    if (unescape) text = ftfy_unescape(text);
    text = map_chars(text);
    std::unique_ptr<RegexMatcher> m(crlf->matcher(text, status));
    text = m->replaceAll(u"\n", status);  // fix_line_breaks
    m.reset(ansi->matcher(text, status));
    text = m->replaceAll(u"", status);  // remove_terminal_escapes
    UnicodeString kept;
    for (int32_t i = 0; i < text.length(); i = text.moveIndex32(i, 1))
      if (!ftfy_control(text.char32At(i))) kept.append(text.char32At(i));
    text = nfc->normalize(kept, status);
    check(status, "fix_text");
    if (text == before) return text;
  }
}

// ftfy.fix_text with its defaults, less fix_encoding (mojibake repair; see docs/methods.md):
// line by line, HTML unescaped until a line holds a '<'.
UnicodeString fix_text(const UnicodeString& s) {
  UnicodeString out;
  bool unescape = true;
  int32_t pos = 0;
  while (pos < s.length()) {
    int32_t brk = s.indexOf(u'\n', pos);
    brk = brk < 0 ? s.length() : brk + 1;
    const UnicodeString segment(s, pos, brk - pos);
    if (segment.indexOf(u'<') >= 0) unescape = false;
    out.append(fix_segment(segment, unescape));
    pos = brk;
  }
  return out;
}

void check_utf8(const std::string& s) {
  UErrorCode status = U_ZERO_ERROR;
  int32_t length = 0;
  u_strFromUTF8(nullptr, 0, &length, s.data(), static_cast<int32_t>(s.size()), &status);
  if (status == U_INVALID_CHAR_FOUND || status == U_ILLEGAL_CHAR_FOUND)
    throw Error("the prompt is not valid UTF-8");
}

}  // namespace

std::string clean_caption(const std::string& utf8) {
  check_utf8(utf8);
  UnicodeString text = py_strip(UnicodeString::fromUTF8(unquote_plus(utf8)));
  text.toLower(icu::Locale::getRoot());
  text = before_html().apply(text);
  text = HtmlText(text).run();
  text = after_html().apply(text);
  int dashes = 0;  // this-is-my-cute-cat, this_is_my_cute_cat
  for (int32_t i = 0; i < text.length(); ++i) dashes += text[i] == u'-' || text[i] == u'_';
  if (dashes > 3) {
    text.findAndReplace(u"-", u" ");
    text.findAndReplace(u"_", u" ");
  }
  text = py_strip(html_unescape(html_unescape(fix_text(text))));  // basic_clean
  return to_utf8(py_strip(after_basic_clean().apply(text)));
}

std::string clean_caption_twice(const std::string& utf8) {
  return clean_caption(clean_caption(utf8));
}

}  // namespace tessera
