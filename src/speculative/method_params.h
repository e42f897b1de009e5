// Typed method parameters: a method declares its parameter struct P (fields with defaults) and one
// ParamSpec per field; from that one table come the public descriptions (tessera/methods.h) and
// the reading of MethodParams into P, with type and range errors naming the parameter.
#pragma once

#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/error.h"
#include "tessera/methods.h"

namespace tessera::speculative {

// Allowed numbers: an interval, closed or open at each end.
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;

  static Range at_least(double lo) { return {lo, std::numeric_limits<double>::infinity()}; }
  static Range above(double lo) { return {lo, std::numeric_limits<double>::infinity(), true}; }
  static Range closed(double lo, double hi) { return {lo, hi}; }
  static Range open_closed(double lo, double hi) { return {lo, hi, true}; }

  bool contains(double v) const;
  std::string text() const;  // ">= 1", "> 0", "[0, 1]", "(0, 1]"
};

// Value conversions with errors naming the parameter (method_params.cpp).
bool param_switch(const std::string& name, const ParamValue& v);
int param_int(const std::string& name, const ParamValue& v, const std::optional<Range>& range);
float param_real(const std::string& name, const ParamValue& v, const std::optional<Range>& range);
std::string param_choice(const std::string& name, const ParamValue& v,
                         const std::vector<std::string>& choices);
std::string format_default(bool v);
std::string format_default(int v);
std::string format_default(float v);
std::string format_default(const std::string& v);

// One field of P as a parameter: ParamSpec<P>("lantern.k", &P::k, "help").in(Range::at_least(1)).
template <class P>
struct ParamSpec {
  template <class T>
  ParamSpec(std::string name_, T P::*member, std::string help_)
      : name(std::move(name_)), help(std::move(help_)) {
    static_assert(std::is_same_v<T, bool> || std::is_same_v<T, int> || std::is_same_v<T, float> ||
                  std::is_same_v<T, std::string>);
    type = std::is_same_v<T, bool>          ? ParamType::Switch
           : std::is_same_v<T, int>         ? ParamType::Int
           : std::is_same_v<T, std::string> ? ParamType::Choice
                                            : ParamType::Real;
    set = [member](P& p, const ParamValue& v, const ParamSpec& s) {
      if constexpr (std::is_same_v<T, bool>)
        p.*member = param_switch(s.name, v);
      else if constexpr (std::is_same_v<T, int>)
        p.*member = param_int(s.name, v, s.range);
      else if constexpr (std::is_same_v<T, float>)
        p.*member = param_real(s.name, v, s.range);
      else
        p.*member = param_choice(s.name, v, s.choices);
    };
    show = [member](const P& p) { return format_default(p.*member); };
  }
  // Numbers: the allowed interval, checked when the value is given.
  ParamSpec& in(const Range& r) {
    range = r;
    return *this;
  }
  // Text: the allowed values.
  ParamSpec& one_of(std::vector<std::string> values) {
    choices = std::move(values);
    return *this;
  }
  // Allowed values the method checks itself (they depend on the model), in words.
  ParamSpec& noting(std::string words) {
    note = std::move(words);
    return *this;
  }
  // The values `tessera tune` sweeps for this parameter by default (a relaxation knob).
  ParamSpec& tune(std::vector<double> values) {
    tune_grid = std::move(values);
    return *this;
  }
  // Shown instead of the default value, for a sentinel ("half way" for -1).
  ParamSpec& default_shown_as(std::string words) {
    default_text = std::move(words);
    return *this;
  }

  std::string name;  // "lantern.k"
  std::string help;
  ParamType type = ParamType::Real;
  std::optional<Range> range;
  std::vector<std::string> choices;
  std::string note;
  std::string default_text;
  std::vector<double> tune_grid;
  std::function<void(P&, const ParamValue&, const ParamSpec&)> set;  // converts and checks
  std::function<std::string(const P&)> show;                         // the field as text
};

template <class P>
std::vector<ParamInfo> describe(const std::vector<ParamSpec<P>>& specs, const P& defaults) {
  std::vector<ParamInfo> out;
  for (const ParamSpec<P>& s : specs) {
    std::string range = s.range ? s.range->text() : "";
    if (!s.note.empty()) range += (range.empty() ? "" : ", ") + s.note;
    ParamInfo info;
    info.name = s.name;
    info.type = s.type;
    info.default_value = s.default_text.empty() ? s.show(defaults) : s.default_text;
    info.range = range;
    info.choices = s.choices;
    info.help = s.help;
    info.tune_grid = s.tune_grid;
    info.check = [s, defaults](const ParamValue& v) {
      P p = defaults;
      s.set(p, v, s);
    };
    out.push_back(std::move(info));
  }
  return out;
}

// `defaults` with every parameter of `given` that `specs` names, converted and checked.
template <class P>
P read_params(const std::vector<ParamSpec<P>>& specs, const MethodParams& given, P defaults) {
  for (const ParamSpec<P>& s : specs)
    if (const auto it = given.find(s.name); it != given.end()) s.set(defaults, it->second, s);
  return defaults;
}

}  // namespace tessera::speculative
