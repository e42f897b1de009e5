#include "bench_methods.h"
#include "common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "tessera/quality.h"

#include "method_flags.h"
#include "method_runs.h"
#include "stats_json.h"
#include "text_format.h"

namespace tessera::cli {

namespace fs = std::filesystem;

std::string resolve_classifier(const std::string& what, const std::string& model) {
  if (what == "off") return "";
  if (what == "auto") {
    const ModelConfig mc = load_model_config(model);
    if (!mc.companions.classifier.empty()) {
      const std::string dir = mc.companion_path(mc.companions.classifier);
      if (!fs::is_regular_file(fs::path(dir) / "classifier.json"))
        throw Error((fs::path(model) / "config.json").string() + " names the classifier " +
                    mc.companions.classifier + " (" + dir +
                    "), which has no classifier.json; give --quality DIR or off");
      return dir;
    }
    const fs::path dir = fs::path(model).lexically_normal().parent_path() / "classifier";
    return fs::is_regular_file(dir / "classifier.json") ? dir.string() : "";
  }
  if (!fs::is_regular_file(fs::path(what) / "classifier.json"))
    throw Error("--quality: " + what + " is not a classifier directory (no classifier.json)");
  return what;
}

namespace {

// The speed table's columns (the quality columns' come from quality_legend()).
constexpr const char* kSpeedLegend =
    "method     the decoding method; vanilla, the baseline, runs first on the same classes and\n"
    "           seeds\n"
    "threads    CPU threads (-t, or --thread-counts)\n"
    "batch      images generated together (-b, or --batches)\n"
    "draft-len  drafts per round (--draft-len, or --draft-lens); auto: chosen each round; - for\n"
    "           vanilla\n"
    "tree       the draft tree (--tree, or --trees): a static shape, dynamic[:...] (EAGLE-2), or\n"
    "           chain (one draft per depth)\n"
    "s/image    wall time of the method's generate call divided by the images (prefill, drafting,\n"
    "           verification and sampling; model load and VQ decoding excluded)\n"
    "speed-up   vanilla's s/image in this run divided by the method's (> 1: faster)\n"
    "MAL        mean accepted length: tokens committed per verification round (first token\n"
    "           excluded); 1 for vanilla\n"
    "NFE/img    target forward passes per image; with -b > 1 one batched forward serves several\n"
    "           images and counts once for each of them\n"
    "draft fw   batched forward passes of the draft model (Jacobi drafts: 0), over the whole run:\n"
    "           it falls as -b grows, since one pass drafts for the whole batch\n"
    "target%    share of the wall time in target forwards\n"
    "draft%     share of the wall time in drafting (the draft model, or Jacobi bookkeeping)\n"
    "verify%    share of the wall time in target distributions, acceptance rules and resampling\n"
    "acc@1      fraction of depth-1 drafts accepted\n"
    "rules/fw   time in acceptance rules and resampling per target forward, as a share of that\n"
    "           forward's time\n"
    "depth      mean tokens drafted per round (with --draft-len auto: the lengths it chose)\n"
    "nodes      mean draft nodes verified per round: a tree's size (with --draft-len auto: the\n"
    "           node budget it chose); a chain's equals its depth\n";

}  // namespace

void bench_methods(const MethodsBenchOptions& b) {
  LoadOptions lo;
  lo.threads = b.threads;
  lo.check_weights = b.check_weights;
  lo.device = b.device;
  lo.load_decoder = !b.classifier.empty();  // quality needs pixels
  auto pipe = Pipeline::load(b.model, lo);
  const GptConfig& cfg = pipe->config().gpt;
  std::unique_ptr<QualityModel> qm;
  if (!b.classifier.empty()) qm = load_quality_model(*pipe, b.classifier, b.model, b.check_weights);
  // The training set's feature statistics, where the classifier ships them: a Frechet distance
  // against the data the model learned, not only against vanilla (docs/quality.md).
  std::optional<FeatureStatistics> train;
  const std::string train_path = b.classifier + "/train_features.safetensors";
  if (qm && fs::is_regular_file(train_path)) train = FeatureStatistics::load(train_path);
  std::vector<std::string> methods = b.methods;
  methods.erase(std::remove(methods.begin(), methods.end(), "vanilla"), methods.end());
  methods.insert(methods.begin(), "vanilla");  // the baseline, measured in this run
  std::vector<int> requested;
  const std::vector<Condition> conds =
      comparison_conditions(cfg, b.n, b.class_id, b.per_class, &requested);
  warm_up(*pipe, conds.front(), b.gen);
  // With quality on, vanilla runs a second time on other seeds ("vanilla*", not timed against):
  // its distance to vanilla is the metrics' noise floor at this n, which lossless methods must
  // stay within.
  // One run per method and tree (--trees; a method without a draft model drafts chains only).
  struct Run {
    std::string method, tree;  // tree: a --tree spec, "" for none
    bool floor = false;        // vanilla*
    std::string label() const { return floor ? "vanilla*" : method; }
    std::string drafted;  // the tree the run verified (GenerateStats::tree), once it ran
    std::string tree_text() const {
      return method == "vanilla" ? "-"
             : !tree.empty()     ? tree
             : !drafted.empty()  ? drafted  // the heads' default: Medusa's chain:K, Hawk's pools
                                 : "chain";
    }
  };
  auto options_of = [&](const Run& run) {
    GenerateOptions o = b.gen;
    o.spec.method = run.method;
    if (!uses_draft_model(run.method)) o.spec.draft_model.clear();
    if (b.draft_dirs.count(run.method)) o.spec.draft_model = b.draft_dirs.at(run.method);
    if (!b.trees.empty()) o.spec.tree = run.tree;
    return o;
  };
  std::vector<Run> runs;
  for (const std::string& m : methods) {
    Run base{m, b.gen.spec.tree, false, {}};
    if (m == "vanilla" || b.trees.empty() || options_of(base).spec.draft_model.empty()) {
      if (!b.trees.empty()) base.tree.clear();
      runs.push_back(base);
      continue;
    }
    for (const std::string& t : b.trees) runs.push_back({m, t == "chain" ? "" : t, false, {}});
  }
  if (!b.trees.empty() &&
      std::none_of(runs.begin(), runs.end(), [](const Run& r) { return !r.tree.empty(); }) &&
      std::any_of(b.trees.begin(), b.trees.end(),
                  [](const std::string& t) { return t != "chain"; }))
    throw Error(
        "--trees: no method of --methods drafts with a draft model, EAGLE drafter or Medusa heads; "
        "Jacobi drafts are "
        "chains");
  if (qm) runs.insert(runs.begin() + 1, Run{"vanilla", "", true, {}});

  // The sweep (llama-bench style): every combination of threads, batch and draft length. Unset
  // lists mean the single value of -t, -b and --draft-len.
  struct Config {
    int threads, batch, draft_len;
  };
  std::vector<Config> configs;
  const std::vector<int> ts = b.thread_counts.empty() ? std::vector<int>{0} : b.thread_counts;
  const std::vector<int> bs = b.batches.empty() ? std::vector<int>{b.gen.batch} : b.batches;
  const std::vector<int> ds =
      b.draft_lens.empty() ? std::vector<int>{b.gen.spec.draft_len} : b.draft_lens;
  for (int t : ts)
    for (int bt : bs)
      for (int d : ds) configs.push_back({t, bt, d});
  const bool sweep = configs.size() > 1;
  // Every run of the sweep is checked before the baseline starts: a draft length longer than the
  // image must not cost the rows before it. The error names the sweep's flag where one was given.
  for (const Config& c : configs)
    for (const Run& run : runs) {
      if (run.method == "vanilla") continue;
      GenerateOptions o = options_of(run);
      o.batch = c.batch;
      o.spec.draft_len = c.draft_len;
      if (c.draft_len != kDraftLenAuto) o.spec.auto_hold = 0;  // --draft-hold: the auto rows'
      try {
        pipe->validate(o);
      } catch (const ParameterError& e) {
        throw_sweep_error(run.method, e, !b.draft_lens.empty(), !b.batches.empty(),
                          !b.trees.empty());
      }
    }

  nlohmann::json rows = nlohmann::json::array();
  std::vector<QualityReport> quality;
  std::vector<Interval> frechet_train;  // per run, with `quality` (undefined without statistics)
  ScoredImages vanilla_scored;
  std::map<std::pair<int, int>, double> vanilla_time;  // (threads, batch): vanilla ignores L
  for (size_t ci = 0; ci < configs.size(); ++ci) {
    const Config& c = configs[ci];
    if (c.threads > 0 || sweep) pipe->set_threads(c.threads > 0 ? c.threads : b.threads);
    const std::pair<int, int> key{pipe->threads(), c.batch};
    double vanilla_s = vanilla_time.count(key) ? vanilla_time[key] : 0.0;
    for (Run& run : runs) {
      const bool floor = run.floor;
      if (floor && ci > 0) continue;  // quality is measured at the first configuration
      const std::string& m = run.method;
      if (m == "vanilla" && !floor && vanilla_time.count(key)) continue;  // measured at (t, b)
      GenerateOptions o = options_of(run);
      o.batch = c.batch;
      o.spec.draft_len = m == "vanilla" ? 0 : c.draft_len;
      if (o.spec.draft_len != kDraftLenAuto) o.spec.auto_hold = 0;
      if (floor) o.seed = b.gen.seed + kNoiseFloorSeedOffset;
      if (!b.quiet)
        std::fprintf(stderr, "bench: %s (threads %d, batch %d, draft-len %s, tree %s) ...\n",
                     run.label().c_str(), pipe->threads(), c.batch,
                     draft_len_text(o.spec.draft_len).c_str(),
                     m == "vanilla" || !run.tree.empty() ? run.tree_text().c_str() : "default");
      // -r timed repetitions of the same generation (same seeds, so the same images); the stats
      // are the last repetition's, the time their mean and standard deviation.
      const MethodRun mr = run_method(*pipe, conds, o, floor ? 1 : b.repeat);
      const GenerateStats& st = mr.stats;
      if (run.tree.empty()) run.drafted = st.tree;
      const std::vector<double>& secs = mr.seconds;
      const double mean = mr.mean_seconds(), sd = mr.stddev_seconds();
      if (m == "vanilla" && !floor) vanilla_s = vanilla_time[key] = mean;
      nlohmann::json q;
      if (qm && ci == 0) {
        ScoredImages scored = score_run(*pipe, *qm, mr, requested);
        const bool baseline = m == "vanilla" && !floor;
        if (baseline) vanilla_scored = scored;
        // Vanilla's Frechet distance to itself would be 0 by construction: no reference for it.
        quality.push_back(quality_report(scored, baseline ? nullptr : &vanilla_scored));
        q = quality_json(quality.back());
        frechet_train.push_back(train ? frechet_to_statistics(scored, *train).frechet : Interval{});
        if (train) q["frechet_vs_train"] = interval_json(frechet_train.back());
      }
      nlohmann::json r = stats_json(st, m);
      if (floor) r["method"] = run.label();
      r["tree"] = m == "vanilla" ? nlohmann::json() : nlohmann::json(run.tree_text());
      r.erase("per_image");
      r["threads"] = pipe->threads();
      r["batch"] = c.batch;
      r["draft_len"] = o.spec.draft_len > 0 ? nlohmann::json(o.spec.draft_len)
                       : o.spec.draft_len == kDraftLenAuto && m != "vanilla"
                           ? nlohmann::json("auto")
                           : nlohmann::json();
      r["repeat"] = secs.size();
      r["seconds_per_image_mean"] = mean / b.n;
      r["seconds_per_image_stddev"] = sd / b.n;
      r["speedup_vs_vanilla"] = vanilla_s / std::max(mean, 1e-12);
      const double fwd = std::max<int64_t>(st.forward_passes - 1, 1);  // decode forwards
      r["target_ms_per_forward"] = 1e3 * (st.target_seconds - st.prefill_seconds) / fwd;
      r["rule_ms_per_forward"] = 1e3 * st.rule_seconds / fwd;
      r["rule_overhead_vs_target_forward"] =
          st.rule_seconds / std::max(st.target_seconds - st.prefill_seconds, 1e-12);
      if (!q.is_null()) r["quality"] = q;
      rows.push_back(r);
    }
  }
  const SamplingOptions& s = b.gen.sampling;
  nlohmann::json j = {{"model", b.model},
                      {"device", pipe->device()},
                      {"draft", b.gen.spec.draft_model},
                      {"load", load_report_json(pipe->load_report())},
                      {"images", b.n},
                      {"seed", b.gen.seed},
                      {"repeat", b.repeat},
                      {"cfg", s.cfg_scale},
                      {"temperature", s.temperature},
                      {"top_k", s.top_k},
                      {"top_p", s.top_p},
                      {"methods", rows}};
  if (qm) j["classifier"] = b.classifier;
  if (b.format == "json") {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  const bool csv = b.format == "csv";
  if (!csv) {
    std::printf(
        "model %s on %s, draft %s, %d image(s), seed %llu, cfg %.2f, T %.2f, top-k %d, "
        "top-p %.2f, %d timed run(s) per row%s\n",
        b.model.c_str(), pipe->device().c_str(),
        b.gen.spec.draft_model.empty()
            ? "-"
            : (b.gen.spec.draft_model + (b.drafter_why.empty() ? "" : " (" + b.drafter_why + ")"))
                  .c_str(),
        b.n, static_cast<unsigned long long>(b.gen.seed), s.cfg_scale, s.temperature, s.top_k,
        s.top_p, b.repeat, b.repeat > 1 ? " (s/image: mean ± stddev)" : "");
    std::printf("%s\n", load_report_text(pipe->load_report()).c_str());
    std::printf(
        "| method | threads | batch | draft-len | tree | s/image | speed-up | MAL | NFE/img | "
        "draft fw | target%% | draft%% | verify%% | acc@1 | rules/fw | depth | nodes |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  } else {
    std::printf(
        "method,threads,batch,draft_len,tree,repeat,s_per_image,s_per_image_stddev,speedup,mal,"
        "nfe_per_image,draft_forwards,target_share,draft_share,verify_share,"
        "acceptance_depth1,rules_per_forward,mean_draft_depth,mean_draft_nodes\n");
  }
  for (const auto& r : rows) {
    const double sec = r["seconds"].get<double>();
    const auto& tsplit = r["time_split_s"];
    const auto acc = r["acceptance_by_depth"].get<std::vector<double>>();
    const std::string dl = r["draft_len"].is_null()     ? (csv ? "" : "-")
                           : r["draft_len"].is_string() ? r["draft_len"].get<std::string>()
                                                        : std::to_string(r["draft_len"].get<int>());
    const std::string tree = r["tree"].is_null() ? (csv ? "" : "-") : r["tree"].get<std::string>();
    const double depth = r["mean_draft_depth"].get<double>();
    const double nodes = r["mean_draft_nodes"].get<double>();
    const double mean = r["seconds_per_image_mean"].get<double>();
    const double sd = r["seconds_per_image_stddev"].get<double>();
    const double shares[3] = {tsplit["target"].get<double>() / sec,
                              tsplit["draft"].get<double>() / sec,
                              tsplit["verify"].get<double>() / sec};
    if (csv) {
      // A tree spec may hold commas (dynamic:4,10,58): quoted, RFC 4180.
      const std::string tree_csv = tree.find(',') == std::string::npos ? tree : '"' + tree + '"';
      std::printf(
          "%s,%d,%d,%s,%s,%d,%.6f,%.6f,%.4f,%.4f,%.2f,%lld,%.4f,%.4f,%.4f,%s,%.6f,%.3f,%.3f\n",
          r["method"].get<std::string>().c_str(), r["threads"].get<int>(), r["batch"].get<int>(),
          dl.c_str(), tree_csv.c_str(), r["repeat"].get<int>(), mean, sd,
          r["speedup_vs_vanilla"].get<double>(), r["mean_accepted_length"].get<double>(),
          r["target_forwards_per_image"].get<double>(),
          static_cast<long long>(r["batched_draft_forwards"].get<int64_t>()), shares[0], shares[1],
          shares[2], acc.empty() ? "" : fmt(acc[0], 4).c_str(),
          r["rule_overhead_vs_target_forward"].get<double>(), depth, nodes);
      continue;
    }
    const std::string t = b.repeat > 1 ? fmt(mean, 3) + " ± " + fmt(sd, 3) : fmt(mean, 3);
    std::printf(
        "| %s | %d | %d | %s | %s | %s | %.2fx | %.2f | %.1f | %lld | %.1f%% | %.1f%% | %.1f%% "
        "| %s | %.2f%% | %s | %s |\n",
        r["method"].get<std::string>().c_str(), r["threads"].get<int>(), r["batch"].get<int>(),
        dl.c_str(), tree.c_str(), t.c_str(), r["speedup_vs_vanilla"].get<double>(),
        r["mean_accepted_length"].get<double>(), r["target_forwards_per_image"].get<double>(),
        static_cast<long long>(r["batched_draft_forwards"].get<int64_t>()), 100 * shares[0],
        100 * shares[1], 100 * shares[2], acc.empty() ? "-" : fmt(acc[0], 3).c_str(),
        100 * r["rule_overhead_vs_target_forward"].get<double>(),
        depth > 0 ? fmt(depth, 2).c_str() : "-", nodes > 0 ? fmt(nodes, 2).c_str() : "-");
  }
  if (qm && !csv) {
    const double v_top1 = quality.front().top1.defined() ? quality.front().top1.value : 0.9;
    std::printf(
        "\nquality (%s; %d images per method, %d per class, 95%% bootstrap intervals%s; vanilla* "
        "is vanilla on other seeds, the noise floor; a 2-point top-1 drop needs about %lld images "
        "per method to resolve)\n",
        b.classifier.c_str(), b.n, b.per_class,
        sweep ? "; measured at the first configuration" : "",
        static_cast<long long>(images_to_separate_top1_drop(v_top1, 0.02)));
    std::printf(
        "| method | tree | top-1 %% | FD vs vanilla | FD vs train | diversity |\n"
        "|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < quality.size(); ++i)
      std::printf("| %s | %s | %s | %s | %s | %s |\n", runs[i].label().c_str(),
                  runs[i].tree_text().c_str(), interval_text(quality[i].top1, 1, 100.0).c_str(),
                  interval_text(quality[i].frechet, 1).c_str(),
                  interval_text(frechet_train[i], 1).c_str(),
                  interval_text(quality[i].diversity, 3).c_str());
  }
  if (b.legend && !csv) {
    std::printf("\n%s", kSpeedLegend);
    if (qm) std::printf("%s", quality_legend().c_str());
  }
}

}  // namespace tessera::cli
