#include "io/npy_header.h"

#include <cctype>
#include <cstdint>

#include "io/printable.h"
#include "tessera/error.h"

namespace tessera {

namespace {

constexpr uint64_t kMaxDim = uint64_t{1} << 56;  // shape_numel's limit on element counts

// A cursor over the dict text; every method throws Error naming the header on bad input.
class DictReader {
 public:
  DictReader(std::string_view text, const std::string& where) : s_(text), where_(where) {}

  [[noreturn]] void fail(const std::string& problem) const {
    throw Error(where_ + ": bad .npy header (" + problem + ")");
  }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  bool at_end() const { return i_ >= s_.size(); }
  // Skips spaces, then consumes `c` when it is next.
  bool accept(char c) {
    skip_space();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c, const char* what) {
    if (!accept(c)) fail(std::string("expected ") + what + " at byte " + std::to_string(i_));
  }
  // 'text' or "text", without escapes (NumPy never writes any in these fields).
  std::string quoted() {
    skip_space();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"'))
      fail("expected a quoted string at byte " + std::to_string(i_));
    const char q = s_[i_++];
    const size_t end = s_.find(q, i_);
    if (end == std::string_view::npos) fail("unterminated string");
    const std::string_view body = s_.substr(i_, end - i_);
    if (body.find('\\') != std::string_view::npos) fail("escapes in strings are not supported");
    i_ = end + 1;
    return std::string(body);
  }
  // A bare word such as True or False.
  std::string_view word() {
    skip_space();
    const size_t b = i_;
    while (i_ < s_.size() && std::isalpha(static_cast<unsigned char>(s_[i_]))) ++i_;
    return s_.substr(b, i_ - b);
  }
  // A non-negative decimal integer of at most kMaxDim (Python 2's 'L' suffix allowed).
  int64_t dimension() {
    skip_space();
    if (i_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[i_])))
      fail("expected a dimension at byte " + std::to_string(i_));
    uint64_t v = 0;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
      v = v * 10 + static_cast<uint64_t>(s_[i_++] - '0');
      if (v > kMaxDim) fail("dimension exceeds " + std::to_string(kMaxDim));
    }
    if (i_ < s_.size() && s_[i_] == 'L') ++i_;
    return static_cast<int64_t>(v);
  }
  // (d0, d1, ...) with an optional trailing comma: "()", "(3,)", "(2, 3)".
  Shape tuple() {
    expect('(', "'(' opening the shape");
    Shape shape;
    if (accept(')')) return shape;
    for (;;) {
      if (shape.size() == kMaxNpyRank)
        fail("more than " + std::to_string(kMaxNpyRank) + " dimensions");
      shape.push_back(dimension());
      if (accept(')')) return shape;
      expect(',', "',' or ')' in the shape");
      if (accept(')')) return shape;
    }
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
  const std::string& where_;
};

}  // namespace

NpyHeader parse_npy_header(std::string_view dict, const std::string& where) {
  DictReader r(dict, where);
  NpyHeader h;
  bool have_descr = false, have_order = false, have_shape = false;
  r.expect('{', "a dict");
  while (!r.accept('}')) {
    const std::string key = r.quoted();
    r.expect(':', "':' after a key");
    bool* seen = nullptr;
    if (key == "descr") {
      seen = &have_descr;
      h.descr = r.quoted();
    } else if (key == "fortran_order") {
      seen = &have_order;
      const std::string_view w = r.word();
      if (w != "True" && w != "False") r.fail("fortran_order must be True or False");
      h.fortran_order = w == "True";
    } else if (key == "shape") {
      seen = &have_shape;
      h.shape = r.tuple();
    } else {
      r.fail("unexpected key '" + printable(key) + "'");
    }
    if (*seen) r.fail("duplicate key '" + key + "'");
    *seen = true;
    if (!r.accept(',')) {
      r.expect('}', "',' or '}' after a value");
      break;
    }
  }
  r.skip_space();
  if (!r.at_end()) r.fail("text after the dict");
  if (!have_descr) r.fail("no 'descr'");
  if (!have_order) r.fail("no 'fortran_order'");
  if (!have_shape) r.fail("no 'shape'");
  return h;
}

}  // namespace tessera
