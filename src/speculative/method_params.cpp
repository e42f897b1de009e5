#include "speculative/method_params.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <type_traits>
#include <variant>

namespace tessera::speculative {

namespace {

std::string number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

const char* type_name(const ParamValue& v) {
  static const char* names[] = {"a switch", "an integer", "a number", "text"};
  return names[v.index()];
}

void check_range(const std::string& name, double v, const std::optional<Range>& range) {
  if (range && !range->contains(v)) {
    const std::string t = range->text();
    throw ParameterError(name, "must be " + (t[0] == '[' || t[0] == '(' ? "in " + t : t));
  }
}

}  // namespace

bool Range::contains(double v) const {
  return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
}

std::string Range::text() const {
  std::ostringstream t;
  if (std::isinf(hi))
    t << (lo_open ? "> " : ">= ") << lo;
  else if (std::isinf(lo))
    t << (hi_open ? "< " : "<= ") << hi;
  else
    t << (lo_open ? "(" : "[") << lo << ", " << hi << (hi_open ? ")" : "]");
  return t.str();
}

bool param_switch(const std::string& name, const ParamValue& v) {
  if (const bool* b = std::get_if<bool>(&v)) return *b;
  throw ParameterError(name, std::string("is a switch (true or false), got ") + type_name(v));
}

int param_int(const std::string& name, const ParamValue& v, const std::optional<Range>& range) {
  const int64_t* i = std::get_if<int64_t>(&v);
  if (!i) throw ParameterError(name, std::string("must be an integer, got ") + type_name(v));
  check_range(name, static_cast<double>(*i), range);
  check_param(*i >= std::numeric_limits<int>::min() && *i <= std::numeric_limits<int>::max(), name,
              "is out of range: " + std::to_string(*i));
  return static_cast<int>(*i);
}

float param_real(const std::string& name, const ParamValue& v, const std::optional<Range>& range) {
  double x = 0.0;
  if (const double* d = std::get_if<double>(&v))
    x = *d;
  else if (const int64_t* i = std::get_if<int64_t>(&v))
    x = static_cast<double>(*i);
  else
    throw ParameterError(name, std::string("must be a number, got ") + type_name(v));
  check_param(std::isfinite(x), name, "must be finite");
  check_range(name, x, range);
  return static_cast<float>(x);
}

std::string param_choice(const std::string& name, const ParamValue& v,
                         const std::vector<std::string>& choices) {
  const std::string* s = std::get_if<std::string>(&v);
  if (!s) throw ParameterError(name, std::string("must be text, got ") + type_name(v));
  if (choices.empty()) return *s;
  for (const std::string& c : choices)
    if (c == *s) return *s;
  std::string all;
  for (size_t i = 0; i < choices.size(); ++i)
    all += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  throw ParameterError(name, "must be " + all + ", got '" + *s + "'");
}

std::string format_default(bool v) {
  return v ? "true" : "false";
}
std::string format_default(int v) {
  return std::to_string(v);
}
std::string format_default(float v) {
  return number(v);
}
std::string format_default(const std::string& v) {
  return v;
}

}  // namespace tessera::speculative

namespace tessera {

std::string param_value_text(const ParamValue& v, bool exact) {
  return std::visit(
      [exact](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) return x ? "true" : "false";
        if constexpr (std::is_same_v<T, int64_t>) return std::to_string(x);
        if constexpr (std::is_same_v<T, double>) {
          char buf[40];
          if (!exact) {
            std::snprintf(buf, sizeof buf, "%g", x);
            return buf;
          }
          // The shortest text that reads back as x: 0.1, not 0.10000000000000001; 10, not 1e+01.
          const auto r = std::to_chars(buf, buf + sizeof buf, x);
          return std::string(buf, r.ptr);
        }
        if constexpr (std::is_same_v<T, std::string>) return x;
      },
      v);
}

}  // namespace tessera
