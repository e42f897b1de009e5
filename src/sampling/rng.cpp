#include "sampling/rng.h"

namespace tessera {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
    key[0] += kW0;
    key[1] += kW1;
  }
  return ctr;
}

double CounterRng::uniform(uint32_t token, uint32_t stream) const {
  const auto r = philox4x32(
      {token, stream, static_cast<uint32_t>(image_), static_cast<uint32_t>(image_ >> 32)},
      {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)});
  const uint64_t bits = (static_cast<uint64_t>(r[0]) << 21) ^ (static_cast<uint64_t>(r[1]) >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

}  // namespace tessera
