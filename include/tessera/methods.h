// The speculative decoding methods tessera knows (docs/methods.md), with their parameters, so
// that front-ends can list them and offer their settings without knowing any method: the CLI makes
// one flag per parameter ("lantern.k" -> --lantern-k).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace tessera {

// A method parameter's value: a switch, an integer, a real number or a choice (text).
using ParamValue = std::variant<bool, int64_t, double, std::string>;
// Method parameters by name, e.g. {{"lantern.k", int64_t{10}}, {"lantern.metric", "cosine"}}.
// Parameters not given keep the method's defaults; a parameter of another method is ignored (one
// set can serve several methods, as in a benchmark), a name no method has is an error.
using MethodParams = std::map<std::string, ParamValue>;

// A value as text: "true", "10", "l2"; reals with %g ("0.05") for people, or exact (the shortest
// text that reads back as the same double: "0.1", "10") for settings that must reproduce a run.
std::string param_value_text(const ParamValue& v, bool exact = false);

enum class ParamType { Switch, Int, Real, Choice };

struct ParamInfo {
  // "lantern.k": lowercase, '.' after the parameter group, '_' between words. Its key in
  // MethodParams and what a ParameterError names.
  std::string name;
  ParamType type = ParamType::Real;
  std::string default_value;         // as text: "1000", "0.1", "l2", "false", "half way"
  std::string range;                 // allowed values in words: ">= 1", "(0, 1]"; "" = any
  std::vector<std::string> choices;  // Choice: the allowed values
  std::string help;
  // The values `tessera tune` sweeps by default (empty: the parameter is not a relaxation knob).
  std::vector<double> tune_grid;
  // Throws a ParameterError naming the parameter when v has the wrong type or is out of range.
  std::function<void(const ParamValue&)> check;
};

// The tokens a method decodes: LlamaGen's discrete VQ tokens or MAR's continuous ones.
enum class TokenKind { Discrete, Continuous, Any };

// Where a method's drafts come from.
enum class DraftSource {
  None,          // no drafts (vanilla)
  DraftModel,    // a draft model is required (SpeculativeOptions::draft_model)
  Jacobi,        // the target drafts for itself; a draft model is refused
  ModelOrJacobi  // a draft model when one is given, Jacobi iteration otherwise
};

struct MethodInfo {
  std::string name;  // the value of SpeculativeOptions::method / ContinuousSpecOptions::method
  std::string summary;
  TokenKind tokens = TokenKind::Discrete;
  DraftSource drafts = DraftSource::None;
  std::vector<ParamInfo> params;
  // The images follow the target's distribution exactly (vanilla, sd, sjd); lossy methods trade
  // image quality for speed and are measured against a model's tolerance (docs/quality.md).
  bool lossless = false;
  // DraftModel methods: the model's companion that drafts by default ("draft": a smaller GPT;
  // "eagle": an EAGLE drafter reading the target's features; "medusa": Medusa heads on the
  // target's hidden states) and must draft without --draft.
  std::string drafter = "draft";
};

// Every method, in documentation order (LlamaGen's, then MAR's).
const std::vector<MethodInfo>& registered_methods();
// The method called `name`, or null.
const MethodInfo* find_method(const std::string& name);

}  // namespace tessera
