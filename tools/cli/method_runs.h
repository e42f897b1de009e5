// What `bench --methods` and `tune` share: one method run on the same classes and seeds as the
// others (timed, with its stats), and its images scored by the model family's classifier, so that
// both commands measure speed and quality through one code path.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/quality.h"
#include "tessera/tessera.h"

namespace tessera::cli {

// vanilla* (the noise floor of the quality metrics) runs vanilla on seed + this: other images of
// the same classes.
constexpr uint64_t kNoiseFloorSeedOffset = 1000003;

// The conditions of a method comparison: image i has class (class_id + i / per_class) mod the
// model's classes (c2i), else no condition; `requested` gets each image's class (-1: none).
std::vector<Condition> comparison_conditions(const GptConfig& cfg, int n, int class_id,
                                             int per_class, std::vector<int>* requested);

// The classifier at `dir` for `model`'s images, checked against the pipeline (decoder, image
// size, classes); errors name the problem.
std::unique_ptr<QualityModel> load_quality_model(const Pipeline& pipe, const std::string& dir,
                                                 const std::string& model, bool check_weights);

// Pages in the weights (and the draft model's) before anything is timed.
void warm_up(Pipeline& pipe, const Condition& cond, const GenerateOptions& gen);

// One configuration, generated `repeat` times with the same seeds (so the same images).
struct MethodRun {
  GenerateStats stats;  // the last repetition's
  std::vector<std::vector<int32_t>> grids;
  std::vector<double> seconds;  // per repetition
  double mean_seconds() const;
  double stddev_seconds() const;
};
MethodRun run_method(Pipeline& pipe, const std::vector<Condition>& conds, const GenerateOptions& o,
                     int repeat);

// The run's images decoded and classified (after timing: quality costs nothing in the speed).
ScoredImages score_run(Pipeline& pipe, const QualityModel& qm, const MethodRun& run,
                       const std::vector<int>& requested);

// A report's columns as JSON (bench's and tune's "quality" objects).
nlohmann::json interval_json(const Interval& i);
nlohmann::json quality_json(const QualityReport& r);
// "86.0 [80.1, 91.2]" (values times scale, prec decimals), "-" when undefined.
std::string interval_text(const Interval& i, int prec, double scale = 1.0);

}  // namespace tessera::cli
