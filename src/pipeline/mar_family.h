// The MAR (continuous-token) half of the public Pipeline: the MAE and diffusion head, the KL VAE
// decoder and the draft MAR of the last speculative call.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "tensor/backend.h"
#include "tessera/mar.h"

namespace tessera {

class MarFamily {
 public:
  MarFamily(const ModelConfig& config, Backend& backend, bool load_decoder);
  ~MarFamily();

  bool has_decoder() const;
  int image_size() const;
  std::vector<std::vector<float>> generate(const std::vector<int>& labels,
                                           const MarGenerateOptions& opts, MarStats* stats);
  std::vector<float> forward_z(int label, std::span<const float> tokens,
                               std::span<const uint8_t> unknown);
  std::vector<float> decode_float(std::span<const float> tokens, int n);
  std::vector<uint8_t> decode(std::span<const float> tokens, int n);

 private:
  struct Data;
  std::unique_ptr<Data> d_;
};

}  // namespace tessera
