#include "tensor/dtype.h"

#include <cmath>

#include "tessera/error.h"

namespace tessera {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::F16:
      return 2;
    case DType::BF16:
      return 2;
    case DType::I32:
      return 4;
    case DType::I64:
      return 8;
    case DType::U8:
      return 1;
    case DType::F64:
      return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::F16:
      return "f16";
    case DType::BF16:
      return "bf16";
    case DType::I32:
      return "i32";
    case DType::I64:
      return "i64";
    case DType::U8:
      return "u8";
    case DType::F64:
      return "f64";
  }
  return "?";
}

DType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "F32" || s == "float32") return DType::F32;
  if (s == "f16" || s == "F16" || s == "float16") return DType::F16;
  if (s == "bf16" || s == "BF16" || s == "bfloat16") return DType::BF16;
  if (s == "i32" || s == "I32" || s == "int32") return DType::I32;
  if (s == "i64" || s == "I64" || s == "int64") return DType::I64;
  if (s == "u8" || s == "U8" || s == "uint8") return DType::U8;
  throw Error("unknown dtype '" + s + "' (expected f32, f16 or bf16)");
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: value = mant * 2^-24
      float f = std::ldexp(static_cast<float>(mant), -24);
      std::memcpy(&u, &f, 4);
      u |= sign;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00;   // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00;  // overflow to inf (rounds past 65504)
  if (a < 0x38800000u) {                       // subnormal or zero in f16
    float af;
    std::memcpy(&af, &a, 4);
    // nearbyint under the default round-to-nearest-even mode
    return sign | static_cast<uint16_t>(std::nearbyint(af * 16777216.0f));
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);  // rebias, round to nearest even
  return sign | static_cast<uint16_t>(r >> 13);
}

void convert_to_f32(DType src_type, const void* src, float* dst, size_t n) {
  switch (src_type) {
    case DType::F32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::F16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::F64: {
      for (size_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, static_cast<const char*>(src) + 8 * i, 8);
        dst[i] = static_cast<float>(v);
      }
      return;
    }
    default:
      throw Error(std::string("cannot convert ") + dtype_name(src_type) + " to f32");
  }
}

void convert_from_f32(const float* src, DType dst_type, void* dst, size_t n) {
  switch (dst_type) {
    case DType::F32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::BF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::F16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    default:
      throw Error(std::string("cannot convert f32 to ") + dtype_name(dst_type));
  }
}

}  // namespace tessera
