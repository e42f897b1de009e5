#include "io/npy.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <regex>

#include "tessera/error.h"

namespace tessera {

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + path);
  std::vector<unsigned char> buf((std::istreambuf_iterator<char>(in)),
                                 std::istreambuf_iterator<char>());
  if (buf.size() < 10 || std::memcmp(buf.data(), "\x93NUMPY", 6) != 0)
    throw Error(path + ": not a .npy file");
  const int major = buf[6];
  size_t hlen = 0, hstart = 0;
  if (major == 1) {
    hlen = buf[8] | (buf[9] << 8);
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (buf.size() < 12) throw Error(path + ": truncated .npy header");
    hlen = buf[8] | (buf[9] << 8) | (buf[10] << 16) | (static_cast<size_t>(buf[11]) << 24);
    hstart = 12;
  } else {
    throw Error(path + ": unsupported .npy version " + std::to_string(major));
  }
  if (hstart + hlen > buf.size()) throw Error(path + ": truncated .npy header");
  const std::string header(reinterpret_cast<const char*>(buf.data() + hstart), hlen);
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'descr':\\s*'([^']*)'")))
    throw Error(path + ": .npy header has no descr");
  const std::string descr = m[1];
  if (std::regex_search(header, std::regex("'fortran_order':\\s*True")))
    throw Error(path + ": Fortran-ordered .npy arrays are not supported");
  NpyArray a;
  if (descr == "<f4")
    a.dtype = DType::F32;
  else if (descr == "<f2")
    a.dtype = DType::F16;
  else if (descr == "<i4")
    a.dtype = DType::I32;
  else if (descr == "<i8")
    a.dtype = DType::I64;
  else if (descr == "|u1")
    a.dtype = DType::U8;
  else if (descr == "<f8")
    a.dtype = DType::F64;
  else
    throw Error(path + ": unsupported .npy dtype " + descr);
  if (!std::regex_search(header, m, std::regex("'shape':\\s*\\(([^)]*)\\)")))
    throw Error(path + ": .npy header has no shape");
  const std::string dims = m[1];
  std::regex num("\\d+");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), num); it != std::sregex_iterator();
       ++it)
    a.shape.push_back(std::stoll(it->str()));
  size_t need = 0;
  try {
    need = static_cast<size_t>(shape_numel(a.shape)) * dtype_size(a.dtype);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  const size_t dstart = hstart + hlen;
  if (buf.size() - dstart < need)
    throw Error(path + ": truncated .npy data (" + std::to_string(buf.size() - dstart) +
                " bytes, shape " + shape_str(a.shape) + " needs " + std::to_string(need) + ")");
  a.bytes.assign(buf.begin() + static_cast<std::ptrdiff_t>(dstart),
                 buf.begin() + static_cast<std::ptrdiff_t>(dstart + need));
  return a;
}

std::vector<float> NpyArray::as_f32() const {
  std::vector<float> out(static_cast<size_t>(shape_numel(shape)));
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::F64)
    throw Error(std::string("expected a float array, got ") + dtype_name(dtype));
  convert_to_f32(dtype, bytes.data(), out.data(), out.size());
  return out;
}

std::vector<double> NpyArray::as_f64() const {
  const size_t n = static_cast<size_t>(shape_numel(shape));
  std::vector<double> out(n);
  if (dtype == DType::F64) {
    std::memcpy(out.data(), bytes.data(), n * 8);
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
    std::memcpy(out.data(), bytes.data(), n * 4);
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
