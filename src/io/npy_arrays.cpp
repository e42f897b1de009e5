// The public .npy functions (tessera/image_io.h) over the engine's NpyArray.
#include <functional>
#include <numeric>

#include "io/npy.h"
#include "tessera/error.h"
#include "tessera/image_io.h"

namespace tessera {

namespace {

// NpyArray's conversions throw without the file name; the public functions name it.
template <class T, class Convert>
NpyData<T> read_as(const std::string& path, Convert convert) {
  const NpyArray a = read_npy(path);
  NpyData<T> out;
  out.shape = a.shape;
  try {
    out.values = convert(a);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  return out;
}

void check_count(const std::string& path, const std::vector<int64_t>& shape, size_t n) {
  const int64_t want =
      std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
  check(want == static_cast<int64_t>(n),
        path + ": " + std::to_string(n) + " values for an array of shape " + shape_string(shape));
}

}  // namespace

NpyData<int32_t> read_npy_ints(const std::string& path) {
  return read_as<int32_t>(path, [](const NpyArray& a) { return a.as_i32(); });
}

NpyData<float> read_npy_floats(const std::string& path) {
  return read_as<float>(path, [](const NpyArray& a) { return a.as_f32(); });
}

void write_npy(const std::string& path, const std::vector<int64_t>& shape,
               std::span<const int32_t> values) {
  check_count(path, shape, values.size());
  write_npy(path, DType::I32, shape, values.data());
}

void write_npy(const std::string& path, const std::vector<int64_t>& shape,
               std::span<const float> values) {
  check_count(path, shape, values.size());
  write_npy(path, DType::F32, shape, values.data());
}

std::string shape_string(const std::vector<int64_t>& shape) {
  return shape_str(shape);
}

}  // namespace tessera
