// The target's hidden-state rows that draft heads (Medusa's, Hawk's) read in the next round, one
// per image and half (conditional, and unconditional under CFG), kept on the heads' backend: a
// round copies them there from the target's outputs, and the next round's forward reads them
// there, with no download, upload or wait on the host between (issue 42: a round's host work).
#pragma once

#include <map>
#include <span>
#include <vector>

#include "tensor/backend.h"

namespace tessera::speculative {

class FeatureRows {
 public:
  // dim: the hidden size; cfg: two halves per image; images: how many are held at once before the
  // store grows.
  FeatureRows(Backend& backend, int dim, bool cfg, int images);
  // Image `id`'s rows become row `cond_row` of cond and, with CFG, row `uncond_row` of uncond
  // ([rows, dim] F32 tensors on the backend; uncond null without CFG).
  void put(int id, const Tensor& cond, int64_t cond_row, const Tensor* uncond, int64_t uncond_row);
  // Copies images ids[i]'s rows to rows i (cond) and, with CFG, n + i (uncond) of dst, n the
  // number of ids.
  void gather(std::span<const int> ids, Tensor& dst);
  // The image's rows are free again.
  void erase(int id);

 private:
  Tensor row(int id, int half) const;
  Backend& be_;
  int dim_, halves_;
  Tensor rows_;              // [capacity * halves, dim]: slot s's half h at row s * halves + h
  std::map<int, int> slot_;  // by image id
  std::vector<int> free_;
};

}  // namespace tessera::speculative
