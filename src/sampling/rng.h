// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011). A draw is a pure function of
// (seed, image index, token index, stream), so a result never depends on batch size, thread
// count or the order in which images are generated.
#pragma once

#include <array>
#include <cstdint>

namespace tessera {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

class CounterRng {
 public:
  CounterRng(uint64_t seed, uint64_t image_index) : seed_(seed), image_(image_index) {}
  // Uniform double in [0, 1) with 53 random bits, for (token index, stream).
  double uniform(uint32_t token, uint32_t stream = 0) const;
  uint64_t seed() const { return seed_; }
  uint64_t image_index() const { return image_; }

 private:
  uint64_t seed_, image_;
};

}  // namespace tessera
