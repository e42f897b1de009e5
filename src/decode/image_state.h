// One image being generated: its condition, random stream, KV slots and committed tokens. A
// generation (decode/decoder.h) holds one per image; an image's result depends only on
// (models, settings, seed, image index), never on the images generated beside it.
#pragma once

#include <cstdint>
#include <vector>

#include "sampling/rng.h"
#include "sampling/sampler.h"
#include "tessera/tessera.h"

namespace tessera {

struct ImageState {
  int id = 0;  // position in the generation, stable while the image lives
  Condition condition;
  CounterRng rng{0, 0};
  // This image's sampling settings (its request's): every distribution of the image, the
  // target's and the drafts', uses them. Guidance on or off and greedy or not are its decoder's
  // (they shape the batch: the unconditional slots, the drafters' trees).
  SamplingParams sampling;
  int slot = -1;                // KV slot of the conditional sequence
  int uncond_slot = -1;         // KV slot of the unconditional (CFG) sequence; -1 without guidance
  std::vector<int32_t> tokens;  // committed tokens, raster order
  int64_t round = 0;            // decoding rounds after the prefill
  bool prefilled = false, done = false;
  ImageStats stats;
};

}  // namespace tessera
