// Image quality of a generation method, measured with a classifier (docs/quality.md): top-1
// accuracy of the requested class, the Frechet distance between the classifier's penultimate
// features of two image sets, and pixel diversity within a class, each with a percentile
// bootstrap interval. For the emoji family the classifier is models/emoji/classifier.
//
// Typical use (a benchmark over methods, the same classes and seeds for every method):
//   auto qm = QualityModel::load("models/emoji/classifier");
//   ScoredImages vanilla = qm->score(vanilla_pixels, n, classes);
//   ScoredImages lantern = qm->score(lantern_pixels, n, classes);
//   QualityReport r = quality_report(lantern, &vanilla);  // r.top1, r.frechet, r.diversity, r.n
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tessera {

// A statistic on the whole sample and its percentile bootstrap interval [lo, hi]. All three are
// NaN when the statistic is undefined (e.g. no reference set, or no class with two images).
struct Interval {
  static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  double value = kNaN, lo = kNaN, hi = kNaN;
  bool defined() const { return value == value; }  // not NaN
  double half_width() const { return (hi - lo) / 2; }
};

struct BootstrapOptions {
  int resamples = 1000;  // B, for top-1 and diversity
  // B for the Frechet distance: each resample is a full distance (~30 ms at n = 1000 on one
  // core of the 2-core CI machine), so fewer by default.
  int frechet_resamples = 200;
  double level = 0.95;  // central interval: the (1-level)/2 and (1+level)/2 percentiles
  uint64_t seed = 0;    // resample b draws from a counter-based stream keyed by (seed, b)
};

// One image set (one method's images) after the classifier.
struct ScoredImages {
  int n = 0;
  int image_size = 0;           // pixels per side (square RGB images)
  int feature_dim = 0;          // classifier features per image
  std::vector<int> requested;   // the class each image was generated for (-1: none)
  std::vector<int> predicted;   // the classifier's top-1 class
  std::vector<float> features;  // [n, feature_dim]: penultimate features (Frechet distance)
  std::vector<uint8_t> pixels;  // [n, image_size, image_size, 3] (pixel diversity)
};

// The shipped classifier of a model family (DIR/classifier.json + DIR/classifier.safetensors),
// run on the engine's CPU backend.
class QualityModel {
 public:
  // check_weights: scan every tensor for NaN/Inf at load, as Pipeline::load does.
  static std::unique_ptr<QualityModel> load(const std::string& dir, bool check_weights = true);
  ~QualityModel();

  int num_classes() const;
  int feature_dim() const;
  int image_size() const;  // the input it takes (64 for the emoji classifier)

  struct Output {
    std::vector<float> features;  // [n, feature_dim()]
    std::vector<float> logits;    // [n, num_classes()]
  };
  // pixels: n RGB images, [n, image_size(), image_size(), 3] bytes (Pipeline::decode's layout).
  Output run(std::span<const uint8_t> pixels, int n) const;
  std::vector<float> features(std::span<const uint8_t> pixels, int n) const;
  std::vector<float> logits(std::span<const uint8_t> pixels, int n) const;

  // Classifies n images generated for `requested` classes (one per image, in [0, num_classes())
  // or -1 for unconditional images, which count as misses in top-1).
  ScoredImages score(std::vector<uint8_t> pixels, int n, std::vector<int> requested) const;

  struct Impl;

 private:
  explicit QualityModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct QualityReport {
  int n = 0;        // images measured
  int classes = 0;  // distinct requested classes among them
  Interval top1;    // fraction of images whose top-1 class is the requested one
  // Frechet distance of the features to the reference set's. Its interval is the percentile
  // interval moved down by frechet_bootstrap_bias (the resamples' mean minus the value):
  // resampling with replacement duplicates images, which inflates the distance by about its own
  // finite-sample bias, so the raw percentiles would sit above the value (docs/quality.md).
  Interval frechet;
  double frechet_bootstrap_bias = Interval::kNaN;
  int reference_n = 0;        // images in the reference set (0: none given)
  Interval diversity;         // pixel diversity (pixel_diversity below)
  int diversity_classes = 0;  // classes with at least two images, which diversity averages over
  BootstrapOptions bootstrap;
};

// The report of `images`, with the Frechet distance to `reference` (e.g. vanilla's images of the
// same classes; null: no Frechet distance). Each interval resamples with replacement: top-1 over
// images, Frechet over both sets independently (bias-recentred, above), diversity over classes.
QualityReport quality_report(const ScoredImages& images, const ScoredImages* reference,
                             const BootstrapOptions& bootstrap = {});

// The rows and columns of a quality table, for a front-end's legend (`bench --legend`):
// "vanilla*", "top-1 %", "FD vs vanilla", "FD vs train", "diversity", each at the start of a line,
// with their definitions and intervals (docs/quality.md).
std::string quality_legend();

// ---- the metrics alone -------------------------------------------------------------------------

// Fraction of i with predicted[i] == requested[i].
double top1_accuracy(std::span<const int> predicted, std::span<const int> requested);

// Frechet distance between Gaussians fitted to a [n, dim] and b [m, dim] (row-major; n, m >= 2):
// |mu_a - mu_b|^2 + tr(S_a) + tr(S_b) - 2 tr((S_a S_b)^1/2), with unbiased covariances (numpy's
// np.cov), as python/emoji/evaluate.py's frechet(). Computed in double precision.
double frechet_distance(std::span<const float> a, int n, std::span<const float> b, int m, int dim);

// Mean pairwise pixel distance within a class, averaged over the classes with >= 2 images. The
// distance of two images is the RMS of their per-channel differences on a [0, 1] scale
// (sqrt(mean(((x - y) / 255)^2))): 0 for identical images, about 0.4 for unrelated random ones.
// NaN when no class has two images.
double pixel_diversity(const ScoredImages& images);

// ---- Frechet distance to reference statistics (e.g. the training set) --------------------------

// A reference feature set summarised as a Gaussian: the mean and unbiased covariance of n feature
// vectors. For the emoji family, models/emoji/classifier/train_features.safetensors holds the
// training split's (python/emoji/train_features.py writes it).
struct FeatureStatistics {
  int64_t n = 0;             // feature vectors summarised (>= 2)
  int dim = 0;               // feature dimension
  std::vector<double> mean;  // [dim]
  std::vector<double> cov;   // [dim, dim], row-major, symmetric

  // A safetensors file with "mean" F64[dim], "cov" F64[dim, dim] and "n" I64[1]; throws an Error
  // naming the file and the tensor when one is missing, mis-shaped, not finite or n < 2.
  static FeatureStatistics load(const std::string& path);
  // The statistics of n feature vectors [n, dim] (row-major), as the Python script computes them.
  static FeatureStatistics of(std::span<const float> features, int n, int dim);
};

// Frechet distance between the Gaussian fitted to a [n, dim] (unbiased covariance) and the
// reference statistics: |mu_a - mu|^2 + tr S_a + tr S - 2 tr((S_a S)^1/2). Double precision.
double frechet_distance(std::span<const float> a, int n, const FeatureStatistics& reference);

// The Frechet distance of a scored image set to reference statistics, with a percentile bootstrap
// interval that resamples the images only (the reference is fixed), recentred by the bootstrap's
// bias estimate as QualityReport::frechet is (docs/quality.md). B = bootstrap.frechet_resamples.
struct FrechetToStatistics {
  Interval frechet;
  double bootstrap_bias = Interval::kNaN;  // the resamples' mean minus the value
  int n = 0;                               // images measured
  int64_t reference_n = 0;                 // vectors behind the reference statistics
};
FrechetToStatistics frechet_to_statistics(const ScoredImages& images,
                                          const FeatureStatistics& reference,
                                          const BootstrapOptions& bootstrap = {});

// ---- how many images ---------------------------------------------------------------------------

// Half-width of the normal-approximation interval of a top-1 accuracy p measured on n images:
// z * sqrt(p (1 - p) / n), z the standard normal's (1 + level) / 2 quantile.
double top1_half_width(double p, int64_t n, double level = 0.95);
// Smallest n whose half-width is at most `half_width`.
int64_t images_for_top1_half_width(double p, double half_width, double level = 0.95);
// Smallest n per configuration at which a drop from accuracy p to p - drop is resolved: the
// interval of the difference of two independent accuracies, z * sqrt((p(1-p) + q(1-q)) / n)
// with q = p - drop, is at most `drop` wide on each side, so it excludes 0.
int64_t images_to_separate_top1_drop(double p, double drop, double level = 0.95);

}  // namespace tessera
