// Loads named weights from a safetensors file onto a backend, validating each name, shape and
// dtype against what the model expects, and reporting exactly what is wrong.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "tensor/backend.h"

namespace tessera {

// Process-wide totals of the NaN/Inf scan at load (for the load report: the scan reads every
// weight once, so its cost is measured and shown).
struct WeightCheckTotals {
  int64_t bytes = 0;
  double seconds = 0.0;
};
WeightCheckTotals weight_check_totals();

class WeightLoader {
 public:
  // check_finite: every tensor the model takes is scanned for NaN/Inf (an error names it).
  WeightLoader(const std::string& path, DType expected_dtype, Backend& backend,
               bool check_finite = true);

  // A matrix used as stored (memory-mapped on the CPU): must have `shape` and the file's dtype.
  Tensor matrix(const std::string& name, const Shape& shape);
  // The weight of a linear layer: a matrix() in the layout the backend's linear reads fastest
  // (Backend::pack_linear_weight; on the CPU a copy in panels, not the file mapping).
  Tensor linear(const std::string& name, const Shape& shape);
  // Linear layers that read the same input, each of shape `each` ([N, K]), stacked by output rows
  // into one [names.size() * N, K] weight: one kernel call computes all of them, in order.
  Tensor linear_stacked(const std::vector<std::string>& names, const Shape& each);
  // Columns [begin, begin + width) of the linear weight `name` of shape `shape` ([N, K]), as the
  // weight of a linear layer of its own ([N, width]): the halves of a layer that reads two
  // concatenated inputs (EAGLE's fc over [embedding, feature]), applied to each input apart.
  Tensor linear_columns(const std::string& name, const Shape& shape, int64_t begin, int64_t width);
  // A tensor converted to f32 (norm weights, biases, small tables): any float dtype.
  Tensor f32(const std::string& name, const Shape& shape);
  // After loading: throws when the file holds tensors the model does not use.
  void finish();

  const std::string& path() const { return file_.path(); }

 private:
  const SafeTensorInfo& lookup(const std::string& name, const Shape& shape);
  Tensor adopt(const SafeTensorInfo& info);
  // Drops the file's resident pages of a tensor the backend holds a copy of (MappedFile::release).
  void release(const std::string& name);
  SafeTensorsFile file_;
  DType expected_;
  Backend& backend_;
  bool check_finite_;
  std::set<std::string> used_;
};

}  // namespace tessera
