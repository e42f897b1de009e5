#include "tensor/tensor.h"

#include "tessera/error.h"

namespace tessera {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    check(d >= 0, [&] { return "negative dimension in shape " + shape_str(s); });
    // Shapes come from files: refuse sizes whose bytes could not be addressed.
    if (__builtin_mul_overflow(n, d, &n) || n > (int64_t{1} << 56))
      throw Error("shape " + shape_str(s) + " is too large");
  }
  return n;
}

Tensor Tensor::view(Shape new_shape) const {
  check(layout == Layout::RowMajor, "internal: a packed weight has no views");
  check(shape_numel(new_shape) == numel(), [&] {
    return "internal: cannot view " + shape_str(shape) + " as " + shape_str(new_shape);
  });
  Tensor t = *this;
  t.shape = std::move(new_shape);
  return t;
}

Tensor Tensor::bytes_as(size_t offset, DType dtype_, Shape shape_) const {
  check(layout == Layout::RowMajor, "internal: a packed weight has no views");
  Tensor t = *this;
  t.dtype = dtype_;
  t.shape = std::move(shape_);
  check(offset + t.nbytes() <= nbytes(), [&] {
    return "internal: " + std::to_string(t.nbytes()) + " bytes at " + std::to_string(offset) +
           " outside a tensor of " + std::to_string(nbytes());
  });
  t.data = static_cast<char*>(data) + offset;
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t count) const {
  check(layout == Layout::RowMajor, "internal: a packed weight has no row views");
  check(!shape.empty() && begin >= 0 && count >= 0 && begin + count <= shape[0],
        [&] { return "internal: rows out of range of " + shape_str(shape); });
  Tensor t = *this;
  t.shape[0] = count;
  const int64_t row_elems = shape[0] ? numel() / shape[0] : 0;
  t.data = static_cast<char*>(data) + static_cast<size_t>(begin * row_elems) * dtype_size(dtype);
  return t;
}

}  // namespace tessera
