#include "speculative/model_defaults.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "speculative/method.h"
#include "tessera/error.h"

namespace tessera::speculative {

namespace {

const ParamInfo* param_of(const MethodInfo& m, const std::string& name) {
  for (const ParamInfo& p : m.params)
    if (p.name == name) return &p;
  return nullptr;
}

bool same_value(const ParamValue& a, const ParamValue& b) {
  auto number = [](const ParamValue& v, double* x) {
    if (const int64_t* i = std::get_if<int64_t>(&v)) return *x = static_cast<double>(*i), true;
    if (const double* d = std::get_if<double>(&v)) return *x = *d, true;
    return false;
  };
  double x = 0, y = 0;
  if (number(a, &x) && number(b, &y)) return std::abs(x - y) <= 1e-9 * std::max(1.0, std::abs(y));
  return a == b;
}

std::string text(const ParamValue& v) {
  return param_value_text(v);
}

std::string tolerance_text(const QualityTolerance& t) {
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "top-1 within %g points of vanilla's, Frechet distance to vanilla at most %g%% "
                "above the noise floor",
                t.top1_drop_points, 100.0 * t.frechet_over_floor);
  return buf;
}

}  // namespace

void check_validated_settings(const QualitySection& q, const std::string& where) {
  for (const auto& [name, s] : q.methods) {
    const std::string w = where + " quality methods " + name + ": ";
    const MethodInfo* m = find_method(name);
    if (!m || m->tokens == TokenKind::Continuous)
      throw Error(w + "not a LlamaGen method (tessera/methods.h lists them)");
    if (m->lossless) throw Error(w + name + " is lossless: it has nothing to validate");
    for (const auto& [p, v] : s.params) {
      if (p == "draft_len") continue;  // range-checked by the parser, resolved by make_method
      const ParamInfo* info = param_of(*m, p);
      if (!info) throw Error(w + "\"" + p + "\" is not a parameter of " + name);
      try {
        info->check(v);
      } catch (const Error& e) {
        throw Error(w + e.what());
      }
    }
  }
}

SpeculativeOptions with_model_defaults(const SpeculativeOptions& o, const QualitySection& q) {
  const auto it = q.methods.find(o.method);
  if (it == q.methods.end()) return o;
  const ValidatedSetting& s = it->second;
  SpeculativeOptions out = o;
  for (const auto& [name, value] : s.params) {
    if (name == "draft_len") {
      if (out.draft_len == 0 && s.draft_model == !o.draft_model.empty())
        out.draft_len = static_cast<int>(std::get<int64_t>(value));
    } else if (!out.params.count(name)) {
      out.params[name] = value;
    }
  }
  return out;
}

std::string validated_settings_note(const SpeculativeOptions& given, const QualitySection& q,
                                    const std::string& model) {
  const MethodInfo* m = find_method(given.method);
  if (!m || m->lossless) return "";
  const std::string tol = tolerance_text(q.tolerance);
  const auto it = q.methods.find(given.method);
  if (it == q.methods.end())
    return "note: " + given.method + " is lossy and has no validated setting for " + model +
           " (tolerance: " + tol + "); `tessera tune --method " + given.method + "` measures one";
  const ValidatedSetting& s = it->second;
  std::vector<std::string> outside;
  const bool model_drafts = !given.draft_model.empty();
  if (model_drafts != s.draft_model)
    outside.push_back(std::string(model_drafts ? "a draft model" : "Jacobi drafts") +
                      " (validated with " + (s.draft_model ? "a draft model" : "Jacobi drafts") +
                      ")");
  for (const auto& [name, value] : given.params) {
    if (!param_of(*m, name)) continue;  // another method's parameter: not used by this one
    const auto v = s.params.find(name);
    if (v == s.params.end())
      outside.push_back(name + "=" + text(value) + " (validated at its default)");
    else if (!same_value(value, v->second))
      outside.push_back(name + "=" + text(value) + " (validated " + text(v->second) + ")");
  }
  if (given.draft_len > 0 && model_drafts == s.draft_model) {
    // A setting without a draft length was measured at the default, --draft-len auto.
    const auto v = s.params.find("draft_len");
    if (v == s.params.end())
      outside.push_back("draft_len=" + std::to_string(given.draft_len) + " (validated auto)");
    else if (given.draft_len != std::get<int64_t>(v->second))
      outside.push_back("draft_len=" + std::to_string(given.draft_len) + " (validated " +
                        std::to_string(std::get<int64_t>(v->second)) + ")");
  }
  if (outside.empty()) return "";
  std::string list;
  for (const std::string& x : outside) list += (list.empty() ? "" : ", ") + x;
  return "note: " + given.method + " runs outside " + model + "'s validated setting: " + list +
         "; its images may miss the tolerance (" + tol + ")";
}

}  // namespace tessera::speculative
