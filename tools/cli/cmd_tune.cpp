// tessera tune: sweeps a lossy method's relaxation parameters on one model, measuring every point's
// speed and image quality against vanilla on the same classes and seeds (method_runs.h, as bench
// --methods does), marks the speed-quality Pareto front and the points within the model's
// tolerance (tessera/tuning.h), plots them, and can record the fastest point within tolerance as
// the model's validated setting (config.json "quality", docs/quality.md).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>

#include "bench_methods.h"
#include "commands.h"
#include "common.h"
#include "default_model.h"
#include "interrupt.h"
#include "method_flags.h"
#include "method_runs.h"
#include "plot.h"
#include "run_settings.h"
#include "tessera/file_io.h"
#include "tessera/tuning.h"
#include "text_format.h"

namespace tessera::cli {

namespace {

struct TuneArgs {
  CommonOpts common;
  GenerateOptions gen;  // sampling, seed, batch and the speculative flags (--method, --draft, ...)
  int n = 64, class_id = 0, per_class = 2, points = 0;
  std::string grid, plot, format = "md", quality = "auto";
  bool write = false;
};

// One swept parameter: a method parameter's name, or "draft_len", and its values.
struct Axis {
  std::string name;
  std::vector<ParamValue> values;
};

const ParamInfo* param_info(const MethodInfo& m, const std::string& name) {
  for (const ParamInfo& p : m.params)
    if (p.name == name) return &p;
  return nullptr;
}

// A grid value of `p` as its type, checked by the method (type and range).
ParamValue parse_value(const ParamInfo& p, const std::string& text) {
  ParamValue v;
  try {
    size_t used = 0;
    switch (p.type) {
      case ParamType::Int:
        v = int64_t{std::stoll(text, &used)};
        break;
      case ParamType::Real:
        v = std::stod(text, &used);
        break;
      case ParamType::Switch:
        if (text != "true" && text != "false") throw std::invalid_argument(text);
        v = text == "true";
        used = text.size();
        break;
      case ParamType::Choice:
        v = text;
        used = text.size();
        break;
    }
    if (used != text.size()) throw std::invalid_argument(text);
  } catch (const std::logic_error&) {
    throw Error("--grid: " + p.name + "=" + text + " is not " +
                (p.type == ParamType::Int ? "an integer" : "a number"));
  }
  try {
    p.check(v);
  } catch (const Error& e) {
    throw Error(std::string("--grid: ") + e.what());
  }
  return v;
}

// --grid 'lantern.k=10,30;lantern.delta=0.05,0.1' (names as in `tessera generate --help`'s flags,
// with '.' or '-'), or the method's default grids (ParamInfo::tune_grid, kDraftLenTuneGrid).
std::vector<Axis> make_axes(const MethodInfo& m, const std::string& grid, bool draft_model,
                            const CLI::App& cmd) {
  std::vector<Axis> axes;
  if (grid.empty()) {
    for (const ParamInfo& p : m.params) {
      if (p.tune_grid.empty() || cmd.count(flag_of(p.name)) > 0) continue;
      Axis a{p.name, {}};
      for (double x : p.tune_grid)
        a.values.push_back(p.type == ParamType::Int ? ParamValue{static_cast<int64_t>(x)}
                                                    : ParamValue{x});
      axes.push_back(a);
    }
    if (cmd.count("--draft-len") == 0) {
      if (cmd.count("--draft-hold") > 0)
        throw Error(
            "--draft-hold is what --draft-len auto holds its lengths for; tune sweeps "
            "fixed lengths here (give --draft-len auto to tune the rest with it)");
      Axis a{"draft_len", {}};
      for (int x : draft_model ? kDraftLenTuneGrid : kJacobiWindowTuneGrid)
        a.values.push_back(int64_t{x});
      axes.push_back(a);
    }
    return axes;
  }
  std::vector<std::string> names = {"draft_len"};
  for (const ParamInfo& p : m.params) names.push_back(p.name);
  size_t start = 0;
  while (start <= grid.size()) {
    const size_t end = std::min(grid.find(';', start), grid.size());
    const std::string part = grid.substr(start, end - start);
    start = end + 1;
    if (part.empty()) continue;
    const size_t eq = part.find('=');
    if (eq == std::string::npos)
      throw Error("--grid: '" + part + "' must be PARAM=V1,V2,... (e.g. lantern.delta=0.05,0.1)");
    std::string name = part.substr(0, eq);
    for (const std::string& n : names)  // the flag spelling (lantern-delta, draft-len) works too
      if (flag_of(n) == "--" + name || flag_of(n) == flag_of(name)) name = n;
    const ParamInfo* p = param_info(m, name);
    if (!p && name != "draft_len") {
      const std::string guess = closest(name, names);
      throw Error("--grid: " + m.name + " has no parameter '" + name + "'" +
                  (guess.empty() ? "" : " (did you mean " + guess + "?)"));
    }
    if (name == "draft_len" ? cmd.count("--draft-len") > 0 : cmd.count(flag_of(name)) > 0)
      throw Error("--grid sweeps " + name + " and " + flag_of(name) + " fixes it: give one");
    for (const Axis& a : axes)
      if (a.name == name) throw Error("--grid names " + name + " twice");
    Axis a{name, {}};
    for (const std::string& v : split_list(part.substr(eq + 1))) {
      if (name == "draft_len")
        a.values.push_back(int64_t{parse_int(v, "--grid draft_len")});
      else
        a.values.push_back(parse_value(*p, v));
    }
    if (a.values.empty()) throw Error("--grid: " + name + " has no values");
    axes.push_back(a);
  }
  if (axes.empty()) throw Error("--grid is empty");
  return axes;
}

// Every combination of the axes (the last axis varies fastest), at most `limit` of them spread
// evenly over the grid (0: all).
std::vector<std::vector<ParamValue>> grid_points(const std::vector<Axis>& axes, int limit) {
  std::vector<std::vector<ParamValue>> all = {{}};
  for (const Axis& a : axes) {
    std::vector<std::vector<ParamValue>> next;
    for (const auto& p : all)
      for (const ParamValue& v : a.values) {
        next.push_back(p);
        next.back().push_back(v);
      }
    all = std::move(next);
  }
  if (limit <= 0 || static_cast<size_t>(limit) >= all.size()) return all;
  std::vector<std::vector<ParamValue>> some;
  for (int i = 0; i < limit; ++i)
    some.push_back(all[limit == 1 ? 0 : i * (all.size() - 1) / (limit - 1)]);
  return some;
}

// A grid value for people: 0.05, not param_text's exact 0.050000000000000003.
std::string shown(const ParamValue& v) {
  return param_value_text(v);
}

std::string point_text(const std::vector<Axis>& axes, const std::vector<ParamValue>& values) {
  std::string s;
  for (size_t i = 0; i < axes.size(); ++i)
    s += (i ? " " : "") + axes[i].name + "=" + shown(values[i]);
  return s;
}

RecordedInterval recorded(const Interval& i) {
  return {i.value, i.lo, i.hi};
}

std::string today_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

int run_tune(TuneArgs& a, const CLI::App& cmd) {
  const std::string method = a.gen.spec.method;
  if (a.common.model.empty()) a.common.model = default_model_dir();
  apply_common(a.common);
  if (is_mar(a.common.model)) throw Error("tune is for LlamaGen models (discrete tokens)");
  check_method_flags(cmd, {method}, false, "--method");
  const MethodInfo* m = find_method(method);
  if (m->lossless)
    throw Error("--method " + method +
                " is lossless: its images follow the target's distribution at every setting, so "
                "there is no speed-quality trade-off to tune (time it with bench --methods)");
  // As generate and bench: --draft, else the draft the model's config.json names.
  const DrafterChoice dc = choose_drafter(a.common.model, {method}, a.gen.spec.draft_model);
  a.gen.spec.draft_model = dc.dir;
  const bool draft_model = !a.gen.spec.draft_model.empty();
  const std::vector<Axis> axes = make_axes(*m, a.grid, draft_model, cmd);
  const std::vector<std::vector<ParamValue>> points = grid_points(axes, a.points);
  const std::string classifier = resolve_classifier(a.quality, a.common.model);
  if (classifier.empty())
    throw Error("tune needs a classifier to measure image quality: " + a.common.model +
                "/../classifier has none; give --quality DIR");
  check_output_path(a.plot, "--plot");
  if (a.write) check_writable(a.common.model + "/config.json");
  apply_model_sampling_defaults(load_model_config(a.common.model).sampling, cmd, a.gen.sampling);

  log_info("tune: " + method + ", drafter=" + dc.kind + (dc.dir.empty() ? "" : " " + dc.dir) +
           " (" + dc.why + ")");
  LoadOptions lo;
  lo.threads = a.common.threads;
  lo.check_weights = a.common.check_weights;
  lo.device = a.common.device;
  auto pipe = Pipeline::load(a.common.model, lo);
  // Every point is checked before vanilla's baseline starts (a draft length longer than the
  // image must not be found after an hour of sweeping).
  auto point_options = [&](const std::vector<ParamValue>& values) {
    GenerateOptions o = a.gen;
    for (size_t i = 0; i < axes.size(); ++i) {
      if (axes[i].name == "draft_len") {
        o.spec.draft_len = static_cast<int>(std::get<int64_t>(values[i]));
        if (o.spec.draft_len != kDraftLenAuto) o.spec.auto_hold = 0;  // --draft-hold: auto's
      } else
        o.spec.params[axes[i].name] = values[i];
    }
    return o;
  };
  for (const auto& values : points) {
    try {
      pipe->validate(point_options(values));
    } catch (const ParameterError& e) {
      throw Error("--grid point " + point_text(axes, values) + ": " + e.message(flag_of));
    }
  }
  auto qm = load_quality_model(*pipe, classifier, a.common.model, a.common.check_weights);
  const QualityTolerance tol = pipe->config().quality.tolerance;
  std::vector<int> requested;
  const std::vector<Condition> conds =
      comparison_conditions(pipe->config().gpt, a.n, a.class_id, a.per_class, &requested);
  warm_up(*pipe, conds.front(), a.gen);

  InterruptGuard interrupt;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t total = points.size() + 2;
  size_t done = 0;
  // One configuration; false when Ctrl-C stopped it (its images are then incomplete).
  auto run = [&](const std::string& label, GenerateOptions o, MethodRun* out) {
    if (!a.common.quiet) {
      const double el =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::string eta;
      if (done >= 2) eta = ", about " + fmt(el / done * (total - done) / 60.0, 1) + " min left";
      std::fprintf(stderr, "tune: %zu/%zu %s (%s elapsed%s)\n", done + 1, total, label.c_str(),
                   (fmt(el / 60.0, 1) + " min").c_str(), eta.c_str());
    }
    o.cancel = InterruptGuard::flag();
    *out = run_method(*pipe, conds, o, 1);
    ++done;
    return out->grids.size() == conds.size() && !InterruptGuard::interrupted();
  };
  GenerateOptions vo = a.gen;
  vo.spec = SpeculativeOptions{};
  MethodRun vanilla, floor_run;
  bool complete = run("vanilla", vo, &vanilla);
  vo.seed = a.gen.seed + kNoiseFloorSeedOffset;
  complete = complete && run("vanilla* (other seeds: the noise floor)", vo, &floor_run);
  if (!complete) {
    log_info("interrupted before vanilla's baseline was measured: nothing to report");
    return kInterruptedExit;
  }
  const ScoredImages vanilla_scored = score_run(*pipe, *qm, vanilla, requested);
  const QualityReport vanilla_q = quality_report(vanilla_scored, nullptr);
  const ScoredImages floor_scored = score_run(*pipe, *qm, floor_run, requested);
  const QualityReport floor_q = quality_report(floor_scored, &vanilla_scored);
  // The tolerance's top-1 reference pools both vanilla sets (2n images): both sample the same
  // distribution, and one set alone swung by 16 points between seed sets at n = 64.
  ScoredImages pooled = vanilla_scored;
  pooled.n += floor_scored.n;
  pooled.requested.insert(pooled.requested.end(), floor_scored.requested.begin(),
                          floor_scored.requested.end());
  pooled.predicted.insert(pooled.predicted.end(), floor_scored.predicted.begin(),
                          floor_scored.predicted.end());
  pooled.features.insert(pooled.features.end(), floor_scored.features.begin(),
                         floor_scored.features.end());
  pooled.pixels.insert(pooled.pixels.end(), floor_scored.pixels.begin(), floor_scored.pixels.end());
  const QualityReport pooled_q = quality_report(pooled, nullptr);
  const double vanilla_s = vanilla.mean_seconds();

  struct Row {
    std::vector<ParamValue> values;
    SpeculativeOptions spec;  // as generate runs it (the model's validated settings filled in)
    MethodRun run;
    QualityReport q;
    TunePoint point;
  };
  std::vector<Row> rows;
  for (const auto& values : points) {
    GenerateOptions o = point_options(values);
    Row r{values, pipe->with_model_defaults(o.spec), {}, {}, {}};
    if (!run(method + " " + point_text(axes, values), o, &r.run)) break;
    r.q = quality_report(score_run(*pipe, *qm, r.run, requested), &vanilla_scored);
    r.point = {vanilla_s / std::max(r.run.mean_seconds(), 1e-12), r.q.top1.value,
               r.q.frechet.value};
    rows.push_back(std::move(r));
  }
  const bool interrupted = InterruptGuard::interrupted();
  if (interrupted)
    log_info("interrupted: reporting the " + std::to_string(rows.size()) + " of " +
             std::to_string(points.size()) + " points measured");
  std::vector<TunePoint> tp;
  for (const Row& r : rows) tp.push_back(r.point);
  const std::vector<bool> front = pareto_front(tp);
  const double v_top1 = pooled_q.top1.value, fd_floor = floor_q.frechet.value;
  const int best = fastest_within_tolerance(tp, v_top1, fd_floor, tol);
  const std::string tol_text =
      "top-1 >= " + fmt(100 * (v_top1 - tol.top1_drop_points / 100), 1) +
      "% (vanilla, both seed sets, " + fmt(100 * v_top1, 1) + "% - " +
      fmt(tol.top1_drop_points, 1) +
      " points), FD <= " + fmt((1 + tol.frechet_over_floor) * fd_floor, 2) + " (noise floor " +
      fmt(fd_floor, 2) + " + " + fmt(100 * tol.frechet_over_floor, 0) + "%)";

  if (a.format == "json") {
    nlohmann::json pts = nlohmann::json::array();
    for (size_t i = 0; i < rows.size(); ++i) {
      nlohmann::json params;
      for (size_t k = 0; k < axes.size(); ++k)
        params[axes[k].name] =
            std::visit([](const auto& x) { return nlohmann::json(x); }, rows[i].values[k]);
      pts.push_back({{"params", params},
                     {"seconds_per_image", rows[i].run.mean_seconds() / a.n},
                     {"speedup_vs_vanilla", rows[i].point.speedup},
                     {"mean_accepted_length", rows[i].run.stats.mean_accepted_length()},
                     {"quality", quality_json(rows[i].q)},
                     {"pareto", static_cast<bool>(front[i])},
                     {"within_tolerance", within_tolerance(tp[i], v_top1, fd_floor, tol)}});
    }
    const nlohmann::json j = {
        {"model", a.common.model},
        {"method", method},
        {"draft", a.gen.spec.draft_model},
        {"tree", a.gen.spec.tree.empty() ? "chain" : a.gen.spec.tree},
        {"classifier", classifier},
        {"images_per_point", a.n},
        {"seed", a.gen.seed},
        {"tolerance",
         {{"top1_drop_points", tol.top1_drop_points},
          {"frechet_over_floor", tol.frechet_over_floor}}},
        {"vanilla", {{"seconds_per_image", vanilla_s / a.n}, {"quality", quality_json(vanilla_q)}}},
        {"vanilla_both_seed_sets", {{"quality", quality_json(pooled_q)}}},
        {"vanilla_other_seeds", {{"quality", quality_json(floor_q)}}},
        {"points", pts},
        {"fastest_within_tolerance", best >= 0 ? nlohmann::json(best) : nlohmann::json(nullptr)},
        {"interrupted", interrupted}};
    std::printf("%s\n", j.dump(2).c_str());
  } else if (a.format == "csv") {
    std::printf("point");
    for (const Axis& ax : axes) std::printf(",%s", ax.name.c_str());
    std::printf(
        ",s_per_image,speedup,mal,top1,top1_lo,top1_hi,frechet,frechet_lo,frechet_hi,"
        "pareto,within_tolerance\n");
    for (size_t i = 0; i < rows.size(); ++i) {
      std::printf("%zu", i + 1);
      for (const ParamValue& v : rows[i].values) std::printf(",%s", shown(v).c_str());
      const QualityReport& q = rows[i].q;
      std::printf(",%.6f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%d,%d\n",
                  rows[i].run.mean_seconds() / a.n, tp[i].speedup,
                  rows[i].run.stats.mean_accepted_length(), q.top1.value, q.top1.lo, q.top1.hi,
                  q.frechet.value, q.frechet.lo, q.frechet.hi, static_cast<int>(front[i]),
                  static_cast<int>(within_tolerance(tp[i], v_top1, fd_floor, tol)));
    }
  } else {
    std::printf(
        "tune %s on %s, draft %s%s, %d image(s) per point (%d per class), seed %llu; "
        "classifier %s, 95%% bootstrap intervals\n",
        method.c_str(), a.common.model.c_str(),
        (draft_model ? a.gen.spec.draft_model + " (" + dc.why + ")" : "- (Jacobi: " + dc.why + ")")
            .c_str(),
        a.gen.spec.tree.empty() ? "" : (", tree " + a.gen.spec.tree).c_str(), a.n, a.per_class,
        static_cast<unsigned long long>(a.gen.seed), classifier.c_str());
    std::printf("tolerance: %s\n", tol_text.c_str());
    std::printf(
        "vanilla: %s s/image, top-1 %s%%; vanilla* (other seeds): top-1 %s%%, FD %s; both: top-1 "
        "%s%%\n\n",
        fmt(vanilla_s / a.n, 3).c_str(), interval_text(vanilla_q.top1, 1, 100).c_str(),
        interval_text(floor_q.top1, 1, 100).c_str(), interval_text(floor_q.frechet, 2).c_str(),
        interval_text(pooled_q.top1, 1, 100).c_str());
    std::printf("| # |");
    for (const Axis& ax : axes) std::printf(" %s |", ax.name.c_str());
    std::printf(" s/image | speed-up | MAL | top-1 %% | FD vs vanilla | front | within |\n|---|");
    for (size_t k = 0; k < axes.size(); ++k) std::printf("---|");
    std::printf("---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < rows.size(); ++i) {
      std::printf("| %zu |", i + 1);
      for (const ParamValue& v : rows[i].values) std::printf(" %s |", shown(v).c_str());
      std::printf(" %s | %.2fx | %.2f | %s | %s | %s | %s |\n",
                  fmt(rows[i].run.mean_seconds() / a.n, 3).c_str(), tp[i].speedup,
                  rows[i].run.stats.mean_accepted_length(),
                  interval_text(rows[i].q.top1, 1, 100).c_str(),
                  interval_text(rows[i].q.frechet, 2).c_str(), front[i] ? "*" : "",
                  within_tolerance(tp[i], v_top1, fd_floor, tol) ? "yes" : "no");
    }
    std::printf(
        "\nfront: * marks the speed-quality Pareto front (speed-up and top-1); within: "
        "the tolerance above (point values). Timings share the machine: noisy.\n");
    if (best >= 0)
      std::printf("fastest within tolerance: #%d (%s), %.2fx\n", best + 1,
                  point_text(axes, rows[best].values).c_str(), tp[best].speedup);
    else
      std::printf("no point is within tolerance\n");
  }
  if (!a.plot.empty()) {
    TunePlot pl;
    pl.title = method + " on " + a.common.model + " (" + std::to_string(a.n) + " images/point)";
    for (size_t i = 0; i < rows.size(); ++i)
      pl.points.push_back({tp[i].speedup, rows[i].q.top1.value, rows[i].q.top1.lo,
                           rows[i].q.top1.hi, static_cast<bool>(front[i]),
                           within_tolerance(tp[i], v_top1, fd_floor, tol)});
    pl.vanilla_top1 = v_top1;
    pl.top1_floor = v_top1 - tol.top1_drop_points / 100.0;
    write_tune_plot(a.plot, pl);
    log_info("wrote " + a.plot);
  }
  if (a.write) {
    if (interrupted) throw Error("--write: the sweep was interrupted; nothing written");
    if (rows.empty()) throw Error("--write: no point was measured; nothing written");
    // Only a measurement that can tell within from outside the tolerance is recorded (nor is a
    // verdict of "none within" worth more at that n): the fastest point within it, else the
    // first, must have intervals narrow enough.
    const Row& r = rows[std::max(best, 0)];
    const ToleranceResolution res =
        tolerance_resolution(recorded(r.q.top1), recorded(r.q.frechet), a.n, fd_floor, tol);
    if (!res.resolved)
      throw Error("--write: at -n " + std::to_string(a.n) + " the intervals cannot resolve the " +
                  "tolerance (top-1 " + interval_text(r.q.top1, 1, 100) + "% reaches " +
                  fmt(100 * res.top1_reach, 1) + " points from its value, the tolerance allows " +
                  fmt(100 * res.top1_allowed, 1) + "; FD " + interval_text(r.q.frechet, 2) +
                  " reaches " + fmt(res.frechet_reach, 2) + ", the tolerance allows " +
                  fmt(res.frechet_allowed, 2) + "): about " + std::to_string(res.images_needed) +
                  " images per point (-n " + std::to_string(res.images_needed) +
                  ") would; nothing written to " + a.common.model + "/config.json");
    if (best < 0)
      throw Error("--write: no point is within the tolerance (" + tol_text +
                  "); nothing written to " + a.common.model + "/config.json");
    ValidatedSetting s;
    const MethodInfo& info = *m;
    for (const auto& [name, value] : r.spec.params)
      if (param_info(info, name)) s.params[name] = value;
    if (r.spec.draft_len > 0) s.params["draft_len"] = int64_t{r.spec.draft_len};
    s.draft_model = draft_model;
    QualityMeasurement& mm = s.measured;
    mm.images = a.n;
    mm.speedup = r.point.speedup;
    mm.mean_accepted_length = r.run.stats.mean_accepted_length();
    mm.top1 = recorded(r.q.top1);
    mm.frechet = recorded(r.q.frechet);
    mm.vanilla_top1 = recorded(pooled_q.top1);
    mm.frechet_floor = recorded(floor_q.frechet);
    mm.date = today_utc();
    mm.tessera_version = kVersion;
    const bool replaces = pipe->config().quality.methods.count(method) > 0;
    write_validated_setting(a.common.model, method, s);
    log_info("wrote " + method + "'s validated setting (" + point_text(axes, r.values) + ") to " +
             a.common.model + "/config.json" +
             (replaces ? " (the previous one is kept in its \"history\")" : ""));
  }
  return interrupted ? kInterruptedExit : 0;
}

}  // namespace

Command add_tune(CLI::App& app, const ModelDefaults& md) {
  auto a = std::make_shared<TuneArgs>();
  a->gen.sampling = md.sampling;
  auto* t = app.add_subcommand(
      "tune",
      "Sweep a lossy method's parameters: speed-up and image quality against vanilla on the same "
      "classes and seeds, the Pareto front, and the fastest point within the model's tolerance");
  add_common(t, a->common, /*model_required=*/false);
  add_method_flags(t, a->gen.spec, md);
  t->get_option("--method")->required();
  t->add_option("-n,--n", a->n, "Images per point (and for vanilla)")
      ->check(int_at_least(2))
      ->capture_default_str();
  t->add_option("--class", a->class_id, "First class; image i has class (this + i / --per-class)")
      ->capture_default_str();
  t->add_option("--per-class", a->per_class, "Images per class")
      ->check(int_at_least(1))
      ->capture_default_str();
  t->add_option("--grid", a->grid,
                "Values to sweep, 'param=v1,v2;param2=...' (e.g. 'lantern.delta=0.05,0.1;"
                "draft_len=3,5'); default: each relaxation parameter's grid (tessera/methods.h) "
                "and draft lengths 3,5,8 (Jacobi windows 8,16,24)");
  t->add_option("--points", a->points,
                "At most this many points, spread evenly over the grid (0: all)")
      ->check(int_at_least(0))
      ->capture_default_str();
  t->add_option("--plot", a->plot, "Write a PNG of top-1 against speed-up (the front joined)");
  t->add_option("-o,--output-format", a->format, "md (table), csv or json")
      ->check(CLI::IsMember({"md", "csv", "json"}))
      ->capture_default_str();
  t->add_flag("--write", a->write,
              "Record the fastest point within tolerance in MODEL/config.json's \"quality\" "
              "section (the model's defaults for the method), if its intervals are narrow enough "
              "to resolve the tolerance (else it says how many images would be); the setting it "
              "replaces is kept in the method's \"history\"");
  t->add_option("--quality", a->quality,
                "Classifier directory; auto: the classifier MODEL/config.json names, else "
                "MODEL/../classifier")
      ->capture_default_str();
  t->add_option("-b,--batch", a->gen.batch, "Images generated together")
      ->check(int_at_least(1))
      ->capture_default_str();
  t->add_option("-s,--seed", a->gen.seed, "Random seed")->capture_default_str();
  t->add_option("--cfg", a->gen.sampling.cfg_scale, "Guidance scale")->capture_default_str();
  t->add_option("--temperature", a->gen.sampling.temperature, "Sampling temperature")
      ->capture_default_str();
  t->add_option("--top-k", a->gen.sampling.top_k, "Top-k")->capture_default_str();
  t->add_option("--top-p", a->gen.sampling.top_p, "Top-p")->capture_default_str();
  return {t, [a, t] { return run_tune(*a, *t); }};
}

}  // namespace tessera::cli
