// tessera._tessera: the extension module of the Python package (python/tessera), a thin layer on
// the public C++ API. The package's __init__.py wraps it in the classes users see.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "../cli/default_model.h"
#include "arguments.h"
#include "bindings.h"
#include "tessera/log.h"
#include "tessera/methods.h"

namespace tessera::py {

namespace {

const char* type_word(ParamType t) {
  switch (t) {
    case ParamType::Switch:
      return "bool";
    case ParamType::Int:
      return "int";
    case ParamType::Real:
      return "float";
    case ParamType::Choice:
      return "str";
  }
  return "";
}

const char* drafts_word(DraftSource d) {
  switch (d) {
    case DraftSource::None:
      return "none";
    case DraftSource::DraftModel:
      return "draft model";
    case DraftSource::Jacobi:
      return "jacobi";
    case DraftSource::ModelOrJacobi:
      return "draft model or jacobi";
  }
  return "";
}

// The registry as Python dicts: what generate's method and keyword arguments accept.
nb::list methods() {
  nb::list out;
  for (const MethodInfo& m : registered_methods()) {
    nb::list params;
    for (const ParamInfo& p : m.params) {
      nb::dict d;
      d["name"] = keyword(p.name);
      d["type"] = type_word(p.type);
      d["default"] = p.default_value;
      d["range"] = p.range;
      d["choices"] = p.choices;
      d["help"] = p.help;
      params.append(d);
    }
    nb::dict d;
    d["name"] = m.name;
    d["summary"] = m.summary;
    d["tokens"] = m.tokens == TokenKind::Continuous ? "continuous"
                  : m.tokens == TokenKind::Discrete ? "discrete"
                                                    : "any";
    d["drafts"] = drafts_word(m.drafts);
    d["lossless"] = m.lossless;
    d["params"] = params;
    out.append(d);
  }
  return out;
}

}  // namespace

}  // namespace tessera::py

NB_MODULE(_tessera, m) {
  namespace py = tessera::py;
  m.doc() = "tessera's engine (C++): use the classes of the tessera package.";
  m.attr("__version__") = TESSERA_VERSION;
  py::register_errors(m);
  py::register_pipeline(m);
  py::register_generation(m);
  py::register_serve(m);
  m.def("methods", &py::methods,
        "Every decoding method: name, summary, tokens, drafts, lossless, and its parameters "
        "(keyword name, type, default, range, choices, help).");
  m.def("default_model", &tessera::cli::default_model_dir,
        "The embedded emoji model's directory ($TESSERA_DEFAULT_MODEL, else the package's or "
        "the source tree's models/emoji/target).");
  m.def(
      "set_log_level",
      [](int level) {
        tessera::set_log_level(level <= 0   ? tessera::LogLevel::Quiet
                               : level == 1 ? tessera::LogLevel::Info
                                            : tessera::LogLevel::Debug);
      },
      nanobind::arg("level"), "0: quiet, 1: the engine's notes on stderr (default), 2: debug.");
}
