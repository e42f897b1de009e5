// The emoji classifier that measures the emoji family (python/emoji/classifier.py): a small CNN
// over 64x64 RGB, average-pooled to 32x32, then per width Conv3x3-BN-ReLU-Conv3x3-BN-ReLU-MaxPool2,
// a global spatial mean (the penultimate features the Frechet distance uses) and a linear head
// over the classes. BatchNorm (eval mode) is folded into the convolutions at load.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tensor/backend.h"

namespace tessera {

// classifier.json: {"num_classes": N, "widths": [32, 64, 128, 256]} (python/emoji/classifier.py's
// save()); optional "batchnorm_eps" (PyTorch's default 1e-5, which save() does not record).
struct EmojiClassifierConfig {
  int num_classes = 0;
  std::vector<int> widths;
  double batchnorm_eps = 1e-5;
  int image_size = 64;  // fixed by the architecture's input (to_input in classifier.py)
};

EmojiClassifierConfig read_emoji_classifier_config(const std::string& dir);

class EmojiClassifier {
 public:
  // DIR/classifier.json and DIR/classifier.safetensors; shapes are checked against the json.
  EmojiClassifier(const std::string& dir, Backend& backend, bool check_weights = true);

  const EmojiClassifierConfig& config() const { return cfg_; }
  int feature_dim() const { return cfg_.widths.back(); }
  int num_classes() const { return cfg_.num_classes; }

  struct Output {
    std::vector<float> features;  // [n, feature_dim()]
    std::vector<float> logits;    // [n, num_classes()]
  };
  // pixels: n images, NHWC uint8 [n, 64, 64, 3]. Images are run in chunks of `chunk` (memory is
  // bounded; an image's outputs do not depend on the chunk: the ops work per image).
  Output run(std::span<const uint8_t> pixels, int n, int chunk = 64) const;

 private:
  struct Conv {
    Tensor w, b;  // BN folded: f32 [O, C, 3, 3], [O]
  };
  void run_chunk(const uint8_t* pixels, int n, float* features, float* logits) const;

  EmojiClassifierConfig cfg_;
  Backend& backend_;
  std::vector<Conv> convs_;  // two per width
  Tensor head_w_, head_b_;
};

}  // namespace tessera
