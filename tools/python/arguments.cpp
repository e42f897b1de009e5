#include "arguments.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <map>

#include "../cli/default_model.h"
#include "tessera/error.h"
#include "tessera/methods.h"

namespace tessera::py {

namespace {

// Method parameters by keyword ("lantern_k" -> lantern.k's registry entry).
const std::map<std::string, const ParamInfo*>& params_by_keyword() {
  static const std::map<std::string, const ParamInfo*> table = [] {
    std::map<std::string, const ParamInfo*> t;
    for (const MethodInfo& m : registered_methods())
      for (const ParamInfo& p : m.params) t.emplace(keyword(p.name), &p);
    return t;
  }();
  return table;
}

std::string kind_of(nb::handle v) {
  return nb::cast<std::string>(nb::type_name(v.type()));
}

bool is_int(nb::handle v) {
  return nb::isinstance<nb::int_>(v) && !nb::isinstance<nb::bool_>(v);
}

// The value of a method parameter, checked against its type as the engine's registry has it.
ParamValue param_value(const ParamInfo& p, nb::handle v) {
  const std::string k = keyword(p.name);
  switch (p.type) {
    case ParamType::Switch:
      if (!nb::isinstance<nb::bool_>(v))
        throw ParameterError(p.name, "{" + p.name + "} must be True or False, not " + kind_of(v));
      return nb::cast<bool>(v);
    case ParamType::Int:
      if (!is_int(v))
        throw ParameterError(p.name, "{" + p.name + "} must be an int, not " + kind_of(v));
      return nb::cast<int64_t>(v);
    case ParamType::Real:
      if (!is_int(v) && !nb::isinstance<nb::float_>(v))
        throw ParameterError(p.name, "{" + p.name + "} must be a number, not " + kind_of(v));
      return nb::cast<double>(v);
    case ParamType::Choice:
      if (!nb::isinstance<nb::str>(v))
        throw ParameterError(p.name, "{" + p.name + "} must be a str, not " + kind_of(v));
      return nb::cast<std::string>(v);
  }
  throw ParameterError(p.name, "{" + p.name + "}: unknown type");
}

template <class T>
T number(nb::handle v, const std::string& name) {
  if constexpr (std::is_integral_v<T>) {
    if (!is_int(v)) throw ParameterError(name, "{" + name + "} must be an int, not " + kind_of(v));
  } else {
    if (!is_int(v) && !nb::isinstance<nb::float_>(v))
      throw ParameterError(name, "{" + name + "} must be a number, not " + kind_of(v));
  }
  return nb::cast<T>(v);
}

std::string text(nb::handle v, const std::string& name) {
  if (!nb::isinstance<nb::str>(v))
    throw ParameterError(name, "{" + name + "} must be a str, not " + kind_of(v));
  return nb::cast<std::string>(v);
}

[[noreturn]] void unexpected(const char* function, const std::string& key) {
  throw nb::type_error(
      (std::string(function) + "() got an unexpected keyword argument '" + key + "'").c_str());
}

// Sampling keywords into s; false when key is none of them.
bool sampling_arg(const std::string& key, nb::handle v, SamplingOptions& s) {
  if (key == "cfg")
    s.cfg_scale = number<float>(v, "cfg");
  else if (key == "cfg_interval")
    s.cfg_interval = number<float>(v, "cfg_interval");
  else if (key == "temperature")
    s.temperature = number<float>(v, "temperature");
  else if (key == "top_k")
    s.top_k = number<int>(v, "top_k");
  else if (key == "top_p")
    s.top_p = number<float>(v, "top_p");
  else
    return false;
  return true;
}

}  // namespace

std::string keyword(const std::string& param) {
  if (param == "auto_costs") return "draft_costs";  // SpeculativeOptions::auto_costs
  if (param == "auto_hold") return "draft_hold";
  std::string k = param;
  for (char& c : k)
    if (c == '.' || c == '-') c = '_';
  return k;
}

void register_errors(nb::module_& m) {
  static nb::object error =
      nb::borrow(PyErr_NewExceptionWithDoc("tessera.Error",
                                           "An error of the tessera engine (its one-line message "
                                           "names the problem).",
                                           PyExc_RuntimeError, nullptr));
  nb::object bases = nb::make_tuple(error, nb::handle(PyExc_ValueError));
  static nb::object parameter_error = nb::borrow(PyErr_NewExceptionWithDoc(
      "tessera.ParameterError",
      "A bad value of a named parameter; .param is its keyword (lantern_k, top_k, ...).",
      bases.ptr(), nullptr));
  m.attr("Error") = error;
  m.attr("ParameterError") = parameter_error;
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const ParameterError& e) {
      const std::string msg = e.message(keyword);
      nb::object exc = parameter_error(nb::str(msg.c_str()));
      exc.attr("param") = nb::str(keyword(e.param()).c_str());
      PyErr_SetObject(parameter_error.ptr(), exc.ptr());
    } catch (const Error& e) {
      PyErr_SetString(error.ptr(), e.what());
    }
  });
}

RunArgs run_args(const std::string& model_dir, const ModelConfig& config, const std::string& method,
                 uint64_t seed, const nb::kwargs& kwargs, const char* function) {
  RunArgs a;
  const bool mar = config.is_mar();
  GenerateOptions& g = a.gen;
  g.seed = a.mar.seed = seed;
  g.spec.method = a.mar.spec.method = method;
  g.spec.draft_len = kDraftLenAuto;  // the CLI's default: cost-aware lengths
  a.mar.sampling.num_iter = 0;  // the CLI's default: MAR's 64 steps, capped at the model's tokens
  std::string draft;
  bool draft_given = false;
  for (auto [k, v] : kwargs) {
    const std::string key = nb::cast<std::string>(k);
    if (v.is_none()) continue;  // None: the default
    if (sampling_arg(key, v, g.sampling)) {
      if (key == "cfg") a.mar.sampling.cfg_scale = g.sampling.cfg_scale;
      if (key == "temperature") a.mar.sampling.temperature = g.sampling.temperature;
    } else if (key == "draft") {
      draft = text(v, "draft");
      draft_given = true;
    } else if (key == "draft_len") {
      if (nb::isinstance<nb::str>(v) && nb::cast<std::string>(v) == "auto")
        g.spec.draft_len = kDraftLenAuto;
      else
        g.spec.draft_len = a.mar.spec.draft_len = number<int>(v, "draft_len");
    } else if (mar && (key == "draft_costs" || key == "draft_hold")) {
      // As the CLI refuses --draft-costs and --draft-hold there.
      throw ParameterError(key == "draft_costs" ? "auto_costs" : "auto_hold",
                           "is for LlamaGen methods; MAR's draft_len \"auto\" is 8 steps");
    } else if (key == "draft_costs") {
      // As a run's stats give them: {"draft_step": s, "verify": [s, ...]}.
      if (!nb::isinstance<nb::dict>(v) || !nb::cast<nb::dict>(v).contains("verify"))
        throw ParameterError("auto_costs",
                             "must be a dict as stats[\"draft_costs\"]: {\"draft_step\": s, "
                             "\"verify\": [seconds of 1, 2, ... positions]}");
      const nb::dict d = nb::cast<nb::dict>(v);
      const nb::object verify = d["verify"];
      if (!nb::isinstance<nb::list>(verify) && !nb::isinstance<nb::tuple>(verify))
        throw ParameterError("auto_costs", "{auto_costs}[\"verify\"] must be a list of seconds");
      for (nb::handle x : verify)
        g.spec.auto_costs.verify.push_back(number<double>(x, "draft_costs"));
      if (d.contains("draft_step"))
        g.spec.auto_costs.draft_step = number<double>(d["draft_step"], "draft_costs");
    } else if (key == "max_auto_len") {
      g.spec.max_auto_len = number<int>(v, "max_auto_len");
    } else if (key == "draft_hold") {
      g.spec.auto_hold = number<int>(v, "draft_hold");
    } else if (key == "tree") {
      g.spec.tree = text(v, "tree");
    } else if (key == "resample") {
      g.spec.resample = text(v, "resample");
    } else if (key == "max_rounds") {
      g.spec.max_rounds = number<int>(v, "max_rounds");
    } else if (key == "batch") {
      a.batch = number<int>(v, "batch");
    } else if (key == "image_index") {
      g.first_image_index = a.mar.first_image_index = number<uint64_t>(v, "image_index");
    } else if (key == "max_tokens") {
      g.max_tokens = number<int>(v, "max_tokens");
    } else if (key == "device_loop") {
      const std::string d = text(v, "device_loop");
      if (d != "auto" && d != "on" && d != "off")
        throw ParameterError("device_loop", "must be auto, on or off, not '" + d + "'");
      g.device_loop = a.mar.sampling.device_loop = d == "on"    ? DeviceLoop::On
                                                   : d == "off" ? DeviceLoop::Off
                                                                : DeviceLoop::Auto;
    } else if (key == "steps" && mar) {
      a.mar.sampling.num_iter = number<int>(v, "steps");
    } else if (key == "cfg_schedule" && mar) {
      a.mar.sampling.cfg_schedule = text(v, "cfg_schedule");
    } else if (auto p = params_by_keyword().find(key); p != params_by_keyword().end()) {
      g.spec.params[p->second->name] = a.mar.spec.params[p->second->name] =
          param_value(*p->second, v);
    } else {
      unexpected(function, key);
    }
  }
  if (!find_method(method)) throw ParameterError("method", "unknown method '" + method + "'");
  // The drafter as the CLI picks it: draft=DIR, "none" (Jacobi), else the model's companion.
  const std::string flag = draft_given ? draft : "";
  try {
    const cli::DrafterChoice choice = cli::choose_drafter(model_dir, {method}, flag);
    if (mar) {
      if (g.spec.draft_len == kDraftLenAuto)
        a.mar.spec.draft_len = ContinuousSpecOptions{}.draft_len;
      a.mar.spec.draft_model = choice.dir;
      return a;
    }
    g.spec.draft_model = cli::method_draft_dir(model_dir, method, flag, choice);
  } catch (const ParameterError&) {
    throw;
  } catch (const Error& e) {  // the CLI's words name --draft: here it is the keyword draft
    std::string msg = e.what();
    for (size_t at; (at = msg.find("--draft")) != std::string::npos;) msg.replace(at, 7, "draft");
    throw Error(msg);
  }
  return a;
}

std::optional<SamplingOptions> sampling_args(const nb::kwargs& kwargs, const char* function) {
  SamplingOptions s;
  bool any = false;
  for (auto [k, v] : kwargs) {
    const std::string key = nb::cast<std::string>(k);
    if (v.is_none()) continue;
    if (!sampling_arg(key, v, s)) unexpected(function, key);
    any = true;
  }
  return any ? std::optional(s) : std::nullopt;
}

RequestArgs request_args(const std::string& model_dir, const ModelConfig& config,
                         const std::optional<std::string>& method, const nb::kwargs& kwargs,
                         const char* function) {
  if (!method) return {std::nullopt, sampling_args(kwargs, function)};
  bool sampling = false;
  for (auto [k, v] : kwargs) {
    const std::string key = nb::cast<std::string>(k);
    if (key == "batch" || key == "image_index" || key == "max_tokens" || key == "device_loop" ||
        key == "steps" || key == "cfg_schedule")
      unexpected(function, key);
    SamplingOptions scratch;
    sampling = sampling || (!v.is_none() && sampling_arg(key, v, scratch));
  }
  const RunArgs a = run_args(model_dir, config, *method, 0, kwargs, function);
  RequestArgs r;
  r.method = a.gen.spec;
  if (sampling) r.sampling = a.gen.sampling;
  return r;
}

Prompt prompt_condition(nb::handle prompt, const ModelConfig& config, const ClassNames* names,
                        const std::string& style) {
  const bool c2i = config.is_mar() || config.gpt.is_c2i();
  const int classes = config.is_mar() ? config.mar.num_classes : config.gpt.num_classes;
  if (prompt.is_none()) return {Condition::unconditional(), "unconditional"};
  if (is_int(prompt)) {
    if (!c2i)
      throw Error(
          "a class id is for class-conditional models; this one is text-conditional "
          "(t2i): give a prompt or caption features");
    const int64_t id = nb::cast<int64_t>(prompt);
    if (id < 0 || id >= classes)
      throw ParameterError("class", "class " + std::to_string(id) + " out of range [0, " +
                                        std::to_string(classes) + ")");
    return {Condition::label(static_cast<int>(id)),
            names ? names->label(static_cast<int>(id)) : "class " + std::to_string(id)};
  }
  if (nb::isinstance<nb::str>(prompt)) {
    const std::string text = nb::cast<std::string>(prompt);
    if (!c2i) {
      if (!style.empty()) throw Error("style picks a class's drawing; this is a t2i model");
      return {Condition::text(text), text};
    }
    if (!names)
      throw Error(config.dir + " has no classes.json (class names): give the class id as an int");
    const ClassMatch m = names->match(text, style);
    return {Condition::label(m.class_id), names->label(m.class_id)};
  }
  if (nb::ndarray_check(prompt)) {
    if (c2i) throw Error("caption features are for text-conditional (t2i) models");
    auto a = nb::cast<nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>>(
        prompt, /*convert=*/true);
    std::vector<float> f(a.data(), a.data() + a.size());
    return {Condition::from_caption(std::move(f), static_cast<int>(a.shape(0)),
                                    static_cast<int>(a.shape(1)), config.gpt),
            "caption features"};
  }
  throw nb::type_error(("a prompt is None, an int (class id), a str or a float array "
                        "[rows, caption_dim], not " +
                        kind_of(prompt))
                           .c_str());
}

}  // namespace tessera::py
