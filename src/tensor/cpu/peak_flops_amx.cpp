// The AMX side of the peak probe (peak_flops.h), compiled with the AMX flags as linear_amx.cpp is
// and run only where amx_bf16_available().
#include <immintrin.h>

#include <cstdint>

#include "tensor/cpu/amx_tiles.h"
#include "tensor/cpu/peak_flops.h"

namespace tessera {

double amx_bf16_tile_flops(int64_t iterations) {
  // Four accumulator tiles, as in the linear kernel's two-row-tile passes, so that each
  // TDPBF16PS waits on its own accumulator only every fourth instruction.
  alignas(64) static const uint16_t kZeros[16 * 32] = {};  // the values do not matter
  cpu::configure_tiles(16);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, kZeros, 64);
  _tile_loadd(5, kZeros, 64);
  _tile_loadd(6, kZeros, 64);
  _tile_loadd(7, kZeros, 64);
  for (int64_t i = 0; i < iterations; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_release();
  // Each: 16 x 16 outputs, 32 products and 32 adds into each.
  return 4.0 * 16 * 16 * 32 * 2 * static_cast<double>(iterations);
}

}  // namespace tessera
