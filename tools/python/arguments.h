// Python arguments to the public API's options: keyword arguments to GenerateOptions (method
// parameters by their registry names, "lantern.k" spelled lantern_k), prompts to Conditions, and
// the engine's errors to Python exceptions whose messages name the keyword arguments.
#pragma once

#include <nanobind/nanobind.h>

#include <optional>
#include <string>
#include <vector>

#include "tessera/class_names.h"
#include "tessera/mar.h"
#include "tessera/tessera.h"

namespace tessera::py {

namespace nb = nanobind;

// A parameter's keyword: "lantern.k" -> "lantern_k", "draft_len" stays.
std::string keyword(const std::string& param);

// tessera.Error (RuntimeError) and tessera.ParameterError (ValueError, with .param), registered
// by module.cpp; ParameterError's message spells parameters as keywords ("lantern_k must be >=
// 1").
void register_errors(nb::module_& m);

// The keyword arguments of a generation not taken by name: sampling (cfg, cfg_interval,
// temperature, top_k, top_p), drafting (draft, draft_len, draft_costs, draft_hold, max_auto_len,
// tree, resample, max_rounds), batch, image_index, max_tokens, device_loop, MAR's steps and
// cfg_schedule, and every method parameter by keyword. A keyword nothing knows raises TypeError, as
// Python does.
struct RunArgs {
  GenerateOptions gen;
  MarGenerateOptions mar;
  std::optional<int> batch;  // unset: the caller's default
};
RunArgs run_args(const std::string& model_dir, const ModelConfig& config, const std::string& method,
                 uint64_t seed, const nb::kwargs& kwargs, const char* function);

// A request's own sampling settings (Generation.add): cfg, cfg_interval, temperature, top_k,
// top_p; none given: nullopt (the generation's).
std::optional<SamplingOptions> sampling_args(const nb::kwargs& kwargs, const char* function);

// A request's own settings (Generation.add): with `method`, that method with its parameters and
// drafting keywords as generate takes them (the drafter chosen as the CLI chooses it); the
// sampling keywords given, if any. A keyword of the whole generation (batch, image_index,
// max_tokens, device_loop) raises TypeError.
struct RequestArgs {
  std::optional<SpeculativeOptions> method;
  std::optional<SamplingOptions> sampling;
};
RequestArgs request_args(const std::string& model_dir, const ModelConfig& config,
                         const std::optional<std::string>& method, const nb::kwargs& kwargs,
                         const char* function);

// What a prompt conditions an image on: None (unconditional), an int (a class id), a str (a class
// name of a model with classes.json, or a typed prompt for a text-conditional model), or a float
// array [rows, caption_dim] (T5 caption features). label: what the image shows, in words.
struct Prompt {
  Condition condition;
  std::string label;
};
Prompt prompt_condition(nb::handle prompt, const ModelConfig& config, const ClassNames* names,
                        const std::string& style);

}  // namespace tessera::py
