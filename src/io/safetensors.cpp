#include "io/safetensors.h"

#include <cctype>
#include <cstring>
#include <nlohmann/json.hpp>

#include "tessera/error.h"

namespace tessera {

// safetensors spells the dtypes as tessera's names in upper case ("F32", "BF16", ...).
std::string safetensors_dtype_name(DType t) {
  std::string n = dtype_name(t);
  for (char& c : n) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return n;
}

namespace {

DType st_dtype(const std::string& s, const std::string& where) {
  try {
    const DType t = parse_dtype(s);
    if (safetensors_dtype_name(t) == s) return t;
  } catch (const Error&) {
  }
  throw Error(where + ": unsupported dtype " + s);
}

}  // namespace

SafeTensorsFile SafeTensorsFile::open(const std::string& path) {
  SafeTensorsFile f;
  f.file_ = MappedFile::open(path);
  const size_t size = f.file_->size();
  const std::string where = path;
  if (size < 8)
    throw Error(where + ": truncated safetensors file (" + std::to_string(size) +
                " bytes, no header)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, f.file_->data(), 8);
  if (header_len > size - 8 || header_len > (100u << 20))
    throw Error(where + ": corrupt safetensors header (header length " +
                std::to_string(header_len) + " exceeds the file size " + std::to_string(size) +
                ")");
  const char* hp = reinterpret_cast<const char*>(f.file_->data() + 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(hp, hp + header_len);
  } catch (const std::exception& e) {
    throw Error(where + ": corrupt safetensors header (invalid JSON)");
  }
  if (!header.is_object()) throw Error(where + ": corrupt safetensors header (not a JSON object)");
  const size_t data_start = 8 + header_len;
  const size_t data_size = size - data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (it->is_object())
        for (auto m = it->begin(); m != it->end(); ++m)
          if (m->is_string()) f.metadata_[m.key()] = m->get<std::string>();
      continue;
    }
    const std::string tw = where + ": tensor '" + it.key() + "'";
    const auto& e = *it;
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
        !e.contains("data_offsets") || !e["dtype"].is_string() || !e["shape"].is_array() ||
        !e["data_offsets"].is_array() || e["data_offsets"].size() != 2)
      throw Error(tw + ": corrupt header entry");
    SafeTensorInfo info;
    info.dtype = st_dtype(e["dtype"].get<std::string>(), tw);
    for (const auto& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) throw Error(tw + ": bad shape");
      info.shape.push_back(d.get<int64_t>());
    }
    const auto& off = e["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw Error(tw + ": bad data offsets");
    const uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
    try {
      info.nbytes = static_cast<size_t>(shape_numel(info.shape)) * dtype_size(info.dtype);
    } catch (const Error& e) {
      throw Error(tw + ": " + e.what());
    }
    if (en < b || en - b != info.nbytes)
      throw Error(tw + ": data offsets [" + std::to_string(b) + ", " + std::to_string(en) +
                  ") do not match shape " + shape_str(info.shape) + " of " +
                  dtype_name(info.dtype));
    if (en > data_size)
      throw Error(where + ": truncated file (tensor '" + it.key() + "' ends at byte " +
                  std::to_string(data_start + en) + " of " + std::to_string(size) + ")");
    info.data = f.file_->data() + data_start + b;
    f.tensors_.emplace(it.key(), std::move(info));
  }
  return f;
}

const SafeTensorInfo& SafeTensorsFile::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error(path() + ": missing tensor '" + name + "'");
  return it->second;
}

std::vector<float> SafeTensorsFile::read_f32(const std::string& name) const {
  const SafeTensorInfo& t = get(name);
  if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
    throw Error(path() + ": tensor '" + name + "' must be a float tensor (f32, f16 or bf16), got " +
                dtype_name(t.dtype));
  std::vector<float> out(static_cast<size_t>(shape_numel(t.shape)));
  convert_to_f32(t.dtype, t.data, out.data(), out.size());
  return out;
}

}  // namespace tessera
