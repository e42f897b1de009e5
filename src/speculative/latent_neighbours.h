// Latent neighbour table B_k for LANTERN (Jang et al., 2025) §4.2, Alg. 2: for every VQ code, the
// other codes sorted by distance between codebook vectors (ℓ2, or cosine), nearest first, the
// code itself excluded. Computed once per model and cached on disk (as jadohu/LANTERN's
// entrypoints/generate_codebook.py precomputes it).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tessera::speculative {

enum class LatentMetric { L2, Cosine };

class LatentNeighbours {
 public:
  // From a codebook [V, dim] (host, row-major): the k_max nearest other codes of every code.
  // Ties in distance are broken by the smaller code index. k_max is clamped to V - 1.
  static LatentNeighbours build(std::span<const float> codebook, int V, int dim, int k_max,
                                LatentMetric metric);
  // Reads the raw codebook `quantize.embedding.weight` from model_dir/vq.safetensors (LANTERN's
  // table uses the raw, un-normalised vectors) and returns its table, loading it from the cache
  // file when one matches (same codebook checksum, metric and k >= k_max) and writing it
  // otherwise. The cache lives in model_dir when writable, else in $XDG_CACHE_HOME/tessera (or
  // ~/.cache/tessera). Errors name the file and problem.
  static LatentNeighbours for_model(const std::string& model_dir, int k_max, LatentMetric metric);

  int vocab() const { return V_; }
  int k_max() const { return k_; }
  // The nearest min(k, k_max) codes of `token`, nearest first.
  std::span<const int32_t> nearest(int token, int k) const;
  // The whole table, [V, k_max] row-major (a device copy for the device loop).
  std::span<const int32_t> table() const { return table_; }

 private:
  int V_ = 0, k_ = 0;
  std::vector<int32_t> table_;  // [V, k_]
};

}  // namespace tessera::speculative
