// The classes of tessera._tessera, each registered by its own file.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/class_names.h"
#include "tessera/tessera.h"

namespace tessera::py {

namespace nb = nanobind;

// A loaded model and what the bindings need beside it (its class names).
struct PyPipeline {
  std::string model_dir;
  std::unique_ptr<Pipeline> pipe;
  std::optional<ClassNames> names;

  const ClassNames* class_names() const { return names ? &*names : nullptr; }
};

// A uint8 array [n, H, W, 3] (or [H, W, 3] for n = 0) that owns its pixels.
nb::object pixels_array(std::vector<uint8_t> px, int n, int size);
// A numpy array of the given shape that owns its values (int32 and float).
template <class T>
nb::object owned_array(std::vector<T> v, std::vector<size_t> shape);
// A JSON text as Python objects (json.loads).
nb::object json_object(const std::string& text);

void register_pipeline(nb::module_& m);
void register_generation(nb::module_& m);
void register_serve(nb::module_& m);

}  // namespace tessera::py
