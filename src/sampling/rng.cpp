#include "sampling/rng.h"

#include "sampling/philox.h"

namespace tessera {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  const Philox4x32Block r = philox4x32_10({{ctr[0], ctr[1], ctr[2], ctr[3]}}, key[0], key[1]);
  return {r.v[0], r.v[1], r.v[2], r.v[3]};
}

double CounterRng::uniform(uint32_t token, uint32_t stream) const {
  return counter_uniform(seed_, image_, token, stream);
}

}  // namespace tessera
