// The random streams of speculative decoding: every draw is CounterRng::uniform(token index,
// stream_id(...)) (sampling/philox.h), a pure function of (seed, image, token, stream), so the CPU
// loop and a device kernel draw the same uniforms for the same decision.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace tessera::speculative {

// Vanilla draws use stream 0, so the first token (drawn after the prefill) is the same for every
// method. Speculative draws are keyed by the token index they concern, the round and the sibling
// rank, so no uniform is ever reused for a second decision.
enum class Stream : uint32_t {
  Accept = 1,
  Resample = 2,
  Draft = 3,
  JacobiInit = 4,
  JacobiCarry = 5
};

TESSERA_HD inline uint32_t stream_id(Stream s, int64_t round, int sibling = 0) {
  return static_cast<uint32_t>(s) | (static_cast<uint32_t>(sibling & 0xff) << 4) |
         (static_cast<uint32_t>(round + 1) << 12);
}

}  // namespace tessera::speculative
