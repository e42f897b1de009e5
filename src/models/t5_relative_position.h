// T5's relative position buckets (Raffel et al., 2020, §2.1 "Position embeddings"): each
// attention head adds a learned scalar per bucket of the key's offset from the query. Offsets
// below half a direction's buckets get one bucket each; larger ones share logarithmically wider
// buckets up to max_distance. The encoder is bidirectional: half the buckets for keys after the
// query. The arithmetic is f32 as in transformers' T5Attention._relative_position_bucket (4.44),
// so every offset lands in the bucket the reference puts it in.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>

namespace tessera {

inline int t5_relative_position_bucket(int relative_position, int num_buckets, int max_distance) {
  num_buckets /= 2;  // bidirectional
  int bucket = relative_position > 0 ? num_buckets : 0;
  const int distance = std::abs(relative_position);
  const int max_exact = num_buckets / 2;
  if (distance < max_exact) return bucket + distance;
  // max_exact + log(d / max_exact) / log(max_distance / max_exact) * (num_buckets - max_exact),
  // truncated: f32 throughout, the divisor a double rounded to f32 (a Python float scalar).
  const float log_ratio = std::log(static_cast<float>(distance) / static_cast<float>(max_exact));
  const auto divisor = static_cast<float>(
      std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  const float scaled = log_ratio / divisor * static_cast<float>(num_buckets - max_exact);
  const int large = max_exact + static_cast<int>(static_cast<int64_t>(scaled));
  return bucket + std::min(large, num_buckets - 1);
}

// The bias [heads, n, n] of n positions from the table [num_buckets, heads] (row-major, as HF's
// relative_attention_bias embedding): bias[h][q][k] = table[bucket(k - q)][h].
inline std::vector<float> t5_position_bias(const std::vector<float>& table, int heads, int n,
                                           int num_buckets, int max_distance) {
  std::vector<float> bias(static_cast<size_t>(heads) * n * n);
  for (int q = 0; q < n; ++q)
    for (int k = 0; k < n; ++k) {
      const int b = t5_relative_position_bucket(k - q, num_buckets, max_distance);
      for (int h = 0; h < heads; ++h)
        bias[(static_cast<size_t>(h) * n + q) * n + k] = table[static_cast<size_t>(b) * heads + h];
    }
  return bias;
}

}  // namespace tessera
