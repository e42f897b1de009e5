#include "models/weights.h"

#include "tessera/error.h"

namespace tessera {

WeightLoader::WeightLoader(const std::string& path, DType expected_dtype, Backend& backend)
    : file_(SafeTensorsFile::open(path)), expected_(expected_dtype), backend_(backend) {}

const SafeTensorInfo& WeightLoader::lookup(const std::string& name, const Shape& shape) {
  if (!file_.has(name)) throw Error(path() + ": missing tensor '" + name + "'");
  const SafeTensorInfo& info = file_.get(name);
  if (info.shape != shape)
    throw Error(path() + ": tensor '" + name + "' has shape " + shape_str(info.shape) +
                " but the config expects " + shape_str(shape));
  if (info.dtype != DType::F32 && info.dtype != DType::F16 && info.dtype != DType::BF16)
    throw Error(path() + ": tensor '" + name + "' has non-float dtype " + dtype_name(info.dtype));
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

Tensor WeightLoader::adopt(const SafeTensorInfo& info) {
  // safetensors does not promise alignment; a misaligned tensor is copied instead of mapped.
  if (reinterpret_cast<uintptr_t>(info.data) % dtype_size(info.dtype) != 0)
    return backend_.upload(info.data, info.dtype, info.shape);
  return backend_.adopt_host(info.data, info.dtype, info.shape, file_.mapping());
}

Tensor WeightLoader::f32(const std::string& name, const Shape& shape) {
  const SafeTensorInfo& info = lookup(name, shape);
  Tensor stored = adopt(info);
  return info.dtype == DType::F32 ? stored : backend_.to_f32(stored);
}

void WeightLoader::finish() {
  for (const auto& [name, info] : file_.tensors())
    if (!used_.count(name))
      throw Error(path() + ": unexpected tensor '" + name + "' " + shape_str(info.shape) +
                  " (does config.json match the checkpoint?)");
}

}  // namespace tessera
