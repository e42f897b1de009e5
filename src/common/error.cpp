#include "tessera/error.h"

namespace tessera {

namespace {

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-' ||
         c == '+';
}

// Replaces each {name} marker (lowercase names only, so other braces pass through) by spell(name).
std::string spell_markers(const std::string& text,
                          const std::function<std::string(const std::string&)>& spell) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t open = text.find('{', i);
    if (open == std::string::npos) break;
    const size_t close = text.find('}', open + 1);
    if (close == std::string::npos) break;
    const std::string name = text.substr(open + 1, close - open - 1);
    bool marker = !name.empty();
    for (char c : name) marker = marker && name_char(c);
    out += text.substr(i, open - i);
    out += marker ? spell(name) : text.substr(open, close - open + 1);
    i = close + 1;
  }
  return out + text.substr(i);
}

std::string with_marker(const std::string& param, const std::string& message) {
  bool marked = false;
  spell_markers(message, [&](const std::string& name) {
    marked = true;
    return name;
  });
  return marked ? message : "{" + param + "} " + message;
}

std::string as_name(const std::string& name) {
  return name;
}

}  // namespace

void check(bool cond, const std::string& msg) {
  if (!cond) throw Error(msg);
}

ParameterError::ParameterError(const std::string& param, const std::string& message)
    : Error(spell_markers(with_marker(param, message), as_name)),
      param_(param),
      message_(with_marker(param, message)) {}

std::string ParameterError::message(
    const std::function<std::string(const std::string&)>& spell) const {
  return spell_markers(message_, spell);
}

void check_param(bool cond, const std::string& param, const std::string& message) {
  if (!cond) throw ParameterError(param, message);
}

}  // namespace tessera
