// tessera.Pipeline's engine side: load, generate (LlamaGen token grids or MAR latents, decoded),
// decode. The Python class (python/tessera/__init__.py) turns pixels into PIL images and the
// statistics' JSON into a dict.
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "../cli/stats_json.h"
#include "arguments.h"
#include "bindings.h"
#include "tessera/class_names.h"
#include "tessera/mar.h"

namespace tessera::py {

namespace {

// The progress of a call made with the GIL released: every tick takes the GIL back briefly to see
// Ctrl-C (PyErr_CheckSignals: a KeyboardInterrupt ends the call at once) and to call the user's
// callback, whose exceptions end the call too.
struct Ticker {
  nb::object callback;
  void operator()(int64_t done, int64_t total) const {
    nb::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
    if (callback.is_valid() && !callback.is_none()) callback(done, total);
  }
};

TextPreprocessing preprocessing(const std::string& s) {
  if (s == "clean") return TextPreprocessing::Clean;
  if (s == "lower") return TextPreprocessing::Lower;
  if (s == "none") return TextPreprocessing::None;
  throw ParameterError("text_preprocessing", "must be clean, lower or none, not '" + s + "'");
}

// The rows one after another.
template <class T>
std::vector<T> concat(const std::vector<std::vector<T>>& rows) {
  std::vector<T> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return flat;
}

// generate(prompts, n, seed, method, style, progress, decode, **kwargs) -> (grids, pixels or None,
// stats JSON, labels). Image i of prompt p is image p * n + i of the call (its random stream).
nb::tuple generate(PyPipeline& self, const std::vector<nb::object>& prompts, int n, uint64_t seed,
                   const std::string& method, const std::string& style, nb::object progress,
                   bool decode, const nb::kwargs& kwargs) {
  if (n < 1) throw ParameterError("n", "must be >= 1");
  if (prompts.empty()) throw ParameterError("prompt", "no prompt given (an empty list)");
  const ModelConfig& mc = self.pipe->config();
  RunArgs a = run_args(self.model_dir, mc, method, seed, kwargs, "generate");
  std::vector<Condition> conditions;
  std::vector<std::string> labels;
  for (const nb::object& p : prompts) {
    Prompt c = prompt_condition(p, mc, self.class_names(), style);
    for (int i = 0; i < n; ++i) {
      conditions.push_back(c.condition);
      labels.push_back(c.label);
    }
  }
  const int count = static_cast<int>(conditions.size());
  // Batch: every image at once up to 16 (images do not depend on it: batch invariance).
  const int batch = a.batch.value_or(std::min(count, 16));
  Ticker ticker{progress};
  const int size = self.pipe->image_size();
  nb::list grids;
  nb::object pixels = nb::none();
  std::string stats;
  if (mc.is_mar()) {
    std::vector<int> label_ids;
    for (const Condition& c : conditions)
      label_ids.push_back(c.kind == Condition::Kind::Class ? c.class_id : -1);
    a.mar.batch = batch;
    a.mar.progress = ticker;
    MarStats st;
    std::vector<std::vector<float>> latents;
    std::vector<uint8_t> px;
    {
      nb::gil_scoped_release release;
      latents = self.pipe->generate_latents(label_ids, a.mar, &st);
      if (decode) px = self.pipe->decode_latents(concat(latents), count);
    }
    for (auto& l : latents) {
      const size_t len = l.size();
      grids.append(owned_array(std::move(l), {len}));
    }
    if (decode) pixels = pixels_array(std::move(px), count, size);
    stats = cli::mar_stats_json(st, method).dump();
  } else {
    a.gen.batch = batch;
    a.gen.progress = ticker;
    GenerateStats st;
    std::vector<std::vector<int32_t>> out;
    std::vector<uint8_t> px;
    {
      nb::gil_scoped_release release;
      out = self.pipe->generate(conditions, a.gen, &st);
      if (decode && self.pipe->has_decoder()) px = self.pipe->decode(concat(out), count);
    }
    const size_t grid = static_cast<size_t>(mc.gpt.grid);
    for (auto& g : out) grids.append(owned_array(std::move(g), {grid, grid}));
    if (decode && self.pipe->has_decoder()) pixels = pixels_array(std::move(px), count, size);
    stats = cli::stats_json(st, a.gen.spec.method).dump();
  }
  nb::list names;
  for (const std::string& l : labels) names.append(nb::str(l.c_str()));
  return nb::make_tuple(grids, pixels, nb::str(stats.c_str()), names);
}

nb::object decode(PyPipeline& self, nb::ndarray<const int32_t, nb::c_contig, nb::device::cpu> t) {
  const ModelConfig& mc = self.pipe->config();
  if (mc.is_mar()) throw Error("decode is for LlamaGen token grids; this is a MAR model");
  const size_t per = static_cast<size_t>(mc.gpt.grid) * mc.gpt.grid;
  if (t.size() == 0 || t.size() % per != 0)
    throw ParameterError("tokens", "must hold whole " + std::to_string(mc.gpt.grid) + "x" +
                                       std::to_string(mc.gpt.grid) + " grids, not " +
                                       std::to_string(t.size()) + " tokens");
  const int n = static_cast<int>(t.size() / per);
  std::vector<int32_t> tokens(t.data(), t.data() + t.size());
  std::vector<uint8_t> px;
  {
    nb::gil_scoped_release release;
    px = self.pipe->decode(tokens, n);
  }
  return pixels_array(std::move(px), t.ndim() <= 2 ? 0 : n, self.pipe->image_size());
}

}  // namespace

template <class T>
nb::object owned_array(std::vector<T> v, std::vector<size_t> shape) {
  auto* data = new std::vector<T>(std::move(v));
  nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, T>(data->data(), shape.size(), shape.data(), owner));
}
template nb::object owned_array(std::vector<int32_t>, std::vector<size_t>);
template nb::object owned_array(std::vector<float>, std::vector<size_t>);

nb::object pixels_array(std::vector<uint8_t> px, int n, int size) {
  const size_t s = static_cast<size_t>(size);
  if (n == 0) return owned_array(std::move(px), {s, s, 3});
  return owned_array(std::move(px), {static_cast<size_t>(n), s, s, 3});
}

nb::object json_object(const std::string& text) {
  return nb::module_::import_("json").attr("loads")(nb::str(text.c_str()));
}

void register_pipeline(nb::module_& m) {
  nb::class_<PyPipeline>(m, "_Pipeline")
      .def(
          "__init__",
          [](PyPipeline* self, const std::string& model_dir, const std::string& device, int threads,
             const std::string& text_encoder, const std::string& text_preprocessing,
             bool load_decoder, bool check_weights) {
            LoadOptions lo;
            lo.device = device;
            lo.threads = threads;
            lo.text_encoder = text_encoder;
            lo.text_preprocessing = preprocessing(text_preprocessing);
            lo.load_decoder = load_decoder;
            lo.check_weights = check_weights;
            std::unique_ptr<Pipeline> pipe;
            {
              nb::gil_scoped_release release;
              pipe = Pipeline::load(model_dir, lo);
            }
            const ModelConfig& mc = pipe->config();
            const int classes = mc.is_mar()       ? mc.mar.num_classes
                                : mc.gpt.is_c2i() ? mc.gpt.num_classes
                                                  : 0;
            new (self) PyPipeline{model_dir, std::move(pipe), std::nullopt};
            if (classes > 0 && ClassNames::present(model_dir))
              self->names = ClassNames::load(model_dir, classes);
          },
          nb::arg("model_dir"), nb::arg("device") = "cpu", nb::arg("threads") = 0,
          nb::arg("text_encoder") = "", nb::arg("text_preprocessing") = "clean",
          nb::arg("load_decoder") = true, nb::arg("check_weights") = true)
      .def("generate", &generate, nb::arg("prompts"), nb::arg("n"), nb::arg("seed"),
           nb::arg("method"), nb::arg("style"), nb::arg("progress").none(), nb::arg("decode"),
           nb::arg("kwargs"))
      .def("decode", &decode, nb::arg("tokens"))
      .def_prop_ro("architecture", [](const PyPipeline& p) { return p.pipe->architecture(); })
      .def_prop_ro("device", [](const PyPipeline& p) { return p.pipe->device(); })
      .def_prop_ro("image_size", [](const PyPipeline& p) { return p.pipe->image_size(); })
      .def_prop_ro("has_decoder", [](const PyPipeline& p) { return p.pipe->has_decoder(); })
      .def_prop_ro("text_conditional",
                   [](const PyPipeline& p) {
                     return !p.pipe->config().is_mar() && !p.pipe->config().gpt.is_c2i();
                   })
      .def_prop_ro("grid",
                   [](const PyPipeline& p) {
                     return p.pipe->config().is_mar() ? 0 : p.pipe->config().gpt.grid;
                   })
      .def_prop_ro("class_names",
                   [](const PyPipeline& p) {
                     nb::list out;
                     if (p.names)
                       for (size_t c = 0; c < p.names->classes().size(); ++c)
                         out.append(nb::str(p.names->label(static_cast<int>(c)).c_str()));
                     return out;
                   })
      .def_prop_rw(
          "threads", [](const PyPipeline& p) { return p.pipe->threads(); },
          [](PyPipeline& p, int n) { p.pipe->set_threads(n); });
}

}  // namespace tessera::py
