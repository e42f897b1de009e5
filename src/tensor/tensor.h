// A tensor is a typed, contiguous, row-major view of memory owned by a backend. Model code only
// passes tensors to Backend ops; it never reads their memory (device backends keep it on the
// device). Host access goes through Backend::download / upload.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace tessera {

class Backend;

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);  // "[2, 3]"
int64_t shape_numel(const Shape& s);

// How a tensor's elements lie in memory. Packed: a linear weight [N, K] in the backend's own
// layout for Backend::linear (Backend::pack_linear_weight); only linear reads it.
enum class Layout : uint8_t { RowMajor, Packed };

struct Tensor {
  DType dtype = DType::F32;
  Layout layout = Layout::RowMajor;
  Shape shape;
  void* data = nullptr;         // backend memory (a device address for device backends)
  std::shared_ptr<void> owner;  // keeps the allocation or file mapping alive
  Backend* backend = nullptr;

  bool defined() const { return data != nullptr || numel() == 0; }
  int64_t numel() const { return shape_numel(shape); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int ndim() const { return static_cast<int>(shape.size()); }
  int64_t dim(int i) const { return shape.at(i < 0 ? shape.size() + i : i); }

  // Same memory, another shape with the same element count.
  Tensor view(Shape new_shape) const;
  // Rows [begin, begin+count) of the first dimension (contiguous sub-tensor).
  Tensor rows(int64_t begin, int64_t count) const;
  // A tensor of another dtype and shape inside this one's bytes, from byte `offset` (one buffer
  // holding several small arrays, e.g. a round's host traffic moved in one copy).
  Tensor bytes_as(size_t offset, DType dtype, Shape shape) const;

  // Typed pointer for backend kernels that run on the host (CPU backend, tests).
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
};

}  // namespace tessera
