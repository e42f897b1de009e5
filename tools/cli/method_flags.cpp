#include "method_flags.h"

#include <algorithm>
#include <vector>

#include "common.h"
#include "tessera/methods.h"

namespace tessera::cli {

namespace {

// One flag: a parameter and the methods that have it, with their defaults.
struct FlagParam {
  ParamInfo info;
  std::vector<std::pair<std::string, std::string>> defaults;  // (method, default)
};

std::vector<FlagParam> flag_params() {
  std::vector<FlagParam> out;
  for (const MethodInfo& m : registered_methods())
    for (const ParamInfo& p : m.params) {
      auto it = std::find_if(out.begin(), out.end(),
                             [&](const FlagParam& f) { return f.info.name == p.name; });
      if (it == out.end()) it = out.insert(out.end(), {p, {}});
      it->defaults.emplace_back(m.name, p.default_value);
    }
  return out;
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// "Help (lantern, lantern++; >= 1; default 1000 for lantern, 10 for lantern++)".
std::string flag_help(const FlagParam& f) {
  std::vector<std::string> methods, defaults;
  bool same = true;
  for (const auto& [m, d] : f.defaults) {
    methods.push_back(m);
    defaults.push_back(d + " for " + m);
    same = same && d == f.defaults.front().second;
  }
  std::string h = f.info.help + " (" + join(methods, ", ");
  if (!f.info.range.empty()) h += "; " + f.info.range;
  if (f.info.type != ParamType::Switch)
    h += "; default " + (same ? f.defaults.front().second : join(defaults, ", "));
  return h + ")";
}

std::string methods_for(TokenKind tokens) {
  std::vector<std::string> names;
  for (const MethodInfo& m : registered_methods())
    if (m.tokens == tokens || m.tokens == TokenKind::Any) names.push_back(m.name);
  return join(names, "|");
}

}  // namespace

std::string flag_of(const std::string& param) {
  std::string f = "--" + param;
  std::replace(f.begin(), f.end(), '.', '-');
  std::replace(f.begin(), f.end(), '_', '-');
  return f;
}

bool uses_draft_model(const std::string& method) {
  const MethodInfo* m = find_method(method);
  return m && (m->drafts == DraftSource::DraftModel || m->drafts == DraftSource::ModelOrJacobi);
}

void add_method_flags(CLI::App* cmd, SpeculativeOptions& o) {
  cmd->add_option(
         "--method", o.method,
         "Decoding method (docs/methods.md); LlamaGen: " + methods_for(TokenKind::Discrete) +
             "; MAR: " + methods_for(TokenKind::Continuous))
      ->capture_default_str();
  cmd->add_option("--draft", o.draft_model,
                  "Draft model directory (same VQ vocabulary); without it drafts come from "
                  "Jacobi iteration");
  cmd->add_option("--draft-len", o.draft_len,
                  "Draft tokens per round (default 5); with Jacobi drafts the window incl. the "
                  "last token (default 16); MAR: steps per draft window (default 8)")
      ->check(int_at_least(1));
  cmd->add_option("--resample", o.resample,
                  "Resampling at a rejection: vanilla (the method's own) or optimal (G*, COOL-SD "
                  "Eq. 5); default: optimal for cool-sd/uniform-rsd, vanilla otherwise");
  MethodParams& params = o.params;
  for (const FlagParam& f : flag_params()) {
    const std::string name = f.info.name, flag = flag_of(name), help = flag_help(f);
    switch (f.info.type) {
      case ParamType::Switch:
        cmd->add_flag_function(
            flag, [&params, name](int64_t count) { params[name] = count > 0; }, help);
        break;
      case ParamType::Int:
        cmd->add_option_function<int64_t>(
            flag, [&params, name](const int64_t& v) { params[name] = v; }, help);
        break;
      case ParamType::Real:
        cmd->add_option_function<double>(
            flag, [&params, name](const double& v) { params[name] = v; }, help);
        break;
      case ParamType::Choice:
        cmd->add_option_function<std::string>(
               flag, [&params, name](const std::string& v) { params[name] = v; }, help)
            ->type_name(join(f.info.choices, "|"));
        break;
    }
  }
}

}  // namespace tessera::cli
