// The Frechet distance to reference statistics (tessera/quality.h: FeatureStatistics,
// frechet_to_statistics; docs/quality.md): the shipped emoji training-set statistics against the
// Python values of python/emoji/train_features.py (tests/fixtures/quality/train_frechet.json),
// agreement with the set-to-set distance, the bootstrap, and the loader's errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "io/npy.h"
#include "io/safetensors.h"
#include "tessera/error.h"
#include "tessera/quality.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

const std::string kFixtures = std::string(TESSERA_FIXTURES) + "/quality/";
const std::string kClassifier = std::string(TESSERA_SOURCE_DIR) + "/models/emoji/classifier";
const std::string kTrainStats = kClassifier + "/train_features.safetensors";

nlohmann::json golden() {
  std::ifstream f(kFixtures + "train_frechet.json");
  return nlohmann::json::parse(f);
}

const FeatureStatistics& train_stats() {
  static const FeatureStatistics s = FeatureStatistics::load(kTrainStats);
  return s;
}

std::vector<float> gaussian(int n, int d, float shift, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(static_cast<size_t>(n) * d);
  for (float& x : v) x = nd(rng) + shift;
  return v;
}

ScoredImages scored(const std::vector<float>& features, int n, int d) {
  ScoredImages s;
  s.n = n;
  s.feature_dim = d;
  s.features = features;
  s.requested.assign(n, -1);
  s.predicted.assign(n, 0);
  return s;
}

template <typename T>
HostTensor host(DType dt, Shape shape, const std::vector<T>& v) {
  HostTensor t{dt, std::move(shape), std::vector<unsigned char>(v.size() * sizeof(T))};
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

}  // namespace

TEST(QualityTrainStatistics, ShippedFileIsTheTrainingSplit) {
  const auto g = golden();
  const FeatureStatistics& s = train_stats();
  EXPECT_EQ(s.n, g["train_n"].get<int64_t>());  // models/emoji/DATA.md: 813 training images
  EXPECT_EQ(s.dim, g["feature_dim"].get<int>());
  EXPECT_EQ(s.dim, QualityModel::load(kClassifier)->feature_dim());
}

// The golden values come from numpy (evaluate.py's eigen-decomposition route) and scipy's sqrtm,
// which agree to ~2e-8 relative on these sets; the engine's route is a third.
TEST(QualityTrainStatistics, MatchesPythonOnFeatureSets) {
  const auto g = golden();
  for (const char* key : {"held_out", "fixture_images"}) {
    SCOPED_TRACE(key);
    const NpyArray a = read_npy(kFixtures + g[key]["features"].get<std::string>());
    const int n = static_cast<int>(a.shape.at(0));
    ASSERT_EQ(n, g[key]["n"].get<int>());
    const double want = g[key]["numpy"].get<double>();
    const double got = frechet_distance(a.as_f32(), n, train_stats());
    EXPECT_NEAR(got, want, 1e-7 * want);
    EXPECT_NEAR(got, g[key]["scipy_sqrtm"].get<double>(), 1e-7 * want);
  }
}

// From pixels: the engine's classifier on the four fixture images (features within 1e-4 of
// PyTorch's), then the distance with its bootstrap.
TEST(QualityTrainStatistics, FromImagesThroughTheClassifier) {
  const auto g = golden();
  const NpyArray a = read_npy(kFixtures + "images.npy");
  const int n = static_cast<int>(a.shape.at(0));
  const auto v = a.as_i32();
  const auto qm = QualityModel::load(kClassifier);
  const ScoredImages s = qm->score(std::vector<uint8_t>(v.begin(), v.end()), n,
                                   std::vector<int>(static_cast<size_t>(n), -1));
  BootstrapOptions o;
  o.frechet_resamples = 50;
  const FrechetToStatistics r = frechet_to_statistics(s, train_stats(), o);
  const double want = g["fixture_images"]["numpy"].get<double>();
  EXPECT_NEAR(r.frechet.value, want, 1e-5 * want);
  EXPECT_EQ(r.n, n);
  EXPECT_EQ(r.reference_n, train_stats().n);
}

// Statistics of a set B give the same distance as B's feature vectors (both routes: fewer and
// more vectors than dimensions).
TEST(QualityTrainStatistics, AgreesWithTheSetToSetDistance) {
  const int d = 12;
  for (const int n : {5, 40}) {
    SCOPED_TRACE(n);
    const auto a = gaussian(n, d, 0.2f, 1);
    const auto b = gaussian(60, d, 0.0f, 2);
    const double want = frechet_distance(a, n, b, 60, d);
    const double got = frechet_distance(a, n, FeatureStatistics::of(b, 60, d));
    EXPECT_NEAR(got, want, 1e-9 * want);
  }
  // A set against its own statistics: 0 (up to rounding).
  const auto b = gaussian(60, d, 0.5f, 3);
  EXPECT_NEAR(frechet_distance(b, 60, FeatureStatistics::of(b, 60, d)), 0.0, 1e-9);
}

TEST(QualityTrainStatistics, BootstrapResamplesTheImagesOnly) {
  const int d = 8, n = 300;
  const FeatureStatistics ref = FeatureStatistics::of(gaussian(2000, d, 0.0f, 4), 2000, d);
  const ScoredImages near = scored(gaussian(n, d, 0.0f, 5), n, d);
  // Shifted by 0.5 in every coordinate: the distance is about d * 0.25 = 2.
  const ScoredImages far = scored(gaussian(n, d, 0.5f, 6), n, d);
  BootstrapOptions o;
  o.frechet_resamples = 200;
  const FrechetToStatistics rn = frechet_to_statistics(near, ref, o);
  const FrechetToStatistics rf = frechet_to_statistics(far, ref, o);
  EXPECT_DOUBLE_EQ(rf.frechet.value, frechet_distance(far.features, n, ref));
  EXPECT_LT(rf.frechet.lo, 2.0 + 0.3);
  EXPECT_GT(rf.frechet.hi, 2.0 - 0.3);
  EXPECT_LT(rn.frechet.hi, rf.frechet.lo);
  // Resampling duplicates images, which inflates the distance: the interval is recentred.
  EXPECT_GT(rf.bootstrap_bias, 0.0);
  EXPECT_NEAR(rf.frechet.lo + rf.frechet.hi, 2 * rf.frechet.value, rf.frechet.hi - rf.frechet.lo);
  // Deterministic in the seed; another seed gives another interval.
  const FrechetToStatistics again = frechet_to_statistics(far, ref, o);
  EXPECT_EQ(again.frechet.lo, rf.frechet.lo);
  EXPECT_EQ(again.frechet.hi, rf.frechet.hi);
  o.seed = 7;
  EXPECT_NE(frechet_to_statistics(far, ref, o).frechet.lo, rf.frechet.lo);
  // One image: undefined, not an error.
  EXPECT_FALSE(
      frechet_to_statistics(scored(gaussian(1, d, 0.0f, 8), 1, d), ref, o).frechet.defined());
}

TEST(QualityTrainStatistics, ErrorsNameTheProblem) {
  const fs::path dir =
      fs::temp_directory_path() / ("tessera_train_stats_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "stats.safetensors").string();
  auto message = [&](const std::map<std::string, HostTensor>& t) {
    write_safetensors(path, t);
    try {
      FeatureStatistics::load(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const auto mean = host<double>(DType::F64, {2}, {0.0, 1.0});
  const auto cov = host<double>(DType::F64, {2, 2}, {1.0, 0.5, 0.5, 2.0});
  const auto n = host<int64_t>(DType::I64, {1}, {10});
  EXPECT_NE(message({{"mean", mean}, {"cov", cov}}).find("no tensor 'n'"), std::string::npos);
  EXPECT_NE(
      message({{"mean", mean}, {"cov", host<float>(DType::F32, {2, 2}, {1, 0, 0, 1})}, {"n", n}})
          .find("'cov' is f32, expected f64"),
      std::string::npos);
  EXPECT_NE(
      message(
          {{"mean", mean}, {"cov", host<double>(DType::F64, {2, 2}, {1, 0.5, 0.4, 2})}, {"n", n}})
          .find("not symmetric"),
      std::string::npos);
  EXPECT_NE(message({{"mean", mean}, {"cov", cov}, {"n", host<int64_t>(DType::I64, {1}, {1})}})
                .find("at least 2"),
            std::string::npos);
  EXPECT_NE(message({{"mean", host<double>(DType::F64, {2}, {0.0, NAN})}, {"cov", cov}, {"n", n}})
                .find("non-finite"),
            std::string::npos);
  EXPECT_EQ(message({{"mean", mean}, {"cov", cov}, {"n", n}}), "no error");
  fs::remove_all(dir);
  // Features of another dimension than the statistics.
  const FeatureStatistics s = FeatureStatistics::of(gaussian(10, 2, 0.0f, 9), 10, 2);
  EXPECT_THROW(frechet_to_statistics(scored(gaussian(10, 3, 0.0f, 9), 10, 3), s), Error);
}
