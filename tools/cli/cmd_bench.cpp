// tessera bench: vanilla decoding speed against memory bandwidth (bench_vanilla), speculative
// methods against vanilla (bench_methods), MAR's continuous methods (mar_bench), the cost of
// a k-position forward against the roofline (bench_verify_cost), or a T5 text encoder's encode
// against transformers (bench_t5).
#include <algorithm>
#include <memory>

#include "bench_concurrent.h"
#include "bench_kernels.h"
#include "bench_methods.h"
#include "bench_t5.h"
#include "bench_vanilla.h"
#include "bench_verify_cost.h"
#include "commands.h"
#include "common.h"
#include "default_model.h"
#include "mar_commands.h"
#include "method_flags.h"

namespace tessera::cli {

namespace {

struct BenchArgs {
  CommonOpts common;
  int n = 1, tokens = 0, class_id = 0;
  bool torch = false, json = false, kernels = false;
  std::string against;
  int repeat = 1;
  std::string methods;
  GenerateOptions gen;  // --cfg, --temperature, ... and the speculative flags
  MarOnly mar;
  std::string draft_lens, batches;  // MAR sweeps
  std::string quality = "auto";     // --methods: classifier for the quality columns
  std::string format = "md", thread_counts;
  std::vector<std::string> trees;  // --trees
  bool legend = false;
  int per_class = 2;
  bool verify_cost = false;
  double read_gbs = 0.0;  // --verify-cost: given read bandwidth (0: measured)
  std::string k_range = "1:32";
  int concurrent = 0;
  DrafterChoice drafter;  // resolved from --draft and the model's companions
};

int run_mar_bench(const BenchArgs& a, const CLI::App& b) {
  if (!a.against.empty() || a.repeat != 1)
    throw Error("--against and --repeat are for LlamaGen models; MAR benches with --methods");
  CondOpts bc;
  bc.class_id = a.class_id;
  MarRunOptions mo = mar_run(a.common, bc, a.n, a.gen, a.mar, &b);
  MarBenchOptions mb;
  mb.methods = split_list(a.methods);
  for (const auto& x : split_list(a.draft_lens))
    mb.draft_lens.push_back(parse_int(x, "--draft-lens"));
  for (const auto& x : split_list(a.batches)) mb.batches.push_back(parse_int(x, "--batches"));
  mb.format = a.json ? "json" : a.format;
  mb.legend = a.legend;
  mar_bench(mo, mb);
  return 0;
}

// Every flag given must be used by this bench: checked, with the method names, before anything
// is loaded or timed (a typo in --methods must not cost a vanilla baseline first).
void check_bench_flags(const BenchArgs& a, const CLI::App& b, bool mar) {
  if (b.count("--method") > 0)
    throw Error(
        "bench compares methods with --methods a,b,c (vanilla is always the baseline); "
        "--method is generate's");
  const std::vector<std::string> methods = split_list(a.methods);
  if (methods.empty()) {
    const std::vector<std::string> flags = given_method_flags(b);
    if (!flags.empty())
      throw Error(flags.front() +
                  " applies to the methods of --methods; without it bench times "
                  "vanilla decoding only");
  } else {
    check_method_flags(b, methods, mar, "--methods");
  }
  const std::vector<std::string> mar_only = {"--steps", "--cfg-schedule"};
  const std::vector<std::string> llamagen_only = {"--top-k", "--top-p", "--torch", "--tokens"};
  for (const std::string& f : mar ? llamagen_only : mar_only)
    if (b.count(f) > 0)
      throw Error(f + " is for " + (mar ? "LlamaGen" : "MAR") + " models only; this is a " +
                  (mar ? "MAR" : "LlamaGen") + " model");
  if (methods.empty() && !mar)
    for (const char* f : {"--draft-lens", "--batches", "--thread-counts", "--output-format"})
      if (b.count(f) > 0)
        throw Error(std::string(f) +
                    " applies to --methods (sweeps and formats of the method "
                    "bench)");
  if (mar && b.count("--thread-counts") > 0)
    throw Error("--thread-counts is for LlamaGen --methods benches");
  if (b.count("--trees") > 0) {
    if (methods.empty())
      throw Error("--trees applies to --methods (a run of each method per tree)");
    if (mar)
      throw Error("--trees is for LlamaGen methods; MAR's cspd methods draft continuous windows");
    if (b.count("--tree") > 0)
      throw Error("--tree fixes one tree and --trees sweeps several: give one");
    for (const std::string& t : a.trees)
      if (t.empty()) throw Error("--trees: an empty entry (give chain for no tree)");
  }
  if (mar && methods.empty())
    for (const char* f : {"--output-format", "--legend"})
      if (b.count(f) > 0) throw Error(std::string(f) + " applies to a bench with --methods");
  if (methods.empty() || mar)
    for (const char* f : {"--quality", "--per-class"})
      if (b.count(f) > 0)
        throw Error(std::string(f) + " applies to a LlamaGen bench with --methods");
  if (methods.empty() && !mar && b.count("--legend") > 0)
    throw Error("--legend applies to a bench with --methods");
  if (!mar && methods.empty())
    for (const char* f : {"--batch", "--seed"})
      if (b.count(f) > 0)
        throw Error(std::string(f) +
                    " applies to --methods; the vanilla bench generates -n "
                    "images as one batch");
}

// --verify-cost: one forward of k positions per k; the generation flags do not apply.
int run_verify_cost_bench(const BenchArgs& a, const CLI::App& b) {
  for (const char* f : {"--methods", "--against", "--torch", "--tokens", "--json", "--batch",
                        "--seed", "--thread-counts", "--draft-lens", "--batches", "--trees",
                        "--quality", "--legend", "--per-class", "--n"})
    if (b.count(f) > 0) throw Error(std::string(f) + " does not apply to --verify-cost");
  if (!given_method_flags(b).empty())
    throw Error(given_method_flags(b).front() + " does not apply to --verify-cost");
  if (is_mar(a.common.model))
    throw Error("--verify-cost is for LlamaGen models; this is a MAR model");
  VerifyCostOptions vo;
  vo.model = a.common.model;
  vo.threads = a.common.threads;
  vo.check_weights = a.common.check_weights;
  vo.device = a.common.device;
  vo.cfg_scale = a.gen.sampling.cfg_scale;
  parse_k_range(a.k_range, vo.k_from, vo.k_to);
  vo.repeat = b.count("--repeat") > 0 ? a.repeat : 3;
  vo.format = a.format;
  vo.read_gbs = a.read_gbs;
  bench_verify_cost(vo);
  return 0;
}

// --concurrent N: whole `generate` processes, N at once against one alone, per method.
int run_concurrent_bench(const BenchArgs& a, const CLI::App& b) {
  const std::vector<std::string> allowed = {
      "--concurrent", "--model",         "--threads", "--quiet",   "--verbose",
      "--n",          "--class",         "--seed",    "--methods", "--draft",
      "--repeat",     "--output-format", "--json",    "--device"};
  for (const auto* opt : b.get_options())
    if (opt->count() > 0 &&
        std::find(allowed.begin(), allowed.end(), opt->get_name()) == allowed.end())
      throw Error(
          opt->get_name() +
          " does not apply to --concurrent (it takes -m, -t, --device, -n, --class, --seed, "
          "--methods, --draft, -r and -o md|json)");
  if (a.format == "csv") throw Error("--concurrent prints md or json, not csv");
  if (is_mar(a.common.model))
    throw Error("--concurrent is for LlamaGen models; this is a MAR model");
  ConcurrentBenchOptions co;
  co.copies = a.concurrent;
  co.model = a.common.model;
  co.draft = a.gen.spec.draft_model;
  co.threads = a.common.threads;
  co.device = a.common.device;
  co.n = a.n;
  co.class_id = a.class_id;
  co.seed = static_cast<long long>(a.gen.seed);
  co.repeat = a.repeat;
  co.format = a.json ? "json" : a.format;
  co.methods = {"vanilla"};
  for (const std::string& m : split_list(a.methods))
    if (m != "vanilla") co.methods.push_back(m);
  check_method_flags(b, co.methods, false, "--methods");  // unknown names, a missing draft
  bench_concurrent(co);
  return 0;
}

// A T5 text encoder directory: the time of encoding one prompt (bench_t5); the image flags do not
// apply.
int run_t5_bench(const BenchArgs& a, const CLI::App& b) {
  const std::vector<std::string> allowed = {
      "--model",  "--threads", "--quiet", "--verbose", "--device", "--no-check-weights",
      "--tokens", "--repeat",  "--json",  "--torch"};
  for (const auto* opt : b.get_options())
    if (opt->count() > 0 &&
        std::find(allowed.begin(), allowed.end(), opt->get_name()) == allowed.end())
      throw Error(opt->get_name() +
                  " does not apply to a T5 text encoder (it takes -m, -t, --device, --tokens, -r, "
                  "--json and --torch)");
  if (b.count("--tokens") > 0 && a.tokens < 1) throw Error("--tokens must be at least 1");
  T5BenchOptions to;
  to.model = a.common.model;
  to.threads = a.common.threads;
  to.check_weights = a.common.check_weights;
  to.device = a.common.device;
  if (b.count("--tokens") > 0) to.tokens = a.tokens;
  if (b.count("--repeat") > 0) to.repeat = a.repeat;
  to.torch = a.torch;
  to.json = a.json;
  bench_t5(to);
  return 0;
}

int run_bench(BenchArgs& a, const CLI::App& b) {
  if (a.kernels) {
    for (const auto* o : b.get_options())
      if (o->count() > 0 && o->get_name() != "--kernels" && o->get_name() != "--repeat" &&
          o->get_name() != "--json")
        throw Error(o->get_name() + " does not apply to --kernels (it takes -r and --json)");
    apply_common(a.common);
    bench_kernels(a.repeat, a.json);
    return 0;
  }
  // Without -m: the embedded default model. The methods that draft with a model use --draft, else
  // the draft the model's config.json names (as generate does); the table's header names it.
  if (a.common.model.empty()) a.common.model = default_model_dir();
  apply_common(a.common);
  if (model_architecture(a.common.model) == "t5_encoder") return run_t5_bench(a, b);
  if (a.concurrent > 0) return run_concurrent_bench(a, b);
  if (b.count("--k-range") > 0 && !a.verify_cost) throw Error("--k-range applies to --verify-cost");
  if (b.count("--read-gbs") > 0 && !a.verify_cost)
    throw Error("--read-gbs applies to --verify-cost");
  if (a.verify_cost) {
    int from = 0, to = 0;
    parse_k_range(a.k_range, from, to);  // a bad range fails before the model loads
    if (!is_mar(a.common.model))
      apply_model_sampling_defaults(load_model_config(a.common.model).sampling, b, a.gen.sampling);
    return run_verify_cost_bench(a, b);
  }
  check_bench_flags(a, b, is_mar(a.common.model));
  if (!a.methods.empty()) {
    const DrafterChoice dc =
        choose_drafter(a.common.model, split_list(a.methods), a.gen.spec.draft_model);
    a.gen.spec.draft_model = dc.dir;
    a.drafter = dc;
  }
  if (is_mar(a.common.model)) return run_mar_bench(a, b);
  // Before any note is printed or anything loaded: a bad --quality is one error line.
  const std::string classifier =
      a.methods.empty() ? "" : resolve_classifier(a.quality, a.common.model);
  // Like generate, bench samples with the model's own settings unless flags say otherwise.
  apply_model_sampling_defaults(load_model_config(a.common.model).sampling, b, a.gen.sampling);
  if (!a.methods.empty()) {
    if (a.torch) throw Error("--torch and --methods are separate benchmarks");
    if (!a.against.empty()) throw Error("--against times vanilla decoding; drop --methods");
    if (a.tokens > 0) throw Error("--methods generates whole images; drop --tokens");
    MethodsBenchOptions mo;
    mo.model = a.common.model;
    mo.threads = a.common.threads;
    mo.check_weights = a.common.check_weights;
    mo.device = a.common.device;
    mo.quiet = a.common.quiet;
    mo.n = a.n;
    mo.class_id = a.class_id;
    mo.methods = split_list(a.methods);
    mo.gen = a.gen;
    mo.format = a.json ? "json" : a.format;
    mo.repeat = a.repeat;
    for (const auto& x : split_list(a.thread_counts))
      mo.thread_counts.push_back(parse_int(x, "--thread-counts"));
    for (const auto& x : split_list(a.batches)) mo.batches.push_back(parse_int(x, "--batches"));
    for (const auto& x : split_list(a.draft_lens))
      mo.draft_lens.push_back(parse_draft_len(x, "--draft-lens"));
    const std::vector<int> lens =
        mo.draft_lens.empty() ? std::vector<int>{a.gen.spec.draft_len} : mo.draft_lens;
    if (a.gen.spec.auto_hold > 0 &&
        std::find(lens.begin(), lens.end(), kDraftLenAuto) == lens.end())
      throw Error(
          "--draft-hold is what --draft-len auto holds its lengths for; no length of this "
          "bench is auto");
    mo.trees = a.trees;
    mo.classifier = classifier;
    mo.legend = a.legend;
    mo.per_class = a.per_class;
    mo.drafter_why = a.drafter.why;
    for (const std::string& m : mo.methods) {
      const std::string dir = method_draft_dir(
          a.common.model, m, a.drafter.why == "--draft" ? a.gen.spec.draft_model : "", a.drafter);
      if (uses_draft_model(m) && dir != a.gen.spec.draft_model) mo.draft_dirs[m] = dir;
    }
    bench_methods(mo);
    return 0;
  }
  if (!a.against.empty() && is_mar(a.against))
    throw Error("--against: " + a.against + " is a MAR model; vanilla LlamaGen benches only");
  VanillaBenchOptions vo;
  vo.model = a.common.model;
  vo.against = a.against;
  vo.threads = a.common.threads;
  vo.check_weights = a.common.check_weights;
  vo.device = a.common.device;
  vo.n = a.n;
  vo.tokens = a.tokens;
  vo.class_id = a.class_id;
  vo.sampling = a.gen.sampling;
  vo.device_loop = a.gen.device_loop;
  vo.repeat = a.repeat;
  vo.torch = a.torch;
  vo.json = a.json;
  bench_vanilla(vo);
  return 0;
}

}  // namespace

Command add_bench(CLI::App& app, const ModelDefaults& md) {
  auto a = std::make_shared<BenchArgs>();
  a->gen.sampling = md.sampling;  // --help shows the model's settings, as the run uses them
  auto* b =
      app.add_subcommand("bench",
                         "Measure speed: vanilla against memory bandwidth, or --methods against "
                         "vanilla in one run, with image quality when a classifier is present; "
                         "with a T5 text encoder, the time to encode one prompt");
  add_common(b, a->common, /*model_required=*/false);
  b->add_option("-n,--n", a->n, "Images (generated as one batch)")
      ->check(int_at_least(1))
      ->capture_default_str();
  b->add_option("--tokens", a->tokens,
                "Tokens per image (default: the whole grid); with a T5 text encoder (-m T5_DIR), "
                "the prompt's tokens, EOS included (default 120)")
      ->check(int_at_least(0));
  b->add_option("--cfg", a->gen.sampling.cfg_scale, "Guidance scale (> 1 runs both halves)")
      ->capture_default_str();
  b->add_option("--class", a->class_id, "Class label (c2i)");
  add_device_loop(b, a->gen.device_loop);
  b->add_flag("--torch", a->torch,
              "Also time the project's PyTorch reference on the same model (/usr/bin/python3); "
              "with a T5 text encoder, transformers' T5EncoderModel on the same weights and ids "
              "(TESSERA_EVAL_PYTHON, default /opt/tessera-eval-venv/bin/python3)");
  b->add_flag("--json", a->json, "Print one JSON object instead of a table");
  b->add_flag("--kernels", a->kernels,
              "Time the CPU linear kernel alone at the emoji and GPT-B shapes, 1-64 rows, f16, "
              "bf16 and f32 weights (us per call and GFLOPS)");
  b->add_option("--against", a->against,
                "Time a second model directory in the same rounds (e.g. the same weights in f32) "
                "and report the tokens/s ratio");
  b->add_option("-r,--repeat", a->repeat,
                "Measured rounds: with --against, alternating between models (medians); with "
                "--methods, timed runs per row after the warm-up (mean ± stddev); with a T5 text "
                "encoder, timed encodes after the warm-up (median; default 5)")
      ->check(int_at_least(1))
      ->capture_default_str();
  b->add_option("-o,--output-format", a->format,
                "--methods and --verify-cost: md (table), csv or json")
      ->check(CLI::IsMember({"md", "csv", "json"}))
      ->capture_default_str();
  b->add_option("--thread-counts", a->thread_counts,
                "--methods: thread counts to sweep, e.g. 1,2 (every combination with --batches "
                "and --draft-lens)");
  b->add_option("--methods", a->methods,
                "Compare methods (comma-separated, e.g. sd,lantern,cool-sd) against vanilla on the "
                "same classes and seeds in this run");
  b->add_option("--quality", a->quality,
                "--methods: classifier directory for image-quality columns (top-1, Frechet "
                "distance to vanilla, diversity; docs/quality.md); auto: the classifier "
                "MODEL/config.json names, else MODEL/../classifier if present; off: speed only")
      ->capture_default_str();
  b->add_flag("--legend", a->legend, "--methods: print what each column means after the tables");
  b->add_option("--per-class", a->per_class,
                "--methods: images per class; image i has class (--class + i / this) (pixel "
                "diversity compares images of one class)")
      ->check(int_at_least(1))
      ->capture_default_str();
  b->add_option("-b,--batch", a->gen.batch, "Images generated together (--methods)")
      ->check(int_at_least(1))
      ->capture_default_str();
  b->add_option("-s,--seed", a->gen.seed, "Random seed (--methods)")->capture_default_str();
  b->add_option("--temperature", a->gen.sampling.temperature, "Sampling temperature")
      ->capture_default_str();
  b->add_option("--top-k", a->gen.sampling.top_k, "Top-k")->capture_default_str();
  b->add_option("--top-p", a->gen.sampling.top_p, "Top-p")->capture_default_str();
  add_method_flags(b, a->gen.spec, md);
  add_mar_options(b, a->mar, md);
  b->add_option("--draft-lens", a->draft_lens,
                "--methods: draft lengths to sweep, e.g. auto,4,8,16,32");
  b->add_option("--batches", a->batches, "--methods: batch sizes to sweep, e.g. 1,8,32");
  b->add_option("--trees", a->trees,
                "--methods: run each method that drafts with a model once per tree, e.g. --trees "
                "chain mc_sim_7b_63 dynamic:4,10,58 (chain: no tree; --tree's specs otherwise; "
                "the table's tree column names each run's)");
  b->add_flag("--verify-cost", a->verify_cost,
              "Time one forward of k new positions (k = 1..32, 2k rows with CFG) after half an "
              "image, as a ratio to k = 1, against the roofline max(bytes/bandwidth, "
              "flops/peak) from the measured read bandwidth and FMA peak (-o md|csv|json); md "
              "and json add a probe: an overhead-free loop reading weights with 1-32 rows of "
              "FMAs, against the same kind of bound; beside each k, the speculative device "
              "loop's verification of k - 1 drafts (upload, distributions, walk, download)");
  b->add_option("--k-range", a->k_range, "--verify-cost: FROM:TO positions per forward")
      ->capture_default_str();
  b->add_option("--concurrent", a->concurrent,
                "Start N copies of the same `generate` run at once (vanilla, then each of "
                "--methods) and report each copy's time against the run alone (-o md|json)")
      ->check(int_at_least(1));
  b->add_option("--read-gbs", a->read_gbs,
                "--verify-cost: the roofline's read bandwidth in GB/s (e.g. the memory's "
                "datasheet figure); default: measured")
      ->check(CLI::PositiveNumber);
  return {b, [a, b] { return run_bench(*a, *b); }};
}

}  // namespace tessera::cli
