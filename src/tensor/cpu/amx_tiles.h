// The AMX tile configuration the AMX code shares (linear_amx.cpp, peak_flops_amx.cpp); include it
// only from files compiled with -mamx-tile.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace tessera::cpu {
namespace {

// The 64-byte operand of LDTILECFG, palette 1.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Eight tiles 64 bytes wide: tiles 0-5 (accumulators and activations) of `rows` rows, tiles 6-7
// (weights: 16 k pairs) of 16.
inline void configure_tiles(int rows) {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = static_cast<uint8_t>(t >= 6 ? 16 : rows);
  }
  // GCC 12 does not see LDTILECFG read its operand and drops the stores above (seen: a config of
  // garbage rows and a SIGSEGV); the empty asm that takes the address keeps them.
  asm volatile("" : : "r"(&c) : "memory");
  _tile_loadconfig(&c);
}

}  // namespace
}  // namespace tessera::cpu
