// Element types. f16 and bf16 are storage formats: every op accumulates in f32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace tessera {

enum class DType : uint8_t {
  F32,
  F16,
  BF16,
  I32,
  I64,
  U8,
  F64
};  // F64: .npy files and raw buffers

size_t dtype_size(DType t);
const char* dtype_name(DType t);          // "f32", "f16", ...
DType parse_dtype(const std::string& s);  // accepts "f32"/"F32"/"float32", ...; throws on others

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round-to-nearest-even, as PyTorch's float -> bfloat16 cast (NaN stays NaN).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Bulk conversion of n elements of `src` (any float dtype) to f32.
void convert_to_f32(DType src_type, const void* src, float* dst, size_t n);
// Bulk conversion of n f32 values to a float storage dtype.
void convert_from_f32(const float* src, DType dst_type, void* dst, size_t n);

}  // namespace tessera
