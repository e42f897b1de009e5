// tessera.Generation's engine side (include/tessera/generation.h): requests added and cancelled
// between steps, each step one batched forward with the GIL released, finished images polled, and
// previews of the ones in flight, so a notebook can show an image filling in.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <mutex>

#include "../cli/stats_json.h"
#include "arguments.h"
#include "bindings.h"
#include "tessera/generation.h"

namespace tessera::py {

namespace {

// A Generation is used by one thread at a time: the mutex makes Python threads take turns.
struct PyGeneration {
  PyPipeline* owner;  // kept alive by the Python object (keep_alive in start_generation)
  std::unique_ptr<Generation> gen;
  std::mutex mu;
};

nb::object image_stats(const ImageStats& s) {
  nlohmann::json j = cli::image_stats_json(s);
  j["accepted_depth"] = s.accepted_depth;
  return json_object(j.dump());
}

}  // namespace

void register_generation(nb::module_& m) {
  nb::class_<PyGeneration>(m, "_Generation")
      .def(
          "add",
          [](PyGeneration& g, nb::object prompt, uint64_t seed, uint64_t image_index,
             const std::string& style, std::optional<std::string> method,
             const nb::kwargs& kwargs) {
            GenerationRequest r;
            r.condition =
                prompt_condition(prompt, g.owner->pipe->config(), g.owner->class_names(), style)
                    .condition;
            r.seed = seed;
            r.image_index = image_index;
            RequestArgs a =
                request_args(g.owner->model_dir, g.owner->pipe->config(), method, kwargs, "add");
            r.sampling = a.sampling;
            r.method = std::move(a.method);
            std::lock_guard lock(g.mu);
            nb::gil_scoped_release release;  // a typed prompt is encoded, a rule prepared here
            return g.gen->add(r);
          },
          nb::arg("prompt").none(), nb::arg("seed") = 0, nb::arg("image_index") = 0,
          nb::arg("style") = "", nb::arg("method").none() = nb::none(), nb::arg("kwargs"))
      .def("step",
           [](PyGeneration& g) {
             nb::gil_scoped_release release;
             std::lock_guard lock(g.mu);
             return g.gen->step();
           })
      .def("poll",
           [](PyGeneration& g) {
             std::vector<FinishedImage> done;
             {
               nb::gil_scoped_release release;
               std::lock_guard lock(g.mu);
               done = g.gen->poll();
             }
             const size_t grid = static_cast<size_t>(g.owner->pipe->config().gpt.grid);
             nb::list out;
             for (FinishedImage& f : done)
               out.append(nb::make_tuple(f.id, owned_array(std::move(f.tokens), {grid, grid}),
                                         image_stats(f.stats)));
             return out;
           })
      .def(
          "cancel",
          [](PyGeneration& g, int id) {
            std::lock_guard lock(g.mu);
            g.gen->cancel(id);
          },
          nb::arg("id"))
      .def(
          "tokens",
          [](PyGeneration& g, int id) {
            std::lock_guard lock(g.mu);
            std::vector<int32_t> t = g.gen->tokens(id);
            const size_t n = t.size();
            return owned_array(std::move(t), {n});
          },
          nb::arg("id"))
      .def(
          "preview",
          [](PyGeneration& g, int id) {
            std::vector<uint8_t> px;
            {
              nb::gil_scoped_release release;
              std::lock_guard lock(g.mu);
              px = g.gen->preview(id);
            }
            return pixels_array(std::move(px), 0, g.owner->pipe->image_size());
          },
          nb::arg("id"))
      .def(
          "image_stats",
          [](PyGeneration& g, int id) {
            std::lock_guard lock(g.mu);
            return image_stats(g.gen->image_stats(id));
          },
          nb::arg("id"))
      .def_prop_ro("stats",
                   [](PyGeneration& g) {
                     std::lock_guard lock(g.mu);
                     const GenerateStats& st = g.gen->stats();
                     return json_object(cli::stats_json(st, "").dump());
                   })
      .def_prop_ro("capacity",
                   [](PyGeneration& g) {
                     std::lock_guard lock(g.mu);
                     return g.gen->capacity();
                   })
      .def_prop_ro("in_flight", [](PyGeneration& g) {
        std::lock_guard lock(g.mu);
        return g.gen->in_flight();
      });

  // Pipeline.start_generation: the generation's method, its parameters and sampling, and batch.
  m.def(
      "_start_generation",
      [](PyPipeline& p, const std::string& method, int batch, const nb::kwargs& kwargs) {
        if (p.pipe->config().is_mar())
          throw Error("a Generation is for LlamaGen models; this is a MAR model");
        RunArgs a = run_args(p.model_dir, p.pipe->config(), method, 0, kwargs, "start_generation");
        a.gen.batch = a.batch.value_or(batch);
        std::unique_ptr<Generation> gen;
        {
          nb::gil_scoped_release release;
          gen = p.pipe->start_generation(a.gen);
        }
        return new PyGeneration{&p, std::move(gen), {}};
      },
      nb::arg("pipeline"), nb::arg("method"), nb::arg("batch"), nb::arg("kwargs"),
      nb::keep_alive<0, 1>(), nb::rv_policy::take_ownership);
}

}  // namespace tessera::py
