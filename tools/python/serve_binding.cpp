// tessera.ServeEngine: tessera serve's engine (tools/serve/engine.h) without its HTTP layer, for
// front-ends that bring their own (Ray Serve: python/tessera/serve_ray.py). The same parser,
// continuous batching and JSON answers as `tessera serve`.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include "../cli/default_model.h"
#include "../serve/engine.h"
#include "arguments.h"
#include "bindings.h"

namespace tessera::py {

namespace {

struct PyServeEngine {
  std::unique_ptr<Pipeline> pipe;
  std::unique_ptr<serve::Engine> engine;

  ~PyServeEngine() {
    if (!engine) return;
    nb::gil_scoped_release release;  // the engine thread finishes the images in flight
    engine.reset();
  }
};

nb::tuple reply(const serve::Reply& r) {
  return nb::make_tuple(r.status, nb::str(r.body.c_str()), r.headers);
}

// POST /v1/images/generations, waited for with the GIL released.
nb::tuple generations(PyServeEngine& s, const std::string& body) {
  serve::Reply r;
  {
    nb::gil_scoped_release release;
    r = s.engine->generations(body);
  }
  return reply(r);
}

nb::tuple status_and_body(const serve::Reply& r) {
  return nb::make_tuple(r.status, nb::str(r.body.c_str()));
}

}  // namespace

void register_serve(nb::module_& m) {
  nb::class_<PyServeEngine>(m, "ServeEngine")
      .def(
          "__init__",
          [](PyServeEngine* self, const std::string& model_dir, const std::string& device,
             int threads, const std::string& method, const std::optional<std::string>& draft,
             const std::string& methods, int batch, int queue, double timeout_s, int max_n,
             size_t max_body, int max_settings, bool separate_methods, bool warm_up) {
            if (batch < 1) throw ParameterError("batch", "must be >= 1");
            if (queue < 0) throw ParameterError("queue", "must be >= 0");
            if (!(timeout_s > 0)) throw ParameterError("timeout_s", "must be > 0");
            if (max_n < 1) throw ParameterError("max_n", "must be >= 1");
            if (max_settings < 1) throw ParameterError("max_settings", "must be >= 1");
            new (self) PyServeEngine{};
            nb::gil_scoped_release release;
            if (model_architecture(model_dir) != "llamagen")
              throw Error("ServeEngine is for LlamaGen models (discrete tokens)");
            LoadOptions lo;
            lo.device = device;
            lo.threads = threads;
            self->pipe = Pipeline::load(model_dir, lo);
            Pipeline& pipe = *self->pipe;
            if (!pipe.config().gpt.is_c2i()) pipe.text_condition("a photo");  // its T5 loads now
            serve::ServeOptions o;
            o.model_dir = model_dir;
            o.gen.spec.method = method;
            o.gen.spec.draft_len = kDraftLenAuto;
            const std::string flag = draft.value_or("");
            o.gen.spec.draft_model = cli::method_draft_dir(
                model_dir, method, flag, cli::choose_drafter(model_dir, {method}, flag));
            o.gen.sampling = resolve_sampling({}, pipe.config().sampling);
            o.gen.batch = batch;
            o.methods = cli::serving_methods(model_dir, methods, o.gen, flag, pipe, "methods");
            o.queue = queue;
            o.timeout_s = timeout_s;
            o.max_n = max_n;
            o.max_body = max_body;
            o.max_settings = max_settings;
            o.separate_methods = separate_methods;
            o.warm_up = warm_up;
            self->engine = std::make_unique<serve::Engine>(pipe, o);
            if (warm_up) self->engine->warm_up();
            self->engine->start();
          },
          nb::arg("model_dir"), nb::kw_only(), nb::arg("device") = "cpu", nb::arg("threads") = 0,
          nb::arg("method") = "vanilla", nb::arg("draft").none() = nb::none(),
          nb::arg("methods") = "all", nb::arg("batch") = 4, nb::arg("queue") = 64,
          nb::arg("timeout_s") = 600.0, nb::arg("max_n") = 16, nb::arg("max_body") = 65536,
          nb::arg("max_settings") = 4, nb::arg("separate_methods") = false,
          nb::arg("warm_up") = true,
          "Loads the model and starts tessera serve's engine: the methods a request may name "
          "(methods: 'all' the model can draft, or a comma-separated list), its default method "
          "and draft, images per batch (batch; methods that draft alike share one unless "
          "separate_methods), the queue beyond the batch (queue; more: 429), the request timeout "
          "(503) and body limits.")
      .def(
          "generations",
          [](PyServeEngine& s, nb::bytes body) {
            return generations(s, std::string(body.c_str(), body.size()));
          },
          nb::arg("body"),
          "POST /v1/images/generations: (status, JSON body, headers), when the images are done. "
          "Blocks with the GIL released; call it from several threads to batch their requests.")
      .def(
          "generations",
          [](PyServeEngine& s, const std::string& body) { return generations(s, body); },
          nb::arg("body"))
      .def(
          "models", [](PyServeEngine& s) { return status_and_body(s.engine->models()); },
          "GET /v1/models: (status, JSON body).")
      .def(
          "health", [](PyServeEngine& s) { return status_and_body(s.engine->health()); },
          "GET /health: (200, ...) or (503, ...) once stopping.")
      .def(
          "metrics", [](PyServeEngine& s) { return s.engine->metrics().body; },
          "GET /metrics: Prometheus text.")
      .def(
          "stop",
          [](PyServeEngine& s) {
            nb::gil_scoped_release release;
            s.engine->stop();
            s.engine->join();
          },
          "Queued requests are answered 503; the images in flight finish; then it returns.");
}

}  // namespace tessera::py
