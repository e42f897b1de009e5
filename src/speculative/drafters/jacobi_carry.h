// SJD's carry-over draw (Speculative Jacobi Decoding, Teng et al., 2025; GSD, So et al., 2025,
// Alg. 4): after a rejection at depth d, the window's positions past it keep a sample of the
// target's distribution there as the next round's draft. One TESSERA_HD function, so that
// JacobiDrafter's host draws and the device loop's (verify_images) are the same arithmetic.
#pragma once

#include <cstdint>

#include "common/host_device.h"
#include "sampling/philox.h"
#include "sampling/sampling_rules.h"
#include "speculative/streams.h"

namespace tessera::speculative {

// The draw for the position of token index `token_index` from p (V entries, normalised), in the
// image's stream (seed, image) at (token_index, (JacobiCarry, round)); greedy: p's argmax.
TESSERA_HD inline int32_t jacobi_carry_token(const float* p, int V, bool greedy, uint64_t seed,
                                             uint64_t image, uint32_t token_index, int64_t round) {
  if (greedy) return argmax_row(p, V);
  return draw_row(p, V,
                  counter_uniform(seed, image, token_index, stream_id(Stream::JacobiCarry, round)));
}

}  // namespace tessera::speculative
