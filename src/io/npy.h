// NumPy .npy arrays (C order, little-endian): read any of f32/f16/f64/i32/i64/u8, write f32/i32/u8.
#pragma once

#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace tessera {

struct NpyArray {
  DType dtype = DType::F32;
  Shape shape;
  std::vector<unsigned char> bytes;

  std::vector<float> as_f32() const;    // f32, f16 or f64 data
  std::vector<double> as_f64() const;   // any float data, widened
  std::vector<int32_t> as_i32() const;  // i32, i64 or u8 data (range-checked)
};

NpyArray read_npy(const std::string& path);  // throws an Error naming the file and problem
// The bytes of a .npy file (versions 1 to 3; header: io/npy_header.h); errors name `where`.
NpyArray parse_npy(const unsigned char* data, size_t size, const std::string& where);
// Writes atomically (npy_writer.cpp): a failed write leaves no file, or the previous one untouched.
void write_npy(const std::string& path, DType dtype, const Shape& shape, const void* data);

}  // namespace tessera
