// Reference feature statistics (a Gaussian: mean, covariance, n) and the Frechet distance of an
// image set to them, e.g. to the emoji training set (models/emoji/classifier/
// train_features.safetensors; python/emoji/train_features.py; docs/quality.md).
#include <Eigen/Dense>
#include <cmath>
#include <cstring>
#include <string>

#include "eval/frechet_linalg.h"
#include "eval/metrics.h"
#include "io/safetensors.h"
#include "tessera/error.h"
#include "tessera/quality.h"

namespace tessera {

namespace {

// The F64/I64 tensor `name` of f, checked against `shape`, as doubles (the mapping need not be
// aligned: memcpy).
std::vector<double> read_f64(const SafeTensorsFile& f, const std::string& name, const Shape& shape,
                             DType dtype = DType::F64) {
  const std::string where = f.path() + ": tensor '" + name + "'";
  check(f.has(name), f.path() + ": no tensor '" + name +
                         "' (feature statistics need mean F64[dim], cov F64[dim, dim], n I64[1])");
  const SafeTensorInfo& t = f.get(name);
  check(t.dtype == dtype, where + " is " + dtype_name(t.dtype) + ", expected " + dtype_name(dtype));
  check(t.shape == shape,
        where + " has shape " + shape_str(t.shape) + ", expected " + shape_str(shape));
  const size_t count = static_cast<size_t>(shape_numel(shape));
  std::vector<double> out(count);
  if (dtype == DType::F64) {
    std::memcpy(out.data(), t.data, count * sizeof(double));
  } else {
    std::vector<int64_t> v(count);
    std::memcpy(v.data(), t.data, count * sizeof(int64_t));
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<double>(v[i]);
  }
  for (double x : out) check(std::isfinite(x), where + " holds a non-finite value");
  return out;
}

using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMapF =
    Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

// The reference side, prepared once for many distances (the bootstrap's resamples).
struct PreparedReference {
  Eigen::RowVectorXd mean;
  Eigen::MatrixXd cov;
  Eigen::MatrixXd factor;  // cov = factor factor^T
  double trace = 0;

  explicit PreparedReference(const FeatureStatistics& r)
      : mean(Eigen::Map<const Eigen::RowVectorXd>(r.mean.data(), r.dim)),
        cov(Eigen::Map<const Mat>(r.cov.data(), r.dim, r.dim)),
        factor(psd_factor(cov)),
        trace(cov.trace()) {}
};

void check_statistics(const FeatureStatistics& r, int dim, const char* what) {
  check(r.dim >= 1 && r.n >= 2 && r.mean.size() == static_cast<size_t>(r.dim) &&
            r.cov.size() == static_cast<size_t>(r.dim) * r.dim,
        std::string(what) + ": reference statistics are not mean [dim], cov [dim, dim] of n >= 2");
  check(dim == r.dim, std::string(what) + ": features have dimension " + std::to_string(dim) +
                          ", the reference statistics " + std::to_string(r.dim));
}

double frechet_prepared(std::span<const float> a, int n, int dim, const PreparedReference& ref) {
  check(n >= 2,
        "frechet_distance: needs at least 2 feature vectors (got " + std::to_string(n) + ")");
  check(a.size() == static_cast<size_t>(n) * dim, "frechet_distance: features are not [n, dim]");
  Mat A = ConstMapF(a.data(), n, dim).cast<double>();
  const Eigen::RowVectorXd mu = A.colwise().mean();
  A.rowwise() -= mu;
  const double na = n - 1;  // np.cov's unbiased normalisation
  // tr((S_a S)^1/2) with S = F F^T (the reference's factor, computed once) and S_a = A^T A / na
  // is tr((G^T G)^1/2) for G = A F / sqrt(na): the sum of G's singular values.
  const Eigen::MatrixXd G = A * ref.factor / std::sqrt(na);
  double tr_sqrt;
  if (n > dim) {
    // More vectors than dimensions: G^T G (d x d, a symmetric rank update) is full rank in
    // general, and its eigenvalues are cheaper than an SVD of the n x d G.
    Eigen::MatrixXd GtG = Eigen::MatrixXd::Zero(dim, dim);
    GtG.selfadjointView<Eigen::Lower>().rankUpdate(G.transpose());
    tr_sqrt = trace_sqrt_psd(GtG.selfadjointView<Eigen::Lower>());
  } else {
    // Fewer: S_a has rank n - 1 < d. The singular values of G, taken directly (not as square
    // roots of eigenvalues of G G^T), keep the exact zeros that centring leaves, as
    // frechet_distance's set-to-set route does.
    tr_sqrt = singular_value_sum(G);
  }
  return (mu - ref.mean).squaredNorm() + A.squaredNorm() / na + ref.trace - 2 * tr_sqrt;
}

}  // namespace

FeatureStatistics FeatureStatistics::load(const std::string& path) {
  const SafeTensorsFile f = SafeTensorsFile::open(path);
  check(f.has("mean"), path +
                           ": no tensor 'mean' (feature statistics need mean F64[dim], cov "
                           "F64[dim, dim], n I64[1])");
  const Shape& ms = f.get("mean").shape;
  check(ms.size() == 1 && ms[0] >= 1,
        path + ": tensor 'mean' has shape " + shape_str(ms) + ", expected [dim]");
  FeatureStatistics r;
  r.dim = static_cast<int>(ms[0]);
  r.mean = read_f64(f, "mean", {r.dim});
  r.cov = read_f64(f, "cov", {r.dim, r.dim});
  r.n = static_cast<int64_t>(read_f64(f, "n", {1}, DType::I64)[0]);
  check(r.n >= 2, path + ": n is " + std::to_string(r.n) + ", statistics need at least 2 vectors");
  for (int i = 0; i < r.dim; ++i)
    for (int j = 0; j < i; ++j) {
      const double x = r.cov[static_cast<size_t>(i) * r.dim + j];
      const double y = r.cov[static_cast<size_t>(j) * r.dim + i];
      check(std::fabs(x - y) <= 1e-9 * (std::fabs(x) + std::fabs(y)) + 1e-300,
            path + ": tensor 'cov' is not symmetric");
    }
  return r;
}

FeatureStatistics FeatureStatistics::of(std::span<const float> features, int n, int dim) {
  check(dim >= 1 && n >= 2, "FeatureStatistics::of: needs n >= 2 vectors of dim >= 1");
  check(features.size() == static_cast<size_t>(n) * dim,
        "FeatureStatistics::of: features are not [n, dim]");
  Mat A = ConstMapF(features.data(), n, dim).cast<double>();
  const Eigen::RowVectorXd mu = A.colwise().mean();
  A.rowwise() -= mu;
  const Mat cov = A.transpose() * A / static_cast<double>(n - 1);
  FeatureStatistics r;
  r.n = n;
  r.dim = dim;
  r.mean.assign(mu.data(), mu.data() + dim);
  r.cov.assign(cov.data(), cov.data() + cov.size());
  return r;
}

double frechet_distance(std::span<const float> a, int n, const FeatureStatistics& reference) {
  check_statistics(reference, reference.dim, "frechet_distance");
  check(n >= 1 && a.size() == static_cast<size_t>(n) * reference.dim,
        "frechet_distance: features are not [n, " + std::to_string(reference.dim) + "]");
  return frechet_prepared(a, n, reference.dim, PreparedReference(reference));
}

FrechetToStatistics frechet_to_statistics(const ScoredImages& images,
                                          const FeatureStatistics& reference,
                                          const BootstrapOptions& bootstrap) {
  check_scored(images, "frechet_to_statistics");
  check_statistics(reference, images.feature_dim, "frechet_to_statistics");
  FrechetToStatistics r;
  r.n = images.n;
  r.reference_n = reference.n;
  if (images.n < 2) return r;  // undefined: NaN interval
  const PreparedReference ref(reference);
  const int n = images.n, d = images.feature_dim;
  BootstrapOptions fo = bootstrap;
  fo.resamples = bootstrap.frechet_resamples;
  // The images' stream, as quality_report's Frechet interval draws its images.
  r.frechet = percentile_bootstrap(
      frechet_prepared(images.features, n, d, ref),
      [&](int b) {
        const auto g = gather_rows(
            images.features, bootstrap_indices(bootstrap.seed, b, BootstrapStream::Images, n), d);
        return frechet_prepared(g, n, d, ref);
      },
      fo, /*recentre=*/true, &r.bootstrap_bias);
  return r;
}

}  // namespace tessera
