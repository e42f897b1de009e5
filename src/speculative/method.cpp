#include "speculative/method.h"

#include <algorithm>
#include <string>

#include "speculative/method_registry.h"
#include "speculative/rules/rules.h"
#include "tessera/error.h"

namespace tessera::speculative {

namespace {

bool runs_on(const MethodInfo& m, TokenKind tokens) {
  return m.tokens == tokens || m.tokens == TokenKind::Any;
}

// "a|b|c" (sep "|") of the methods for `tokens`.
std::string list_methods(TokenKind tokens, const std::string& sep) {
  std::string s;
  for (const MethodInfo& m : registered_methods())
    if (runs_on(m, tokens)) s += (s.empty() ? "" : sep) + m.name;
  return s;
}

// The first discrete method drafting from `source`, to suggest in an error ("" if none).
std::string first_with(DraftSource source) {
  for (const MethodInfo& m : registered_methods())
    if (runs_on(m, TokenKind::Discrete) && m.drafts == source) return m.name;
  return "";
}

}  // namespace

int default_draft_len(bool draft_model) {
  return draft_model ? 5 : 16;
}

Method make_method(const SpeculativeOptions& o, const std::string& target_dir,
                   const GptConfig& target, Backend& backend) {
  check_param_names(o.params);
  const MethodEntry* e = find_method_entry(o.method);
  if (!e)
    throw ParameterError("method", "{method}: unknown method '" + o.method + "' (one of " +
                                       list_methods(TokenKind::Discrete, "|") + ")");
  if (!runs_on(e->info, TokenKind::Discrete))
    throw ParameterError("method",
                         "{method}: " + o.method +
                             " is a method for MAR models (continuous tokens); this model "
                             "takes one of " +
                             list_methods(TokenKind::Discrete, "|"));
  Method m;
  m.name = o.method;
  const bool has_draft = !o.draft_model.empty();
  const DraftSource drafts = e->info.drafts;
  if (drafts == DraftSource::None) {
    check_param(!has_draft, "draft",
                "{draft} is only used by speculative methods (not {method} " + o.method + ")");
    return m;
  }
  if (drafts == DraftSource::DraftModel && !has_draft) {
    const std::string jacobi = first_with(DraftSource::Jacobi);
    throw ParameterError(
        "draft",
        "{method} " + o.method + " needs a draft model: {draft} DIR" +
            (jacobi.empty() ? "" : " (for drafts without a model, use {method} " + jacobi + ")"));
  }
  if (drafts == DraftSource::Jacobi && has_draft) {
    const std::string model = first_with(DraftSource::DraftModel);
    throw ParameterError("draft",
                         "{method} " + o.method + " drafts by Jacobi iteration" +
                             (model.empty() ? "" : "; with a draft model use {method} " + model));
  }
  m.draft_model = has_draft;
  // A round never needs more positions than the image has tokens: a draft model drafts at most
  // the N-1 tokens after the root; a Jacobi window (root included) spans at most the N tokens.
  const int n_tokens = target.n_image_tokens();
  const int min_len = has_draft ? 1 : 2,
            max_len = std::max(min_len, has_draft ? n_tokens - 1 : n_tokens);
  const std::string range =
      "must be in [" + std::to_string(min_len) + ", " + std::to_string(max_len) + "] (" +
      (has_draft ? "tokens drafted after the root; the image has "
                 : "a Jacobi window, the root and at least one draft; the image has ") +
      std::to_string(n_tokens) + " tokens), got ";
  m.auto_len = o.draft_len == kDraftLenAuto;
  check_param(m.auto_len || o.draft_len == 0 || (o.draft_len >= min_len && o.draft_len <= max_len),
              "draft_len", range + std::to_string(o.draft_len));
  check_param(o.max_auto_len == 0 || (o.max_auto_len >= min_len && o.max_auto_len <= max_len),
              "max_auto_len", range + std::to_string(o.max_auto_len));
  if (m.auto_len)  // the longest length auto may choose (16 drafts; a 32-token Jacobi window)
    m.draft_len = o.max_auto_len > 0 ? o.max_auto_len : std::min(has_draft ? 16 : 32, max_len);
  else
    m.draft_len = o.draft_len > 0 ? o.draft_len : std::min(default_draft_len(has_draft), max_len);
  check_param(o.resample.empty() || o.resample == "vanilla" || o.resample == "optimal", "resample",
              "must be vanilla or optimal, got '" + o.resample + "'");
  check_param(!e->exact || o.resample != "optimal", "resample",
              "{resample} optimal only applies to relaxed rules (for exact SD, G* = Norm([p - "
              "q]+))");
  m.rule = e->make_rule(o.params, TargetModel{target_dir, target, backend});
  if (e->make_hawk) m.hawk = e->make_hawk(o.params);
  m.optimal_resampling = o.resample.empty() ? e->optimal_by_default : o.resample == "optimal";
  if (m.optimal_resampling) m.rule = with_optimal_resampling(std::move(m.rule));
  return m;
}

std::optional<CspdSettings> make_cspd_settings(const ContinuousSpecOptions& o) {
  check_param_names(o.params);
  const MethodEntry* e = find_method_entry(o.method);
  if (!e || !runs_on(e->info, TokenKind::Continuous))
    throw ParameterError("method", "{method} \"" + o.method + "\" is not a MAR method (" +
                                       list_methods(TokenKind::Continuous, ", ") + ")");
  if (e->info.drafts == DraftSource::None) return std::nullopt;  // vanilla ignores a draft
  check_param(!o.draft_model.empty(), "draft", "{method} " + o.method + " needs {draft} DIR");
  check_param(o.draft_len >= 1, "draft_len", "must be at least 1");
  CspdSettings s = e->make_cspd(o.params);
  s.draft_len = o.draft_len;
  return s;
}

}  // namespace tessera::speculative
