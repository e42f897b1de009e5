// Writing .npy arrays (version 1.0, C order, little-endian), atomically through AtomicFile: the
// header and the data are streamed into the temporary, which replaces the target only when whole.
#include <cstdint>
#include <string>

#include "io/atomic_file.h"
#include "io/npy.h"
#include "tessera/error.h"

namespace tessera {

void write_npy(const std::string& path, DType dtype, const Shape& shape, const void* data) {
  check(dtype == DType::F32 || dtype == DType::I32 || dtype == DType::U8,
        "write_npy: unsupported dtype");
  const char* descr = dtype == DType::F32 ? "<f4" : dtype == DType::I32 ? "<i4" : "|u1";
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += std::to_string(shape[i]) + ",";
  if (shape.size() > 1) dims.pop_back();
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64) header.push_back(' ');
  header.push_back('\n');
  const uint16_t hl = static_cast<uint16_t>(header.size());
  AtomicFile out(path);
  out.write("\x93NUMPY\x01\x00", 8);
  out.write(&hl, 2);
  out.write(header);
  out.write(data, static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype));
  out.commit();
}

}  // namespace tessera
