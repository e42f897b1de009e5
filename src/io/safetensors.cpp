#include "io/safetensors.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>

#include "io/printable.h"
#include "io/strict_json.h"
#include "tessera/error.h"

namespace tessera {

// safetensors spells the dtypes as tessera's names in upper case ("F32", "BF16", ...).
std::string safetensors_dtype_name(DType t) {
  std::string n = dtype_name(t);
  for (char& c : n) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return n;
}

namespace {

// The largest dimension accepted (shape_numel's limit on element counts).
constexpr uint64_t kMaxDim = uint64_t{1} << 56;

DType st_dtype(const std::string& s, const std::string& where) {
  // F64 is not a weight dtype (parse_dtype, which reads users' --dtype, leaves it out), but
  // reference feature statistics are stored in it (FeatureStatistics::load).
  if (s == "F64") return DType::F64;
  try {
    const DType t = parse_dtype(s);
    if (safetensors_dtype_name(t) == s) return t;
  } catch (const Error&) {
  }
  throw Error(where + ": unsupported dtype " + printable(s));
}

}  // namespace

SafeTensorsFile SafeTensorsFile::open(const std::string& path) {
  return parse(MappedFile::open(path));
}

namespace {

// One header entry as read from the JSON, before its bytes are located.
SafeTensorInfo read_entry(const nlohmann::json& e, const std::string& tw, uint64_t& begin,
                          uint64_t& end) {
  if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
      !e.contains("data_offsets") || !e["dtype"].is_string() || !e["shape"].is_array() ||
      !e["data_offsets"].is_array() || e["data_offsets"].size() != 2)
    throw Error(tw +
                ": corrupt header entry (expected dtype, shape and data_offsets [begin, end])");
  SafeTensorInfo info;
  info.dtype = st_dtype(e["dtype"].get<std::string>(), tw);
  const auto& shape = e["shape"];
  if (shape.size() > SafeTensorsFile::kMaxRank)
    throw Error(tw + ": " + std::to_string(shape.size()) + " dimensions (at most " +
                std::to_string(SafeTensorsFile::kMaxRank) + " supported)");
  for (const auto& d : shape) {
    // nlohmann reads non-negative integers as unsigned. Even an empty tensor's dimensions must stay
    // far from int64's limit, so that code multiplying dimensions cannot overflow.
    if (!d.is_number_unsigned()) throw Error(tw + ": bad shape (dimensions must be integers >= 0)");
    const uint64_t v = d.get<uint64_t>();
    if (v > kMaxDim)
      throw Error(tw + ": bad shape (dimension " + std::to_string(v) + " exceeds " +
                  std::to_string(kMaxDim) + ")");
    info.shape.push_back(static_cast<int64_t>(v));
  }
  const auto& off = e["data_offsets"];
  if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    throw Error(tw + ": bad data offsets (expected two integers >= 0)");
  begin = off[0].get<uint64_t>();
  end = off[1].get<uint64_t>();
  try {
    // shape_numel refuses products above 2^56 elements, so nbytes cannot overflow either.
    const uint64_t numel = static_cast<uint64_t>(shape_numel(info.shape));
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, dtype_size(info.dtype), &nbytes) || nbytes > SIZE_MAX)
      throw Error("shape " + shape_str(info.shape) + " is too large");
    info.nbytes = static_cast<size_t>(nbytes);
  } catch (const Error& err) {
    throw Error(tw + ": " + err.what());
  }
  if (end < begin || end - begin != info.nbytes)
    throw Error(tw + ": data offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                ") do not match shape " + shape_str(info.shape) + " of " + dtype_name(info.dtype) +
                " (" + std::to_string(info.nbytes) + " bytes)");
  return info;
}

}  // namespace

SafeTensorsFile SafeTensorsFile::parse(std::shared_ptr<MappedFile> file) {
  SafeTensorsFile f;
  f.file_ = std::move(file);
  const size_t size = f.file_->size();
  const std::string& where = f.file_->path();
  if (size < 8)
    throw Error(where + ": truncated safetensors file (" + std::to_string(size) +
                " bytes, no header)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, f.file_->data(), 8);
  if (header_len > size - 8)
    throw Error(where + ": corrupt safetensors header (header length " +
                std::to_string(header_len) + " exceeds the file size " + std::to_string(size) +
                ")");
  if (header_len > kMaxHeaderBytes)
    throw Error(where + ": corrupt safetensors header (header length " +
                std::to_string(header_len) + " exceeds the limit of " +
                std::to_string(kMaxHeaderBytes) + " bytes)");
  const std::string_view text(reinterpret_cast<const char*>(f.file_->data() + 8),
                              static_cast<size_t>(header_len));
  nlohmann::json header;
  try {
    // A header nests three levels (entry, shape, offsets): refuse anything much deeper.
    header = parse_strict_json(text, where, 8);
  } catch (const JsonSyntaxError& e) {
    throw Error(where + ": corrupt safetensors header (invalid JSON: " + e.detail() + ")");
  }
  if (!header.is_object()) throw Error(where + ": corrupt safetensors header (not a JSON object)");
  const size_t data_start = 8 + static_cast<size_t>(header_len);
  const size_t data_size = size - data_start;
  struct Range {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Range> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object())
        throw Error(where + ": corrupt safetensors header (__metadata__ is not an object)");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          throw Error(where + ": corrupt safetensors header (__metadata__ '" + printable(m.key()) +
                      "' is not a string)");
        f.metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const std::string tw = where + ": tensor '" + printable(it.key()) + "'";
    uint64_t begin = 0, end = 0;
    SafeTensorInfo info = read_entry(*it, tw, begin, end);
    if (end > data_size)
      throw Error(where + ": truncated file (tensor '" + printable(it.key()) + "' ends at byte " +
                  std::to_string(data_start + end) + " of " + std::to_string(size) + ")");
    info.data = f.file_->data() + data_start + begin;
    const auto placed = f.tensors_.emplace(it.key(), std::move(info));
    if (begin != end) ranges.push_back({begin, end, &placed.first->first});
  }
  // Two tensors sharing bytes are a corrupt (or crafted) file: writing one would change the other.
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    const Range& a = ranges[i - 1];
    const Range& b = ranges[i];
    if (b.begin < a.end)
      throw Error(where + ": corrupt safetensors header (tensors '" + printable(*a.name) + "' [" +
                  std::to_string(a.begin) + ", " + std::to_string(a.end) + ") and '" +
                  printable(*b.name) + "' [" + std::to_string(b.begin) + ", " +
                  std::to_string(b.end) + ") overlap)");
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
  // An empty vector's data() may be null, which memcpy must not get even for 0 bytes.
  if (out.empty()) return out;
  // Reading f16/f32 values at an address not aligned to them is undefined: go through a copy.
  if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) != 0) {
    std::vector<uint64_t> aligned((t.nbytes + 7) / 8);
    std::memcpy(aligned.data(), t.data, t.nbytes);
    convert_to_f32(t.dtype, aligned.data(), out.data(), out.size());
  } else {
    convert_to_f32(t.dtype, t.data, out.data(), out.size());
  }
  return out;
}

}  // namespace tessera
