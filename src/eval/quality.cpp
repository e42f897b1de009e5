// QualityModel: the public face of the classifier (models/emoji_classifier.h). It runs on the CPU
// (through the device factory) whatever device the pipeline uses: it scores a few images, and its
// figures then do not depend on the device.
#include <algorithm>

#include "models/emoji_classifier.h"
#include "tensor/device.h"
#include "tessera/error.h"
#include "tessera/quality.h"

namespace tessera {

struct QualityModel::Impl {
  EmojiClassifier classifier;
};

QualityModel::QualityModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
QualityModel::~QualityModel() = default;

std::unique_ptr<QualityModel> QualityModel::load(const std::string& dir, bool check_weights) {
  auto impl = std::make_unique<Impl>(Impl{EmojiClassifier(dir, backend_for(Device::cpu()), check_weights)});
  return std::unique_ptr<QualityModel>(new QualityModel(std::move(impl)));
}

int QualityModel::num_classes() const {
  return impl_->classifier.num_classes();
}
int QualityModel::feature_dim() const {
  return impl_->classifier.feature_dim();
}
int QualityModel::image_size() const {
  return impl_->classifier.config().image_size;
}

QualityModel::Output QualityModel::run(std::span<const uint8_t> pixels, int n) const {
  auto o = impl_->classifier.run(pixels, n);
  return {std::move(o.features), std::move(o.logits)};
}

std::vector<float> QualityModel::features(std::span<const uint8_t> pixels, int n) const {
  return run(pixels, n).features;
}

std::vector<float> QualityModel::logits(std::span<const uint8_t> pixels, int n) const {
  return run(pixels, n).logits;
}

ScoredImages QualityModel::score(std::vector<uint8_t> pixels, int n,
                                 std::vector<int> requested) const {
  check(static_cast<int64_t>(requested.size()) == n, "score: " + std::to_string(requested.size()) +
                                                         " requested classes for " +
                                                         std::to_string(n) + " images");
  for (int c : requested)
    check(c >= -1 && c < num_classes(), "score: requested class " + std::to_string(c) +
                                            " is outside the classifier's [0, " +
                                            std::to_string(num_classes()) + ")");
  Output o = run(pixels, n);
  ScoredImages s;
  s.n = n;
  s.image_size = image_size();
  s.feature_dim = feature_dim();
  s.requested = std::move(requested);
  s.predicted.resize(static_cast<size_t>(n));
  const int C = num_classes();
  for (int i = 0; i < n; ++i) {
    const float* row = o.logits.data() + static_cast<size_t>(i) * C;
    // First maximum, as torch.argmax / topk report ties.
    s.predicted[i] = static_cast<int>(std::max_element(row, row + C) - row);
  }
  s.features = std::move(o.features);
  s.pixels = std::move(pixels);
  return s;
}

}  // namespace tessera
