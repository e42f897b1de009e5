// The ancestor mask of a draft tree verified in one forward (SpecInfer's tree attention, EAGLE's
// tree_mask), computed where the backend runs from one parent index per new row: the session
// uploads rows ints instead of rows x (past + new) mask bytes (issue 41), and the CPU backend,
// the CUDA kernel and the tests share this one definition.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace tessera {

// Whether new row j of a sequence with `past` cached slots may attend to cache slot `key`: every
// past slot, and among the new rows (slots past + a) itself and its ancestors. parents[a] is new
// row a's parent among the new rows (-1: it hangs below the past), with parents[a] < a.
TESSERA_HD inline uint8_t tree_mask_entry(const int32_t* parents, int past, int j, int key) {
  if (key < past) return 1;
  const int a = key - past;
  // Ancestors only decrease, so the walk stops below a; the bounds keep a malformed parents array
  // (a parent after its child, or itself) from reading out of range or looping.
  for (int u = j, steps = 0; u >= a && u <= j && steps <= j; u = parents[u], ++steps)
    if (u == a) return 1;
  return 0;
}

}  // namespace tessera
