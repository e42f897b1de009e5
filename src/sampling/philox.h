// Philox4x32-10 (Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2, 3"; Random123's
// philox.h) and the 53-bit uniform of CounterRng, on plain arrays so that host and device draw the
// same bits for the same (seed, image, token, stream).
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace tessera {

struct Philox4x32Block {
  uint32_t v[4];
};

// Ten rounds of the Philox S-box with the Random123 multipliers and Weyl key increments.
TESSERA_HD inline Philox4x32Block philox4x32_10(Philox4x32Block ctr, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr.v[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr.v[2];
    const Philox4x32Block next = {
        {static_cast<uint32_t>(p1 >> 32) ^ ctr.v[1] ^ key0, static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ ctr.v[3] ^ key1, static_cast<uint32_t>(p0)}};
    ctr = next;
    key0 += kW0;
    key1 += kW1;
  }
  return ctr;
}

// The block CounterRng::uniform(token, stream) draws from: counter (token, stream, image lo, hi),
// key (seed lo, hi).
TESSERA_HD inline Philox4x32Block philox_draw(uint64_t seed, uint64_t image, uint32_t token,
                                              uint32_t stream) {
  const Philox4x32Block ctr = {
      {token, stream, static_cast<uint32_t>(image), static_cast<uint32_t>(image >> 32)}};
  return philox4x32_10(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Uniform double in [0, 1) with 53 random bits from the first two words.
TESSERA_HD inline double uniform53(const Philox4x32Block& r) {
  const uint64_t bits =
      (static_cast<uint64_t>(r.v[0]) << 21) ^ (static_cast<uint64_t>(r.v[1]) >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

TESSERA_HD inline double counter_uniform(uint64_t seed, uint64_t image, uint32_t token,
                                         uint32_t stream) {
  return uniform53(philox_draw(seed, image, token, stream));
}

}  // namespace tessera
