// The lanes a walk's passes over a vocabulary row run on (verify_rows.h). The walk itself is
// serial (siblings in order, each test deciding the next), but each test, residual, normalisation
// and draw is a pass over V entries. SerialLanes runs each pass as the plain loop: the CPU's walk
// and any single thread. A GPU block runs them spread over its threads (cuda/block_lanes.cuh),
// every thread following the same walk from the same broadcast results. A Lanes type provides:
//   each(n, f)     f(i) for every i < n; its writes are visible to every lane afterwards
//   one(f)         f() once (a sparse write); visible to every lane afterwards
//   sum(v, n)      Σ v[i] in double
//   sum_of(n, f)   Σ f(i) in double (f a double of entry i: typical acceptance's entropy terms)
//   argmax(v, n)   the first index of the largest v[i]
//   draw(v, n, u)  the inverse-CDF draw in index order (draw_row; -1 for an all-zero row)
//   best(n, keep, better)  the i < n with keep(i) that no other kept j is better than (better: a
//                  strict total order, so the result is the same however the pass is split), or
//                  -1 when none is kept (GSD's neighbours in its ranking)
#pragma once

#include "common/host_device.h"
#include "sampling/sampling_rules.h"

namespace tessera::speculative {

// A block's lanes (cuda/block_lanes.cuh) split a pass into contiguous chunks, so that lane order
// is index order: lane t of `lanes` takes [*begin, *end) of n entries.
TESSERA_HD inline void lane_chunk(int t, int lanes, int n, int* begin, int* end) {
  const int per = (n + lanes - 1) / lanes;
  const int b = t * per < n ? t * per : n;
  *begin = b;
  *end = b + per < n ? b + per : n;
}

// A chunk's Σ f(i) in double, in index order.
template <class F>
TESSERA_HD double chunk_sum_of(F&& f, int begin, int end) {
  double part = 0.0;
  for (int i = begin; i < end; ++i) part += f(i);
  return part;
}

// A chunk's Σ v[i] in double, in index order.
TESSERA_HD inline double chunk_sum(const float* v, int begin, int end) {
  return chunk_sum_of([v](int i) { return static_cast<double>(v[i]); }, begin, end);
}

// best()'s pass over a chunk, from `found` (an index or -1).
template <class Keep, class Better>
TESSERA_HD int chunk_best(Keep&& keep, Better&& better, int begin, int end, int found) {
  for (int i = begin; i < end; ++i)
    if (keep(i) && (found < 0 || better(i, found))) found = i;
  return found;
}

// A chunk's first largest value by argmax's rule into (*best, *best_index), which start at
// (-inf, INT_MAX): the block's argmax is then the smallest index holding the largest best.
TESSERA_HD inline void chunk_argmax(const float* v, int begin, int end, float* best,
                                    int* best_index) {
  for (int i = begin; i < end; ++i)
    if (argmax_prefers(v[i], i, *best, *best_index)) *best = v[i], *best_index = i;
}

struct SerialLanes {
  template <class F>
  TESSERA_HD void each(int n, F&& f) const {
    for (int i = 0; i < n; ++i) f(i);
  }
  template <class F>
  TESSERA_HD void one(F&& f) const {
    f();
  }
  TESSERA_HD double sum(const float* v, int n) const { return chunk_sum(v, 0, n); }
  template <class F>
  TESSERA_HD double sum_of(int n, F&& f) const {
    return chunk_sum_of(f, 0, n);
  }
  TESSERA_HD int argmax(const float* v, int n) const { return argmax_row(v, n); }
  TESSERA_HD int draw(const float* v, int n, double u) const { return draw_row(v, n, u); }
  template <class Keep, class Better>
  TESSERA_HD int best(int n, Keep&& keep, Better&& better) const {
    return chunk_best(keep, better, 0, n, -1);
  }
};

// normalise_row on lanes: v divided by its double total; false, v untouched, when the total is
// not positive.
template <class Lanes>
TESSERA_HD bool normalise_on(const Lanes& lanes, float* v, int n) {
  const double total = lanes.sum(v, n);
  if (!(total > 0.0)) return false;
  const double inv = 1.0 / total;
  lanes.each(n, [&](int i) { v[i] = static_cast<float>(v[i] * inv); });
  return true;
}

}  // namespace tessera::speculative
