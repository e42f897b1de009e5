// What the hawk methods ask of Hawk's heads (drafters/hawk_drafter.h): how many of each kind to
// draft with and how many candidates to draw from each pool member.
#pragma once

namespace tessera::speculative {

struct HawkOptions {
  static constexpr int kAll = -1;  // every head of that kind the heads directory has
  int horizontal = kAll;           // horizontal heads used (0: Hawk with vertical heads only)
  int vertical = kAll;             // vertical depths used
  int samples = 1;                 // candidates drawn from each pool member
  // false (the paper's Eq. 6): candidates drawn from each member's q and verified against it;
  // true: each member's most likely tokens, distinct within a pool, with one-hot q (Medusa's
  // deterministic candidates, which Hawk builds on); both lossless.
  bool top = false;
  bool operator==(const HawkOptions&) const = default;
};

}  // namespace tessera::speculative
