#include "method_runs.h"

#include <cmath>

#include "common.h"
#include "text_format.h"

namespace tessera::cli {

std::vector<Condition> comparison_conditions(const GptConfig& cfg, int n, int class_id,
                                             int per_class, std::vector<int>* requested) {
  std::vector<Condition> conds;
  for (int i = 0; i < n; ++i)
    conds.push_back(cfg.is_c2i() ? Condition::label((class_id + i / per_class) % cfg.num_classes)
                                 : Condition::unconditional());
  if (requested) {
    requested->clear();
    for (const Condition& c : conds)
      requested->push_back(c.kind == Condition::Kind::Class ? c.class_id : -1);
  }
  return conds;
}

std::unique_ptr<QualityModel> load_quality_model(const Pipeline& pipe, const std::string& dir,
                                                 const std::string& model, bool check_weights) {
  const GptConfig& cfg = pipe.config().gpt;
  check(pipe.has_decoder(), model +
                                " has no VQ decoder (vq.safetensors): image quality needs "
                                "pixels; use --quality off");
  auto qm = QualityModel::load(dir, check_weights);
  check(qm->image_size() == pipe.image_size(),
        dir + ": the classifier takes " + std::to_string(qm->image_size()) + "-pixel images but " +
            model + " makes " + std::to_string(pipe.image_size()));
  check(!cfg.is_c2i() || qm->num_classes() == cfg.num_classes,
        dir + ": the classifier has " + std::to_string(qm->num_classes()) + " classes but " +
            model + " has " + std::to_string(cfg.num_classes));
  return qm;
}

void warm_up(Pipeline& pipe, const Condition& cond, const GenerateOptions& gen) {
  GenerateOptions w = gen;
  w.spec = SpeculativeOptions{};  // vanilla
  w.max_tokens = 2;
  w.progress = nullptr;
  pipe.generate({cond}, w);
}

double MethodRun::mean_seconds() const {
  double mean = 0.0;
  for (double x : seconds) mean += x / seconds.size();
  return mean;
}

double MethodRun::stddev_seconds() const {
  if (seconds.size() < 2) return 0.0;
  const double mean = mean_seconds();
  double var = 0.0;
  for (double x : seconds) var += (x - mean) * (x - mean);
  return std::sqrt(var / (seconds.size() - 1));
}

MethodRun run_method(Pipeline& pipe, const std::vector<Condition>& conds, const GenerateOptions& o,
                     int repeat) {
  MethodRun r;
  for (int rep = 0; rep < repeat; ++rep) {
    r.stats = GenerateStats{};
    r.grids = pipe.generate(conds, o, &r.stats);
    r.seconds.push_back(r.stats.seconds);
  }
  return r;
}

ScoredImages score_run(Pipeline& pipe, const QualityModel& qm, const MethodRun& run,
                       const std::vector<int>& requested) {
  std::vector<int32_t> flat;
  for (const auto& g : run.grids) flat.insert(flat.end(), g.begin(), g.end());
  const int n = static_cast<int>(run.grids.size());
  return qm.score(pipe.decode(flat, n), n,
                  std::vector<int>(requested.begin(), requested.begin() + n));
}

nlohmann::json interval_json(const Interval& i) {
  if (!i.defined()) return nullptr;
  return {{"value", i.value}, {"lo", i.lo}, {"hi", i.hi}};
}

nlohmann::json quality_json(const QualityReport& r) {
  return {{"n", r.n},
          {"classes", r.classes},
          {"top1", interval_json(r.top1)},
          {"frechet_vs_vanilla", interval_json(r.frechet)},
          {"frechet_bootstrap_bias", r.frechet.defined() ? nlohmann::json(r.frechet_bootstrap_bias)
                                                         : nlohmann::json(nullptr)},
          {"diversity", interval_json(r.diversity)},
          {"interval_level", r.bootstrap.level}};
}

std::string interval_text(const Interval& i, int prec, double scale) {
  if (!i.defined()) return "-";
  return fmt(scale * i.value, prec) + " [" + fmt(scale * i.lo, prec) + ", " +
         fmt(scale * i.hi, prec) + "]";
}

}  // namespace tessera::cli
