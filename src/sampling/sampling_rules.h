// The per-row rules of sampler.cpp (target_distribution, sample_index, argmax) as TESSERA_HD
// pieces on raw pointers, shared by the CPU sampler and the CUDA sampling kernel
// (sampling/cuda/sample_kernels.cu), so both apply one rule and differ only in how sums are
// reduced. Top-k and top-p are radix searches over order-preserving float keys, 4 bits a pass: the
// kernel reduces each pass's 16-bin histogram block-wide and calls the pick functions below on it.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/host_device.h"
#include "common/rounding.h"

namespace tessera {

// uncond + (cond - uncond) * scale, rounded after the multiply: the C++ build does not contract
// (-ffp-contract=off), nvcc would fuse into an fma by default, so the device spells out the
// roundings.
TESSERA_HD inline float guided_logit(float cond, float uncond, float scale) {
  return add_rn(uncond, mul_rn(sub_rn(cond, uncond), scale));
}

// Whether image token t (0-based) is guided (SamplingParams::guided): LlamaGen's loop index for
// token t >= 1 is t - 1, and guidance stops after index cfg_interval (> -1); token 0, from the
// prefill, is always guided.
TESSERA_HD inline bool guided_at(bool uses_cfg, float cfg_interval, uint32_t token_index) {
  return uses_cfg && (token_index == 0 || cfg_interval <= -1.0f ||
                      static_cast<float>(token_index - 1) <= cfg_interval);
}

// The divisor target_distribution applies (temperature > 0; 0 is greedy).
TESSERA_HD inline float temperature_divisor(float temperature) {
  return temperature > 1e-5f ? temperature : 1e-5f;
}

// A drawn or ranked id as the next forward takes it: -1 (no token left with mass) becomes 0, a
// padding row's token, so that a device tree's next depth reads its inputs as they lie.
TESSERA_HD inline int32_t token_as_input(int32_t id) {
  return id < 0 ? 0 : id;
}

TESSERA_HD inline bool finite_logit(float x) {
  return x - x == 0.0f;
}  // false for NaN and +-Inf

// argmax's rule (std::max_element): a later value wins only when strictly greater.
TESSERA_HD inline bool argmax_prefers(float value, int index, float best, int best_index) {
  return value > best || (value == best && index < best_index);
}

// Weights divided by their double total (sampler.cpp's normalise, the walks' residuals); false,
// v untouched, when the total is not positive.
TESSERA_HD inline bool normalise_row(float* v, int n) {
  double total = 0.0;
  for (int i = 0; i < n; ++i) total += v[i];
  if (!(total > 0.0)) return false;
  const double inv = 1.0 / total;
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>(v[i] * inv);
  return true;
}

TESSERA_HD inline int argmax_row(const float* v, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

// --- Radix search over float order keys ---
constexpr int kRadixBits = 4, kRadixBins = 1 << kRadixBits, kRadixPasses = 32 / kRadixBits;

// Unsigned key ordered like the float (no NaN); -0 maps to +0's key since the CPU compares with <.
TESSERA_HD inline uint32_t float_order_key(float x) {
  if (x == 0.0f) x = 0.0f;
  uint32_t u;
#if defined(__CUDA_ARCH__)
  u = __float_as_uint(x);
#else
  std::memcpy(&u, &x, sizeof u);
#endif
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The float of an order key (its inverse, +0 for either zero).
TESSERA_HD inline float float_from_order_key(uint32_t key) {
  return float_from_bits((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

TESSERA_HD inline uint32_t radix_digit(uint32_t key, int pass) {
  return (key >> (32 - kRadixBits * (pass + 1))) & (kRadixBins - 1);
}
// Whether key's digits before `pass` equal prefix's.
TESSERA_HD inline bool radix_matches(uint32_t key, uint32_t prefix, int pass) {
  return pass == 0 || (key >> (32 - kRadixBits * pass)) == (prefix >> (32 - kRadixBits * pass));
}

// Top-k, one pass: counts[b] = elements matching the prefix with digit b; k_left (>= 1) is the rank
// of the k-th largest within them. Returns its digit and updates k_left. After all passes the
// prefix is the key of the k-th largest value; filter_top_k_top_p drops keys strictly below it.
TESSERA_HD inline uint32_t top_k_pick(const uint32_t* counts, uint32_t* k_left) {
  for (int b = kRadixBins - 1; b > 0; --b) {
    if (*k_left <= counts[b]) return static_cast<uint32_t>(b);
    *k_left -= counts[b];
  }
  return 0;
}

// Top-p keeps a prefix of the order (logit descending, ties by index): sorted position i survives
// iff i == 0 or the mass before it is <= top_p * total. Its last survivor has the smallest value v
// whose group starts within the budget, i.e. mass(keys > v) <= budget. One pass: counts and mass
// per digit among surviving elements matching the prefix; mass_above / count_above hold what lies
// above the prefix. Picks the lowest non-empty bin whose start is within budget (the highest
// non-empty bin when none is: position 0 always survives) and adds the bins above it.
TESSERA_HD inline uint32_t top_p_pick(const uint32_t* counts, const float* mass, float budget,
                                      float* mass_above, uint32_t* count_above) {
  int pick = -1, highest = -1;
  float m = *mass_above;
  for (int b = kRadixBins - 1; b >= 0; --b) {
    if (counts[b] == 0) continue;
    if (highest < 0) highest = b;
    if (m <= budget) pick = b;
    m += mass[b];
  }
  if (pick < 0) pick = highest < 0 ? 0 : highest;
  for (int b = kRadixBins - 1; b > pick; --b) {
    *mass_above += mass[b];
    *count_above += counts[b];
  }
  return static_cast<uint32_t>(pick);
}

// How many of the tie group at the last survivor's value (count elements, each of mass e, above
// them mass_above in count_above elements) survive, taken in index order.
TESSERA_HD inline uint32_t top_p_group_keep(float mass_above, uint32_t count_above, float e,
                                            uint32_t count, float budget) {
  uint32_t keep = 0;
  for (uint32_t r = 0; r < count; ++r)
    if ((count_above == 0 && r == 0) || mass_above + static_cast<float>(r) * e <= budget)
      keep = r + 1;
  return keep;
}

// --- Inverse-CDF draw (sample_index's rule) ---
// Walks probs[0, n) from the cumulative mass cum (double) before it: the first index whose
// cumulative mass exceeds target, zeros skipped; -1 if none. *last gets the last positive index
// walked (unchanged if none): the draw at the very top of the range when rounding leaves it unmet.
TESSERA_HD inline int draw_in_chunk(const float* probs, int n, int offset, double cum,
                                    double target, int* last) {
  for (int i = 0; i < n; ++i) {
    if (probs[i] <= 0.0f) continue;
    cum += probs[i];
    *last = offset + i;
    if (cum > target) return offset + i;
  }
  return -1;
}

// The draw over one row in vocabulary order: the CPU's sample_index; -1 for an all-zero row.
TESSERA_HD inline int draw_row(const float* probs, int n, double u) {
  double total = 0.0;
  for (int i = 0; i < n; ++i) total += probs[i];
  int last = -1;
  const int hit = draw_in_chunk(probs, n, 0, 0.0, u * total, &last);
  return hit >= 0 ? hit : last;
}

}  // namespace tessera
