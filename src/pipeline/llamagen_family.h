// The LlamaGen (discrete-token) half of the public Pipeline: the target, its VQ decoder and the
// draft model of the last speculative call.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "tensor/backend.h"
#include "tessera/tessera.h"

namespace tessera {

class LlamaGenFamily {
 public:
  LlamaGenFamily(const ModelConfig& config, Backend& backend, bool load_decoder);
  ~LlamaGenFamily();

  bool has_decoder() const;
  int image_size() const;
  int64_t weight_bytes_per_step() const;
  std::vector<double> forward_seconds(int max_k, bool cfg, int repeats);
  ForwardFlops forward_flops(int k, bool cfg) const;
  std::vector<std::vector<int32_t>> generate(const std::vector<Condition>& conditions,
                                             const GenerateOptions& opts, GenerateStats* stats);
  void validate(const GenerateOptions& opts);
  std::vector<float> forward_logits(const Condition& condition, std::span<const int32_t> tokens);
  std::vector<float> decode_float(std::span<const int32_t> tokens, int n);
  std::vector<uint8_t> decode(std::span<const int32_t> tokens, int n);

 private:
  struct Prepared;
  Prepared prepare(const GenerateOptions& opts);
  struct Data;
  std::unique_ptr<Data> d_;
};

}  // namespace tessera
