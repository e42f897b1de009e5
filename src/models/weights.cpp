#include "models/weights.h"

#include <atomic>
#include <cstring>

#include "common/clock.h"
#include "tensor/finite_scan.h"
#include "tessera/error.h"

namespace tessera {

namespace {
std::atomic<int64_t> g_checked_bytes{0};
std::atomic<int64_t> g_checked_ns{0};
}  // namespace

WeightCheckTotals weight_check_totals() {
  return {g_checked_bytes.load(), static_cast<double>(g_checked_ns.load()) * 1e-9};
}

WeightLoader::WeightLoader(const std::string& path, DType expected_dtype, Backend& backend,
                           bool check_finite)
    : file_(SafeTensorsFile::open(path)),
      expected_(expected_dtype),
      backend_(backend),
      check_finite_(check_finite) {}

const SafeTensorInfo& WeightLoader::lookup(const std::string& name, const Shape& shape) {
  if (!file_.has(name)) throw Error(path() + ": missing tensor '" + name + "'");
  const SafeTensorInfo& info = file_.get(name);
  if (info.shape != shape)
    throw Error(path() + ": tensor '" + name + "' has shape " + shape_str(info.shape) +
                " but the config expects " + shape_str(shape));
  if (info.dtype != DType::F32 && info.dtype != DType::F16 && info.dtype != DType::BF16)
    throw Error(path() + ": tensor '" + name + "' has non-float dtype " + dtype_name(info.dtype));
  if (check_finite_) {
    const double t0 = now_s();
    const int64_t bad = first_non_finite(info.dtype, info.data, shape_numel(info.shape));
    g_checked_ns += static_cast<int64_t>((now_s() - t0) * 1e9);
    g_checked_bytes += static_cast<int64_t>(info.nbytes);
    if (bad >= 0)
      throw Error(path() + ": tensor '" + name + "' holds a non-finite value (NaN or Inf) at " +
                  "element " + std::to_string(bad) + " (a corrupt or badly converted checkpoint)");
  }
  used_.insert(name);
  return info;
}

Tensor WeightLoader::matrix(const std::string& name, const Shape& shape) {
  const SafeTensorInfo& info = lookup(name, shape);
  if (info.dtype != expected_)
    throw Error(path() + ": tensor '" + name + "' is " + dtype_name(info.dtype) +
                " but config.json says " + dtype_name(expected_));
  return adopt(info);
}

Tensor WeightLoader::linear(const std::string& name, const Shape& shape) {
  const Tensor stored = matrix(name, shape);
  Tensor packed = backend_.pack_linear_weight(stored);
  if (packed.data != stored.data) release(name);  // the model reads the packed copy alone
  return packed;
}

void WeightLoader::release(const std::string& name) {
  const SafeTensorInfo& info = file_.get(name);
  file_.mapping()->release(info.data, info.nbytes);
}

Tensor WeightLoader::linear_stacked(const std::vector<std::string>& names, const Shape& each) {
  check(!names.empty() && each.size() == 2, "internal: linear_stacked needs names and a matrix");
  Tensor stacked =
      backend_.empty(expected_, {each[0] * static_cast<int64_t>(names.size()), each[1]});
  for (size_t i = 0; i < names.size(); ++i) {
    Tensor rows = stacked.rows(static_cast<int64_t>(i) * each[0], each[0]);
    backend_.copy(matrix(names[i], each), rows);
    release(names[i]);
  }
  return backend_.pack_linear_weight(stacked);
}

Tensor WeightLoader::linear_columns(const std::string& name, const Shape& shape, int64_t begin,
                                    int64_t width) {
  check(shape.size() == 2 && begin >= 0 && width > 0 && begin + width <= shape[1],
        "internal: linear_columns outside the matrix");
  matrix(name, shape);  // validates name, shape, dtype and values
  const SafeTensorInfo& info = file_.get(name);
  const size_t es = dtype_size(info.dtype);
  std::vector<uint8_t> block(static_cast<size_t>(shape[0] * width) * es);
  const auto* src = static_cast<const uint8_t*>(info.data);
  for (int64_t r = 0; r < shape[0]; ++r)
    std::memcpy(block.data() + static_cast<size_t>(r * width) * es,
                src + static_cast<size_t>(r * shape[1] + begin) * es,
                static_cast<size_t>(width) * es);
  return backend_.pack_linear_weight(backend_.upload(block.data(), info.dtype, {shape[0], width}));
}

Tensor WeightLoader::adopt(const SafeTensorInfo& info) {
  // safetensors does not promise alignment; a misaligned tensor is copied instead of mapped.
  Tensor t = reinterpret_cast<uintptr_t>(info.data) % dtype_size(info.dtype) != 0
                 ? backend_.upload(info.data, info.dtype, info.shape)
                 : backend_.adopt_host(info.data, info.dtype, info.shape, file_.mapping());
  // A copy (a device's memory, a misaligned tensor): the file's pages are not needed again.
  if (t.data != info.data) file_.mapping()->release(info.data, info.nbytes);
  return t;
}

Tensor WeightLoader::f32(const std::string& name, const Shape& shape) {
  const SafeTensorInfo& info = lookup(name, shape);
  Tensor stored = adopt(info);
  if (info.dtype == DType::F32) return stored;
  Tensor converted = backend_.to_f32(stored);
  file_.mapping()->release(info.data, info.nbytes);
  return converted;
}

void WeightLoader::finish() {
  for (const auto& [name, info] : file_.tensors())
    if (!used_.count(name))
      throw Error(path() + ": unexpected tensor '" + name + "' " + shape_str(info.shape) +
                  " (does config.json match the checkpoint?)");
}

}  // namespace tessera
