// The committed pairs' target features an EAGLE drafter has not fed yet (EAGLE §3.1: each
// committed token goes in with f, the target's feature at the row that predicted it), kept on the
// drafter's backend: a round copies them there from the target's outputs, and the next catch-up
// gathers them into its inputs there, with no download, upload or wait on the host between
// (issue 42: a round's host work). Each image holds a list of rows of one table, per half
// (conditional, and unconditional under CFG); row 0 of the table is zeros, for padding rows.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <vector>

#include "tensor/backend.h"

namespace tessera::speculative {

class PendingFeatures {
 public:
  // dim: the feature size; cfg: two halves per image.
  PendingFeatures(Backend& backend, int dim, bool cfg);
  // Appends rows cond_rows[k] of cond (and, with CFG, uncond_rows[k] of uncond) to image id's
  // pending rows, in order ([rows, dim] F32 tensors on the backend; uncond null without CFG).
  void append(int id, const Tensor& cond, std::span<const int64_t> cond_rows, const Tensor* uncond,
              std::span<const int64_t> uncond_rows);
  int count(int id) const;
  // The table's row of image id's pending row k of half h.
  int32_t at(int id, int half, int k) const;
  // [capacity, dim] F32 on the backend; row 0 zeros. Valid until the next append (it grows).
  const Tensor& table() const { return rows_; }
  // Image id's pending rows are fed (or it is released): their table rows are free again. Ops
  // queued before that read them first (the backend runs its ops in order).
  void clear(int id);

 private:
  int32_t take();
  Backend& be_;
  int dim_, halves_;
  Tensor rows_;
  std::set<int32_t> free_;  // lowest first, so a run of appended rows is a run of the table's
  std::map<int, std::vector<int32_t>> held_;  // by image id: half h's k-th at [k * halves + h]
};

}  // namespace tessera::speculative
