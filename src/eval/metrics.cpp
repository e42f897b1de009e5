#include "eval/metrics.h"
#include "eval/frechet_linalg.h"

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <exception>
#include <map>
#include <numbers>
#include <string>

#include "common/thread_pool.h"
#include "sampling/rng.h"
#include "tessera/error.h"

namespace tessera {

std::vector<int> bootstrap_indices(uint64_t seed, int b, BootstrapStream stream, int n) {
  const CounterRng rng(seed, static_cast<uint64_t>(b));
  std::vector<int> idx(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const double u = rng.uniform(static_cast<uint32_t>(i), static_cast<uint32_t>(stream));
    idx[i] = std::min(n - 1, static_cast<int>(u * n));
  }
  return idx;
}

double percentile_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return Interval::kNaN;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (pos - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

Interval percentile_bootstrap(double value, const std::function<double(int)>& stat,
                              const BootstrapOptions& opts, bool recentre, double* bias) {
  check(opts.resamples >= 1, "bootstrap: resamples must be >= 1");
  check(opts.level > 0 && opts.level < 1, "bootstrap: level must be in (0, 1)");
  Interval r;
  r.value = value;
  if (std::isnan(value)) return r;
  std::vector<double> v(static_cast<size_t>(opts.resamples));
  // Resamples handed out one at a time (their costs vary); the pool rethrows the first exception.
  cpu_pool().parallel_for_dynamic("bootstrap", opts.resamples, 1, [&](int64_t b) {
    v[static_cast<size_t>(b)] = stat(static_cast<int>(b));
  });
  std::erase_if(v, [](double x) { return std::isnan(x); });
  std::sort(v.begin(), v.end());
  r.lo = percentile_sorted(v, (1 - opts.level) / 2);
  r.hi = percentile_sorted(v, (1 + opts.level) / 2);
  double shift = 0;
  for (double x : v) shift += x;
  shift = v.empty() ? Interval::kNaN : shift / static_cast<double>(v.size()) - value;
  if (bias) *bias = shift;
  if (recentre) {
    // Recentring can carry the bounds below 0, which a distance cannot reach: clamped there.
    r.lo = std::max(r.lo - shift, 0.0);
    r.hi = std::max(r.hi - shift, 0.0);
  }
  return r;
}

double normal_quantile(double p) {
  check(p > 0 && p < 1, "normal_quantile: p must be in (0, 1)");
  // Newton on Phi(x) = erfc(-x / sqrt 2) / 2 from x = 0; Phi is log-concave, so this converges.
  double x = 0;
  for (int i = 0; i < 100; ++i) {
    const double f = 0.5 * std::erfc(-x / std::sqrt(2.0)) - p;
    const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi);
    const double step = f / std::max(pdf, 1e-300);
    x -= step;
    if (std::fabs(step) < 1e-14 * std::max(1.0, std::fabs(x))) break;
  }
  return x;
}

double top1_accuracy(std::span<const int> predicted, std::span<const int> requested) {
  check(predicted.size() == requested.size(),
        "top1_accuracy: " + std::to_string(predicted.size()) + " predictions for " +
            std::to_string(requested.size()) + " requested classes");
  if (predicted.empty()) return Interval::kNaN;
  int64_t hits = 0;
  for (size_t i = 0; i < predicted.size(); ++i)
    hits += requested[i] >= 0 && predicted[i] == requested[i];
  return static_cast<double>(hits) / static_cast<double>(predicted.size());
}

std::vector<float> gather_rows(const std::vector<float>& rows, const std::vector<int>& idx,
                               int dim) {
  std::vector<float> g(idx.size() * static_cast<size_t>(dim));
  for (size_t i = 0; i < idx.size(); ++i)
    std::copy_n(rows.data() + static_cast<size_t>(idx[i]) * dim, dim, g.data() + i * dim);
  return g;
}

double trace_sqrt_psd(const Eigen::MatrixXd& m) {
  const Eigen::MatrixXd sym = (m + m.transpose()) / 2;
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(sym, Eigen::EigenvaluesOnly);
  check(es.info() == Eigen::Success, "frechet_distance: eigen-decomposition did not converge");
  double s = 0;
  for (Eigen::Index i = 0; i < es.eigenvalues().size(); ++i)
    s += std::sqrt(std::max(es.eigenvalues()(i), 0.0));
  return s;
}

double singular_value_sum(const Eigen::MatrixXd& g) {
  const Eigen::JacobiSVD<Eigen::MatrixXd> svd(g);
  check(svd.info() == Eigen::Success, "frechet_distance: SVD did not converge");
  return svd.singularValues().sum();
}

Eigen::MatrixXd psd_factor(const Eigen::MatrixXd& s) {
  const Eigen::LDLT<Eigen::MatrixXd> ldlt(s);
  if (ldlt.info() != Eigen::Success) {
    // A zero pivot over a column that rounding left non-zero (a rank-deficient covariance, e.g.
    // a bootstrap resample of few distinct images): L = V diag(sqrt(max(lambda, 0))) from the
    // eigen-decomposition instead, three times the cost but exact for any symmetric PSD s.
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es((s + s.transpose()) / 2);
    check(es.info() == Eigen::Success, "frechet_distance: eigen-decomposition did not converge");
    return es.eigenvectors() * es.eigenvalues().cwiseMax(0.0).cwiseSqrt().asDiagonal();
  }
  Eigen::MatrixXd L = ldlt.matrixL();
  L = ldlt.transpositionsP().transpose() * L;
  L *= ldlt.vectorD().cwiseMax(0.0).cwiseSqrt().asDiagonal();
  return L;
}

namespace {

using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// X^T X / denom for centred rows X, as a symmetric rank update (half the products of a GEMM).
Eigen::MatrixXd covariance(const Mat& X, double denom) {
  Eigen::MatrixXd S = Eigen::MatrixXd::Zero(X.cols(), X.cols());
  S.selfadjointView<Eigen::Lower>().rankUpdate(X.transpose(), 1.0 / denom);
  return S.selfadjointView<Eigen::Lower>();
}

}  // namespace

double frechet_distance(std::span<const float> a, int n, std::span<const float> b, int m, int dim) {
  check(dim >= 1, "frechet_distance: dim must be >= 1");
  check(n >= 2 && m >= 2, "frechet_distance: needs at least 2 feature vectors in each set (got " +
                              std::to_string(n) + " and " + std::to_string(m) + ")");
  check(a.size() == static_cast<size_t>(n) * dim && b.size() == static_cast<size_t>(m) * dim,
        "frechet_distance: feature arrays are not [n, dim] and [m, dim]");
  Mat A = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
              a.data(), n, dim)
              .cast<double>();
  Mat B = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
              b.data(), m, dim)
              .cast<double>();
  const Eigen::RowVectorXd mu_a = A.colwise().mean(), mu_b = B.colwise().mean();
  A.rowwise() -= mu_a;
  B.rowwise() -= mu_b;
  const double na = n - 1, nb = m - 1;  // np.cov's unbiased normalisation
  const double tr_a = A.squaredNorm() / na, tr_b = B.squaredNorm() / nb;
  double tr_sqrt;
  if (dim <= std::min(n, m)) {
    // tr((S_a S_b)^1/2) = sum of sqrt(eig(L^T S_b L)) for any factor S_a = L L^T: L from a pivoted
    // LDL^T (negative rounding-level pivots clipped), then one symmetric eigenvalue solve.
    // evaluate.py takes L = S_a^1/2 from a full eigen-decomposition; the eigenvalues are the same
    // and this costs a third.
    const Eigen::MatrixXd Sa = covariance(A, na), Sb = covariance(B, nb);
    const Eigen::MatrixXd L = psd_factor(Sa);
    tr_sqrt = trace_sqrt_psd(L.transpose() * Sb * L);
  } else {
    // Fewer vectors than dimensions: the eigenvalues of S_a S_b are the squared singular values
    // of G = A B^T / sqrt(na nb) (n x m), so tr((S_a S_b)^1/2) is the sum of G's singular values.
    // Taken directly (not as eigenvalues of G G^T) they keep the exact zeros that centring leaves
    // exact, where the d x d route adds the square roots of rounding-level eigenvalues.
    const Eigen::MatrixXd G = A * B.transpose() / std::sqrt(na * nb);
    tr_sqrt = singular_value_sum(G);
  }
  return (mu_a - mu_b).squaredNorm() + tr_a + tr_b - 2 * tr_sqrt;
}

namespace {

// Per requested class (>= 0), the indices of its images; classes in increasing order.
std::vector<std::vector<int>> images_by_class(const ScoredImages& s) {
  std::map<int, std::vector<int>> m;
  for (int i = 0; i < s.n; ++i)
    if (s.requested[i] >= 0) m[s.requested[i]].push_back(i);
  std::vector<std::vector<int>> out;
  for (auto& [c, idx] : m) out.push_back(std::move(idx));
  return out;
}

// Mean pairwise RMS distance within one class (NaN below two images).
double class_diversity(const ScoredImages& s, const std::vector<int>& idx) {
  if (idx.size() < 2) return Interval::kNaN;
  const size_t px = static_cast<size_t>(s.image_size) * s.image_size * 3;
  double total = 0;
  int64_t pairs = 0;
  for (size_t i = 0; i < idx.size(); ++i)
    for (size_t j = i + 1; j < idx.size(); ++j) {
      const uint8_t* x = s.pixels.data() + static_cast<size_t>(idx[i]) * px;
      const uint8_t* y = s.pixels.data() + static_cast<size_t>(idx[j]) * px;
      int64_t ss = 0;
      for (size_t k = 0; k < px; ++k) {
        const int d = static_cast<int>(x[k]) - static_cast<int>(y[k]);
        ss += d * d;
      }
      total += std::sqrt(static_cast<double>(ss) / static_cast<double>(px)) / 255.0;
      ++pairs;
    }
  return total / static_cast<double>(pairs);
}

double mean_defined(const std::vector<double>& v, std::span<const int> pick) {
  double s = 0;
  int k = 0;
  for (int i : pick)
    if (!std::isnan(v[i])) s += v[i], ++k;
  return k ? s / k : Interval::kNaN;
}

}  // namespace

void check_scored(const ScoredImages& s, const char* what) {
  const std::string w = what;
  check(s.n >= 0 && s.requested.size() == static_cast<size_t>(s.n) &&
            s.predicted.size() == static_cast<size_t>(s.n) &&
            s.features.size() == static_cast<size_t>(s.n) * s.feature_dim,
        w + ": ScoredImages arrays do not match its n (" + std::to_string(s.n) + ")");
  check(s.pixels.empty() ||
            s.pixels.size() == static_cast<size_t>(s.n) * s.image_size * s.image_size * 3,
        w + ": ScoredImages pixels are not [n, image_size, image_size, 3]");
}

double pixel_diversity(const ScoredImages& images) {
  check_scored(images, "pixel_diversity");
  check(!images.pixels.empty() || images.n == 0, "pixel_diversity: the images have no pixels");
  const auto classes = images_by_class(images);
  std::vector<double> per(classes.size());
  std::vector<int> all(classes.size());
  for (size_t c = 0; c < classes.size(); ++c) {
    per[c] = class_diversity(images, classes[c]);
    all[c] = static_cast<int>(c);
  }
  return mean_defined(per, all);
}

QualityReport quality_report(const ScoredImages& images, const ScoredImages* reference,
                             const BootstrapOptions& opts) {
  check_scored(images, "quality_report");
  QualityReport r;
  r.n = images.n;
  r.bootstrap = opts;
  const auto classes = images_by_class(images);
  r.classes = static_cast<int>(classes.size());
  const uint64_t seed = opts.seed;
  const int n = images.n;

  if (n > 0) {
    r.top1 = percentile_bootstrap(
        top1_accuracy(images.predicted, images.requested),
        [&](int b) {
          int64_t hits = 0;
          for (int i : bootstrap_indices(seed, b, BootstrapStream::Images, n))
            hits += images.requested[i] >= 0 && images.predicted[i] == images.requested[i];
          return static_cast<double>(hits) / n;
        },
        opts);
  }

  if (reference) {
    check_scored(*reference, "quality_report (reference)");
    check(reference->feature_dim == images.feature_dim,
          "quality_report: reference features have dimension " +
              std::to_string(reference->feature_dim) + ", the images' " +
              std::to_string(images.feature_dim));
    r.reference_n = reference->n;
    const int m = reference->n, d = images.feature_dim;
    if (n >= 2 && m >= 2) {
      BootstrapOptions fo = opts;
      fo.resamples = opts.frechet_resamples;
      r.frechet = percentile_bootstrap(
          frechet_distance(images.features, n, reference->features, m, d),
          [&](int b) {
            const auto ga = gather_rows(images.features,
                                        bootstrap_indices(seed, b, BootstrapStream::Images, n), d);
            const auto gb = gather_rows(
                reference->features, bootstrap_indices(seed, b, BootstrapStream::Reference, m), d);
            return frechet_distance(ga, n, gb, m, d);
          },
          fo, /*recentre=*/true, &r.frechet_bootstrap_bias);
    }
  }

  if (!images.pixels.empty()) {
    std::vector<double> per(classes.size());
    for (size_t c = 0; c < classes.size(); ++c) per[c] = class_diversity(images, classes[c]);
    std::vector<int> all(classes.size());
    for (size_t c = 0; c < classes.size(); ++c) {
      all[c] = static_cast<int>(c);
      r.diversity_classes += !std::isnan(per[c]);
    }
    const int k = static_cast<int>(classes.size());
    // Classes are resampled (a cluster bootstrap): pairs within a class are not independent.
    if (r.diversity_classes > 0)
      r.diversity = percentile_bootstrap(
          mean_defined(per, all),
          [&](int b) {
            return mean_defined(per, bootstrap_indices(seed, b, BootstrapStream::Classes, k));
          },
          opts);
  }
  return r;
}

std::string quality_legend() {
  return "vanilla*   vanilla again on other seeds: its distances to vanilla are the noise floor "
         "that\n"
         "           a lossless method's stay within; every row has the heading's n images (a "
         "2-point\n"
         "           top-1 difference at ~86% needs ~2450 each: docs/quality.md)\n"
         "top-1 %    % of images the classifier puts in the requested class [95% bootstrap "
         "interval over images]\n"
         "FD vs vanilla  Frechet distance between the classifier's 256-d features of the "
         "method's images and\n"
         "           vanilla's [95% bootstrap interval over both sets, recentred by the "
         "resampling bias, at\n"
         "           least 0]; biased upward at small n: compare at equal n, against vanilla* as "
         "the noise floor\n"
         "FD vs train  the same distance to the training set's feature mean and covariance "
         "(the classifier's\n"
         "           train_features.safetensors)\n"
         "diversity  mean RMS pixel distance (0-1) between images of the same class, averaged over "
         "classes [interval over classes];\n"
         "           a drop against vanilla means the method narrows its samples (0: collapse)\n";
}

double top1_half_width(double p, int64_t n, double level) {
  check(p >= 0 && p <= 1, "top1_half_width: p must be in [0, 1]");
  check(n >= 1, "top1_half_width: n must be >= 1");
  check(level > 0 && level < 1, "top1_half_width: level must be in (0, 1)");
  return normal_quantile((1 + level) / 2) * std::sqrt(p * (1 - p) / static_cast<double>(n));
}

int64_t images_for_top1_half_width(double p, double half_width, double level) {
  check(p >= 0 && p <= 1, "images_for_top1_half_width: p must be in [0, 1]");
  check(half_width > 0, "images_for_top1_half_width: half_width must be > 0");
  check(level > 0 && level < 1, "images_for_top1_half_width: level must be in (0, 1)");
  const double z = normal_quantile((1 + level) / 2);
  return std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(z * z * p * (1 - p) / (half_width * half_width) - 1e-9)));
}

int64_t images_to_separate_top1_drop(double p, double drop, double level) {
  check(p >= 0 && p <= 1, "images_to_separate_top1_drop: p must be in [0, 1]");
  check(drop > 0 && drop <= p, "images_to_separate_top1_drop: drop must be in (0, p]");
  check(level > 0 && level < 1, "images_to_separate_top1_drop: level must be in (0, 1)");
  const double z = normal_quantile((1 + level) / 2), q = p - drop;
  const double var = p * (1 - p) + q * (1 - q);
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(z * z * var / (drop * drop) - 1e-9)));
}

}  // namespace tessera
