#include "io/npy.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <string_view>

#include "io/mapped_file.h"
#include "io/npy_header.h"
#include "io/printable.h"
#include "tessera/error.h"

namespace tessera {

NpyArray read_npy(const std::string& path) {
  const std::shared_ptr<MappedFile> f = MappedFile::open(path);
  return parse_npy(f->data(), f->size(), path);
}

NpyArray parse_npy(const unsigned char* data, size_t size, const std::string& where) {
  if (size < 10 || std::memcmp(data, "\x93NUMPY", 6) != 0) throw Error(where + ": not a .npy file");
  const int major = data[6];
  size_t hlen = 0, hstart = 0;
  if (major == 1) {
    hlen = data[8] | (data[9] << 8);
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) throw Error(where + ": truncated .npy header");
    hlen = data[8] | (data[9] << 8) | (data[10] << 16) | (static_cast<size_t>(data[11]) << 24);
    hstart = 12;
  } else {
    throw Error(where + ": unsupported .npy version " + std::to_string(major));
  }
  if (hlen > size - hstart)
    throw Error(where + ": truncated .npy header (" + std::to_string(hlen) + " bytes announced, " +
                std::to_string(size - hstart) + " present)");
  const NpyHeader h =
      parse_npy_header(std::string_view(reinterpret_cast<const char*>(data + hstart), hlen), where);
  if (h.fortran_order) throw Error(where + ": Fortran-ordered .npy arrays are not supported");
  NpyArray a;
  if (h.descr == "<f4")
    a.dtype = DType::F32;
  else if (h.descr == "<f2")
    a.dtype = DType::F16;
  else if (h.descr == "<i4")
    a.dtype = DType::I32;
  else if (h.descr == "<i8")
    a.dtype = DType::I64;
  else if (h.descr == "|u1")
    a.dtype = DType::U8;
  else if (h.descr == "<f8")
    a.dtype = DType::F64;
  else
    throw Error(where + ": unsupported .npy dtype " + printable(h.descr));
  a.shape = h.shape;
  size_t need = 0;
  try {
    // shape_numel refuses more than 2^56 elements: times at most 8 bytes, no overflow.
    need = static_cast<size_t>(shape_numel(a.shape)) * dtype_size(a.dtype);
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  const size_t dstart = hstart + hlen;
  if (size - dstart < need)
    throw Error(where + ": truncated .npy data (" + std::to_string(size - dstart) +
                " bytes, shape " + shape_str(a.shape) + " needs " + std::to_string(need) + ")");
  a.bytes.assign(data + dstart, data + dstart + need);
  return a;
}

std::vector<float> NpyArray::as_f32() const {
  std::vector<float> out(static_cast<size_t>(shape_numel(shape)));
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::F64)
    throw Error(std::string("expected a float array, got ") + dtype_name(dtype));
  // An empty vector's data() may be null, which memcpy must not get even for 0 bytes.
  if (!out.empty()) convert_to_f32(dtype, bytes.data(), out.data(), out.size());
  return out;
}

std::vector<double> NpyArray::as_f64() const {
  const size_t n = static_cast<size_t>(shape_numel(shape));
  std::vector<double> out(n);
  if (dtype == DType::F64) {
    if (n) std::memcpy(out.data(), bytes.data(), n * 8);
    return out;
  }
  const std::vector<float> f = as_f32();
  std::copy(f.begin(), f.end(), out.begin());
  return out;
}

std::vector<int32_t> NpyArray::as_i32() const {
  const size_t n = static_cast<size_t>(shape_numel(shape));
  std::vector<int32_t> out(n);
  if (dtype == DType::I32) {
    if (n) std::memcpy(out.data(), bytes.data(), n * 4);
  } else if (dtype == DType::I64) {
    for (size_t i = 0; i < n; ++i) {
      int64_t v;
      std::memcpy(&v, bytes.data() + 8 * i, 8);
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
        throw Error("integer value " + std::to_string(v) + " out of int32 range");
      out[i] = static_cast<int32_t>(v);
    }
  } else if (dtype == DType::U8) {
    for (size_t i = 0; i < n; ++i) out[i] = bytes[i];
  } else {
    throw Error(std::string("expected an integer array, got ") + dtype_name(dtype));
  }
  return out;
}

}  // namespace tessera
