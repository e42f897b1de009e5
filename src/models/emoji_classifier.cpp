#include "models/emoji_classifier.h"

#include <cmath>
#include <filesystem>

#include "io/regular_file.h"
#include "io/strict_json.h"
#include "models/weights.h"
#include "tessera/error.h"

namespace tessera {

EmojiClassifierConfig read_emoji_classifier_config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "classifier.json").string();
  const nlohmann::json j = parse_strict_json(read_small_file(path, 1 << 16), path);
  EmojiClassifierConfig c;
  check(j.is_object(), path + ": expected a JSON object");
  for (const auto& [key, value] : j.items())
    check(key == "num_classes" || key == "widths" || key == "batchnorm_eps",
          path + ": unknown key \"" + key + "\" (expected num_classes, widths, batchnorm_eps)");
  check(j.contains("num_classes") && j["num_classes"].is_number_integer() &&
            j["num_classes"].get<int64_t>() >= 1 && j["num_classes"].get<int64_t>() <= 1000000,
        path + ": \"num_classes\" must be an integer in [1, 1000000]");
  c.num_classes = j["num_classes"].get<int>();
  check(j.contains("widths") && j["widths"].is_array() && !j["widths"].empty(),
        path + ": \"widths\" must be a non-empty array of channel counts");
  for (const auto& w : j["widths"]) {
    check(w.is_number_integer() && w.get<int64_t>() >= 1 && w.get<int64_t>() <= 65536,
          path + ": every entry of \"widths\" must be an integer in [1, 65536]");
    c.widths.push_back(w.get<int>());
  }
  // 64 -> 32 (input pool), then halved per width: the last level must keep at least one pixel.
  check(c.widths.size() <= 5, path + ": " + std::to_string(c.widths.size()) +
                                  " widths halve the 32x32 input below one pixel (at most 5)");
  if (j.contains("batchnorm_eps")) {
    check(j["batchnorm_eps"].is_number() && j["batchnorm_eps"].get<double>() > 0,
          path + ": \"batchnorm_eps\" must be a positive number");
    c.batchnorm_eps = j["batchnorm_eps"].get<double>();
  }
  return c;
}

EmojiClassifier::EmojiClassifier(const std::string& dir, Backend& backend, bool check_weights)
    : cfg_(read_emoji_classifier_config(dir)), backend_(backend) {
  const std::string path = (std::filesystem::path(dir) / "classifier.safetensors").string();
  WeightLoader w(path, DType::F32, backend, check_weights);
  // nn.Sequential indices of python/emoji/classifier.py: 0 is the input AvgPool2d, then 7 modules
  // per width (conv, bn, relu, conv, bn, relu, maxpool).
  int64_t in = 3;
  for (size_t k = 0; k < cfg_.widths.size(); ++k) {
    const int64_t out = cfg_.widths[k];
    for (int half = 0; half < 2; ++half) {
      const int conv_idx = 1 + 7 * static_cast<int>(k) + 3 * half;
      const std::string conv = "body." + std::to_string(conv_idx),
                        bn = "body." + std::to_string(conv_idx + 1);
      const std::vector<float> wt = download_f32(backend, w.f32(conv + ".weight", {out, in, 3, 3}));
      const std::vector<float> bias = download_f32(backend, w.f32(conv + ".bias", {out}));
      const std::vector<float> gamma = download_f32(backend, w.f32(bn + ".weight", {out}));
      const std::vector<float> beta = download_f32(backend, w.f32(bn + ".bias", {out}));
      const std::vector<float> mean = download_f32(backend, w.f32(bn + ".running_mean", {out}));
      const std::vector<float> var = download_f32(backend, w.f32(bn + ".running_var", {out}));
      // Eval-mode BN is y = (x - mean) / sqrt(var + eps) * gamma + beta: a per-channel affine map,
      // so it folds into the conv (one op less per layer; the difference is f32 rounding).
      std::vector<float> wf(wt.size()), bf(out);
      const int64_t per_out = in * 9;
      for (int64_t o = 0; o < out; ++o) {
        check(var[o] >= 0, path + ": tensor '" + bn + ".running_var' has a negative variance");
        const double s = gamma[o] / std::sqrt(static_cast<double>(var[o]) + cfg_.batchnorm_eps);
        for (int64_t i = 0; i < per_out; ++i)
          wf[o * per_out + i] = static_cast<float>(wt[o * per_out + i] * s);
        bf[o] = static_cast<float>((bias[o] - static_cast<double>(mean[o])) * s + beta[o]);
      }
      convs_.push_back({backend.upload(wf.data(), DType::F32, {out, in, 3, 3}),
                        backend.upload(bf.data(), DType::F32, {out})});
      in = out;
    }
  }
  head_w_ = backend_.pack_linear_weight(w.f32("head.weight", {cfg_.num_classes, in}));
  head_b_ = w.f32("head.bias", {cfg_.num_classes});
  w.finish();
}

EmojiClassifier::Output EmojiClassifier::run(std::span<const uint8_t> pixels, int n,
                                             int chunk) const {
  const int64_t S = cfg_.image_size, per_image = S * S * 3;
  check(n >= 0 && static_cast<int64_t>(pixels.size()) == n * per_image,
        "classifier: expected " + std::to_string(n) + " images of " + std::to_string(S) + "x" +
            std::to_string(S) + "x3 bytes (" + std::to_string(n * per_image) + "), got " +
            std::to_string(pixels.size()) + " bytes");
  check(chunk >= 1, "classifier: chunk must be >= 1");
  Output out;
  out.features.resize(static_cast<size_t>(n) * feature_dim());
  out.logits.resize(static_cast<size_t>(n) * num_classes());
  for (int i = 0; i < n; i += chunk) {
    const int m = std::min(chunk, n - i);
    run_chunk(pixels.data() + i * per_image, m,
              out.features.data() + static_cast<size_t>(i) * feature_dim(),
              out.logits.data() + static_cast<size_t>(i) * num_classes());
  }
  return out;
}

void EmojiClassifier::run_chunk(const uint8_t* pixels, int n, float* features,
                                float* logits) const {
  const int64_t S = cfg_.image_size, plane = S * S;
  // to_input(): NHWC uint8 -> NCHW f32, x / 127.5 - 1 (in f32, as torch computes it).
  std::vector<float> x(static_cast<size_t>(n) * 3 * plane);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t p = 0; p < plane; ++p)
      for (int64_t c = 0; c < 3; ++c)
        x[(b * 3 + c) * plane + p] =
            static_cast<float>(pixels[(b * plane + p) * 3 + c]) / 127.5f - 1.0f;
  Tensor h = backend_.upload(x.data(), DType::F32, {n, 3, S, S});
  int64_t side = S / 2;
  Tensor pooled = backend_.empty(DType::F32, {n, 3, side, side});
  backend_.avg_pool2x2(h, pooled);
  h = pooled;
  for (size_t k = 0; k < cfg_.widths.size(); ++k) {
    const int64_t width = cfg_.widths[k];
    for (int half = 0; half < 2; ++half) {
      const Conv& cv = convs_[2 * k + half];
      Tensor y = backend_.empty(DType::F32, {n, width, side, side});
      backend_.conv2d(h, cv.w, cv.b, 1, y);
      backend_.relu(y);
      h = y;
    }
    side /= 2;
    Tensor y = backend_.empty(DType::F32, {n, width, side, side});
    backend_.max_pool2x2(h, y);
    h = y;
  }
  // Global mean over H, W as one matmul with a column of ones: [1, n*C, HW] x [1, HW, 1].
  const int64_t C = feature_dim(), HW = side * side;
  const std::vector<float> ones(static_cast<size_t>(HW), 1.0f);
  Tensor feat = backend_.empty(DType::F32, {1, n * C, 1});
  backend_.batched_matmul(h.view({1, n * C, HW}), false,
                          backend_.upload(ones.data(), DType::F32, {1, HW, 1}), false,
                          1.0f / static_cast<float>(HW), feat);
  Tensor f2 = feat.view({n, C});
  Tensor lg = backend_.empty(DType::F32, {n, cfg_.num_classes});
  backend_.linear(f2, head_w_, &head_b_, lg);
  backend_.download(f2, features);
  backend_.download(lg, logits);
}

}  // namespace tessera
