// tessera command-line tool: a thin front-end over the public API (include/tessera/tessera.h).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench_vanilla.h"
#include "default_model.h"
#include "heatmap.h"
#include "image_output.h"
#include "mar_commands.h"
#include "progress.h"
#include "tessera/class_names.h"
#include "tessera/image_io.h"
#include "tessera/log.h"
#include "tessera/mar.h"
#include "tessera/tessera.h"
#include "text_format.h"

namespace fs = std::filesystem;
using namespace tessera;

namespace {

struct CommonOpts {
  std::string model;
  int threads = 0;
  bool quiet = false;
};

// Integers >= min, with a message that says so (CLI11's PositiveNumber prints a float range).
CLI::Validator int_at_least(long long min) {
  return CLI::Validator(
      [min](std::string& v) -> std::string {
        size_t used = 0;
        long long x = 0;
        try {
          x = std::stoll(v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != v.size() || used == 0) return "'" + v + "' is not an integer";
        if (x < min) return "must be at least " + std::to_string(min) + ", got " + v;
        return "";
      },
      "INT>=" + std::to_string(min));
}

// Fails before any work when an output file's directory does not exist.
void check_output_path(const std::string& path, const char* flag) {
  if (path.empty()) return;
  const fs::path dir = fs::path(path).parent_path();
  if (!dir.empty() && !fs::is_directory(dir))
    throw Error(std::string(flag) + " " + path + ": directory " + dir.string() + " does not exist");
}

void add_common(CLI::App* cmd, CommonOpts& o, bool model_required = true) {
  auto* m = cmd->add_option("-m,--model", o.model, "Model directory (config.json + safetensors)");
  if (model_required) m->required();
  cmd->add_option("-t,--threads", o.threads, "CPU threads (default: all cores)")
      ->check(int_at_least(0));
  cmd->add_flag("-q,--quiet", o.quiet, "No progress or info messages on stderr");
}

struct CondOpts {
  int class_id = -1;
  std::string caption;
  bool uncond = false;
};

Condition make_condition(const CondOpts& c, const GptConfig& cfg) {
  const int given = (c.class_id >= 0) + !c.caption.empty() + c.uncond;
  if (given != 1)
    throw Error(cfg.is_c2i() ? "give exactly one of --class N or --uncond"
                             : "give exactly one of --caption FILE or --uncond");
  if (c.uncond) return Condition::unconditional();
  if (!c.caption.empty()) return Condition::caption_file(c.caption, cfg);
  if (!cfg.is_c2i())
    throw Error("this model is text-conditional (t2i): use --caption, not --class");
  if (c.class_id >= cfg.num_classes)
    throw Error("class " + std::to_string(c.class_id) + " out of range [0, " +
                std::to_string(cfg.num_classes) + ")");
  return Condition::label(c.class_id);
}

void write_images(Pipeline& pipe, const std::vector<int32_t>& flat, int n, const std::string& out,
                  bool grid, const std::vector<std::string>& params) {
  cli::write_pngs(pipe.decode(flat, n), n, pipe.image_size(), out, grid, params);
}

using cli::fmt;

// The speculative-decoding flags of generate and bench; each method's parameters carry its name.
void add_spec_options(CLI::App* cmd, SpeculativeOptions& o) {
  cmd->add_option("--method", o.method,
                  "vanilla|sd|sjd|lantern|lantern++|gsd|uniform-rsd|cool-sd|amplify|addition")
      ->capture_default_str();
  cmd->add_option("--draft", o.draft_model,
                  "Draft model directory (same VQ vocabulary); without it drafts come from "
                  "Jacobi iteration");
  cmd->add_option("--draft-len", o.draft_len,
                  "Draft tokens per round (default 5); with Jacobi drafts the window incl. the "
                  "last token (default 16)")
      ->check(int_at_least(1));
  cmd->add_option("--resample", o.resample,
                  "Resampling at a rejection: vanilla (the method's own) or optimal (G*, seed 004 "
                  "Eq. 5); default: optimal for cool-sd/uniform-rsd, vanilla otherwise");
  cmd->add_option("--lantern-k", o.lantern_k, "LANTERN neighbours k (default 1000; lantern++: 10)")
      ->check(int_at_least(1));
  cmd->add_option("--lantern-delta", o.lantern_delta, "LANTERN total-variation budget δ")
      ->capture_default_str();
  cmd->add_option("--lantern-lambda", o.lantern_lambda, "LANTERN++ λ")->capture_default_str();
  cmd->add_option("--lantern-metric", o.lantern_metric, "Latent distance: l2 or cosine")
      ->capture_default_str();
  cmd->add_flag("--lantern-reference", o.lantern_reference,
                "The published code's B_k (k others), <= test and residual (docs/methods.md)");
  cmd->add_option("--gsd-g", o.gsd_g, "GSD cluster size G")->capture_default_str();
  cmd->add_option("--gsd-d", o.gsd_d, "GSD embedding-distance threshold d")->capture_default_str();
  cmd->add_option("--gsd-delta", o.gsd_delta, "GSD probability-gap threshold δ")
      ->capture_default_str();
  cmd->add_option("--gsd-embedding", o.gsd_embedding,
                  "GSD distance embedding: tokens (target input embeddings) or codebook")
      ->capture_default_str();
  cmd->add_option("--rsd-delta", o.rsd_delta, "UniformRSD relaxation ω = δ")->capture_default_str();
  cmd->add_option("--cool-delta", o.cool_delta, "COOL-SD relaxation budget δ")
      ->capture_default_str();
  cmd->add_option("--cool-nu", o.cool_nu, "COOL-SD decay ν")->capture_default_str();
  cmd->add_option("--amplify-k", o.amplify_k, "Amplify factor k")->capture_default_str();
  cmd->add_option("--addition-eps", o.addition_eps, "Addition ε")->capture_default_str();
}

nlohmann::json image_stats_json(const ImageStats& s) {
  return {{"tokens", s.tokens},
          {"rounds", s.rounds},
          {"target_forwards", s.target_forwards},
          {"draft_forwards", s.draft_forwards},
          {"mean_accepted_length", s.mean_accepted_length()},
          {"proposed_by_depth", s.proposed},
          {"accepted_by_depth", s.accepted},
          {"acceptance_by_depth", s.acceptance_by_depth()}};
}

nlohmann::json stats_json(const GenerateStats& st, const std::string& method) {
  nlohmann::json per = nlohmann::json::array();
  for (const auto& s : st.per_image) per.push_back(image_stats_json(s));
  const double img = std::max<int64_t>(st.images, 1);
  return {{"method", method},
          {"images", st.images},
          {"tokens", st.tokens},
          {"seconds", st.seconds},
          {"seconds_per_image", st.seconds / img},
          {"tokens_per_s", st.tokens / std::max(st.seconds, 1e-9)},
          {"mean_accepted_length", st.mean_accepted_length()},
          {"target_forwards_per_image", st.target_forwards() / img},
          {"batched_target_forwards", st.forward_passes},
          {"batched_draft_forwards", st.draft_forward_passes},
          {"acceptance_by_depth", st.acceptance_by_depth()},
          {"time_split_s",
           {{"target", st.target_seconds},
            {"draft", st.draft_seconds},
            {"verify", st.verify_seconds},
            {"rules", st.rule_seconds}}},
          {"per_image", per}};
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// MAR-only flags of generate and bench.
struct MarOnly {
  int steps = 64;
  std::string cfg_schedule = "linear";
  float prefill = 0.05f;
  float inner_temperature = 42.0f;
  int test_step = -1;
  int max_tries = 100;
};

void add_mar_options(CLI::App* cmd, MarOnly& o) {
  cmd->add_option("--steps", o.steps, "MAR: autoregressive steps (64; 256 = one token per step)")
      ->check(int_at_least(1))
      ->capture_default_str();
  cmd->add_option("--cfg-schedule", o.cfg_schedule, "MAR: guidance schedule, linear or constant")
      ->capture_default_str();
  cmd->add_option("--prefill", o.prefill,
                  "MAR cspd*: fraction of the steps run by the target first (seed 002 §3.2)")
      ->capture_default_str();
  cmd->add_option("--inner-temperature", o.inner_temperature,
                  "MAR cspd-reference: the published code's inner temperature")
      ->capture_default_str();
  cmd->add_option("--cspd-test-step", o.test_step,
                  "MAR cspd-exact: respaced diffusion step tested (default: half way)");
  cmd->add_option("--max-resample-tries", o.max_tries,
                  "MAR cspd*: accept-reject tries before falling back to the target mean")
      ->check(int_at_least(1))
      ->capture_default_str();
}

bool is_mar(const std::string& dir) {
  return !dir.empty() && model_architecture(dir) == "mar";
}

int parse_int(const std::string& v, const char* flag) {
  size_t used = 0;
  int x = 0;
  try {
    x = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || x < 1)
    throw Error(std::string(flag) + ": '" + v + "' is not a positive integer");
  return x;
}

// The MAR run options from the shared flags. MAR's own defaults (main_mar.py) apply where a shared
// flag was not given: cfg 1.0 (no guidance), temperature 1.0, draft length 8.
cli::MarRunOptions mar_run(const CommonOpts& common, const CondOpts& cond, int n,
                           const GenerateOptions& g, const MarOnly& m, CLI::App* cmd) {
  if (!cond.caption.empty())
    throw Error("MAR models are class-conditional: use --class, not --caption");
  cli::MarRunOptions o;
  o.model = common.model;
  o.threads = common.threads;
  o.quiet = common.quiet;
  o.class_id = cond.class_id;
  o.uncond = cond.uncond;
  o.n = n;
  MarGenerateOptions& mg = o.gen;
  mg.seed = g.seed;
  mg.batch = g.batch;
  const bool given_cfg = cmd && cmd->count("--cfg") > 0;
  mg.sampling.cfg_scale = given_cfg ? g.sampling.cfg_scale : 1.0f;
  mg.sampling.temperature = cmd && cmd->count("--temperature") > 0 ? g.sampling.temperature : 1.0f;
  // MAR's default of 64 steps, capped at the model's tokens (a small model may have fewer).
  mg.sampling.num_iter = cmd && cmd->count("--steps") > 0 ? m.steps : 0;
  mg.sampling.cfg_schedule = m.cfg_schedule;
  mg.spec.method = g.spec.method;
  mg.spec.draft_model = g.spec.draft_model;
  mg.spec.draft_len = g.spec.draft_len > 0 ? g.spec.draft_len : 8;
  mg.spec.prefill = m.prefill;
  mg.spec.inner_temperature = m.inner_temperature;
  mg.spec.exact_test_step = m.test_step;
  mg.spec.max_resample_tries = m.max_tries;
  return o;
}

// The model's recommended sampling settings (config.json "sampling") for each flag not given.
void apply_model_sampling_defaults(const SamplingDefaults& d, const CLI::App& cmd,
                                   SamplingOptions& s) {
  std::string used;
  auto take = [&](const char* flag, const auto& value, auto& field) {
    if (!value || cmd.count(flag) > 0) return;
    field = *value;
    std::ostringstream v;
    v << *value;
    used += std::string(used.empty() ? "" : ", ") + (flag + 2) + " " + v.str();
  };
  take("--cfg", d.cfg, s.cfg_scale);
  take("--temperature", d.temperature, s.temperature);
  take("--top-k", d.top_k, s.top_k);
  take("--top-p", d.top_p, s.top_p);
  if (!used.empty()) log_info("the model's sampling settings (config.json): " + used);
}

int model_num_classes(const std::string& dir) {
  const ModelConfig mc = load_model_config(dir);
  return mc.is_mar() ? mc.mar.num_classes : (mc.gpt.is_c2i() ? mc.gpt.num_classes : 0);
}

ClassNames model_class_names(const std::string& dir) {
  if (!ClassNames::present(dir))
    throw Error(dir + " has no classes.json (class names); use --class N");
  return ClassNames::load(dir, model_num_classes(dir));
}

// Sets cond.class_id from a prompt; returns the matched class's label.
std::string resolve_prompt(const std::string& dir, const std::string& prompt,
                           const std::string& style, CondOpts& cond) {
  const ClassNames names = model_class_names(dir);
  const ClassMatch m = names.match(prompt, style);
  cond.class_id = m.class_id;
  const std::string label = names.label(m.class_id);
  log_info("prompt '" + prompt + "' -> class " + std::to_string(m.class_id) + ": " + label +
           (m.how == "exact" ? "" : " (matched by " + m.how + ")"));
  if (names.classes()[m.class_id].held_out)
    log_info("note: class " + std::to_string(m.class_id) +
             " was held out of this model's training (its drawing in this style was never "
             "seen), so expect a poor image; another --style may do better");
  return label;
}

void list_classes(const std::string& dir, const std::string& filter, const std::string& style) {
  const ClassNames names = model_class_names(dir);
  const std::vector<int> ids = names.find_words(filter, style);
  for (int i : ids) {
    const ClassName& c = names.classes()[i];
    std::printf("%6d  %-40s %-9s %s%s\n", i, c.name.c_str(), c.style.c_str(), c.category.c_str(),
                c.held_out ? "  (held out of training)" : "");
  }
  log_info(std::to_string(ids.size()) + " of " + std::to_string(names.classes().size()) +
           " classes");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera: autoregressive image generation (LlamaGen) with speculative decoding"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tessera 0.1.0");

  // ---- generate -------------------------------------------------------------------------------
  CommonOpts gen_common;
  CondOpts gen_cond;
  GenerateOptions gen;
  int gen_n = 1;
  std::string gen_out, gen_tokens_out;
  bool gen_grid = false;
  std::string gen_prompt, gen_style;
  auto* g = app.add_subcommand(
      "generate",
      "Generate images (or token grids) from a prompt, a class or a caption; without -m it uses "
      "the embedded emoji model, e.g. tessera generate \"red apple\"");
  add_common(g, gen_common, /*model_required=*/false);
  g->add_option("prompt", gen_prompt,
                "Class name to match (models with classes.json, such as the default emoji model)");
  g->add_option("--style", gen_style,
                "Drawing style for a prompt (emoji model: twitter, google or openmoji)");
  g->add_option("--class", gen_cond.class_id, "Class label (c2i models)")->check(int_at_least(0));
  g->add_option("--caption", gen_cond.caption,
                "T5 caption features, .npy [rows, dim] or .safetensors (t2i)");
  g->add_flag("--uncond", gen_cond.uncond, "Unconditional generation (null class / empty caption)");
  g->add_option("-n,--n", gen_n, "Number of images")->check(int_at_least(1));
  g->add_option("-b,--batch", gen.batch, "Images generated together")->check(int_at_least(1));
  g->add_option("-s,--seed", gen.seed, "Random seed; image i uses stream (seed, i)");
  g->add_option("--cfg", gen.sampling.cfg_scale, "Classifier-free guidance scale (<= 1: off)")
      ->capture_default_str();
  g->add_option("--cfg-interval", gen.sampling.cfg_interval,
                "Guide only while the decode step index <= this (-1: always)")
      ->capture_default_str();
  g->add_option("--temperature", gen.sampling.temperature, "Sampling temperature (0: greedy)")
      ->capture_default_str();
  g->add_option("--top-k", gen.sampling.top_k, "Keep the k most likely tokens (0: off)")
      ->capture_default_str();
  g->add_option("--top-p", gen.sampling.top_p, "Nucleus sampling threshold (1: off)")
      ->capture_default_str();
  g->add_option("-o,--output", gen_out, "Output PNG (numbered _0000.. when --n > 1)");
  g->add_option("--tokens-out", gen_tokens_out, "Write token grids [n, grid, grid] as int32 .npy");
  g->add_flag("--grid", gen_grid, "Write all images as one grid PNG");
  std::string gen_stats_out, gen_heatmap_out;
  add_spec_options(g, gen.spec);
  g->add_option("--stats-out", gen_stats_out,
                "Write per-image and aggregate statistics (NFE, accepted lengths, ...) as JSON");
  g->add_option("--heatmap-out", gen_heatmap_out,
                "Write each image's acceptance heatmap over the token grid (PNG)");
  MarOnly gen_mar;
  add_mar_options(g, gen_mar);
  std::string gen_latents_out;
  g->add_option("--latents-out", gen_latents_out,
                "MAR: write the generated latents [n, seq_len, token_dim] as float32 .npy");

  // ---- forward --------------------------------------------------------------------------------
  CommonOpts fwd_common;
  CondOpts fwd_cond;
  std::string fwd_tokens, fwd_out;
  auto* f =
      app.add_subcommand("forward", "Teacher-forced logits for a token sequence (no guidance)");
  add_common(f, fwd_common);
  f->add_option("--class", fwd_cond.class_id, "Class label (c2i)")->check(int_at_least(0));
  f->add_option("--caption", fwd_cond.caption, "Caption features file (t2i)");
  f->add_flag("--uncond", fwd_cond.uncond, "Unconditional prefix");
  f->add_option("--tokens", fwd_tokens, "Comma-separated token ids, e.g. 3,17,5 (may be empty)");
  f->add_option("--logits-out", fwd_out, "Output .npy, float32 [len+1, vocab] (LlamaGen)");
  std::string fwd_latents, fwd_unknown, fwd_z_out;
  f->add_option("--latents", fwd_latents, "MAR: canvas latents .npy [seq_len, token_dim]");
  f->add_option("--unknown", fwd_unknown, "MAR: mask .npy [seq_len], nonzero = masked");
  f->add_option("--z-out", fwd_z_out, "MAR: output .npy, float32 z [seq_len, dim]");

  // ---- decode ---------------------------------------------------------------------------------
  CommonOpts dec_common;
  std::string dec_tokens, dec_out;
  bool dec_grid = false;
  auto* d = app.add_subcommand("decode", "Decode token grids (.npy) to PNG images");
  add_common(d, dec_common);
  d->add_option("--tokens", dec_tokens,
                ".npy of token ids: [grid,grid], [n,grid,grid] or [n,grid*grid]");
  std::string dec_latents;
  d->add_option("--latents", dec_latents, "MAR: .npy of latents [n, seq_len, token_dim]");
  d->add_option("-o,--output", dec_out, "Output PNG (numbered when several)")->required();
  d->add_flag("--grid", dec_grid, "Write all images as one grid PNG");

  // ---- bench ----------------------------------------------------------------------------------
  CommonOpts b_common;
  int b_n = 1, b_tokens = 0, b_class = 0;
  float b_cfg = 4.0f;
  bool b_torch = false, b_json = false;
  // ---- classes --------------------------------------------------------------------------------
  CommonOpts cls_common;
  std::string cls_filter, cls_style;
  auto* c = app.add_subcommand("classes",
                               "List a model's class names (default: the embedded emoji model)");
  add_common(c, cls_common, /*model_required=*/false);
  c->add_option("filter", cls_filter, "Only names containing these words");
  c->add_option("--style", cls_style, "Only this style");

  auto* b =
      app.add_subcommand("bench", "Measure vanilla generation speed against memory bandwidth");
  add_common(b, b_common);
  b->add_option("-n,--n", b_n, "Images (generated as one batch)")->check(int_at_least(1));
  b->add_option("--tokens", b_tokens, "Tokens per image (default: the whole grid)")
      ->check(int_at_least(0));
  b->add_option("--cfg", b_cfg, "Guidance scale (> 1 runs both halves)")->capture_default_str();
  b->add_option("--class", b_class, "Class label (c2i)");
  b->add_flag("--torch", b_torch,
              "Also time the project's PyTorch reference on the same model (/usr/bin/python3)");
  b->add_flag("--json", b_json, "Print one JSON object instead of a table");
  std::string b_against;
  int b_repeat = 1;
  b->add_option("--against", b_against,
                "Time a second model directory in the same rounds (e.g. the same weights in f32) "
                "and report the tokens/s ratio");
  b->add_option("--repeat", b_repeat,
                "Measured rounds (order alternates between models; medians are reported)")
      ->check(int_at_least(1));
  std::string b_methods;
  GenerateOptions b_gen;
  b->add_option("--methods", b_methods,
                "Compare methods (comma-separated, e.g. sd,lantern,cool-sd) against vanilla on the "
                "same classes and seeds in this run");
  b->add_option("-b,--batch", b_gen.batch, "Images generated together (--methods)")
      ->check(int_at_least(1));
  b->add_option("-s,--seed", b_gen.seed, "Random seed (--methods)");
  b->add_option("--temperature", b_gen.sampling.temperature, "Sampling temperature")
      ->capture_default_str();
  b->add_option("--top-k", b_gen.sampling.top_k, "Top-k")->capture_default_str();
  b->add_option("--top-p", b_gen.sampling.top_p, "Top-p")->capture_default_str();
  add_spec_options(b, b_gen.spec);
  MarOnly b_mar;
  add_mar_options(b, b_mar);
  std::string b_draft_lens, b_batches;
  b->add_option("--draft-lens", b_draft_lens,
                "MAR --methods: draft lengths to sweep, e.g. 4,8,16,32");
  b->add_option("--batches", b_batches, "MAR --methods: batch sizes to sweep, e.g. 1,8,32");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    std::fprintf(stderr, "error: %s (see tessera --help)\n", msg.c_str());
    return 2;
  }

  try {
    if (g->parsed()) {
      set_log_level(gen_common.quiet ? LogLevel::Quiet : LogLevel::Info);
      const bool default_model = gen_common.model.empty();
      if (default_model) {
        gen_common.model = cli::default_model_dir();
        // Draft-based methods use the draft shipped with the default model.
        if (gen.spec.draft_model.empty() && gen.spec.method != "vanilla" &&
            gen.spec.method != "sjd")
          gen.spec.draft_model = cli::sibling_draft_dir(gen_common.model);
      }
      std::string prompt_label;
      if (!gen_prompt.empty()) {
        if (gen_cond.class_id >= 0 || !gen_cond.caption.empty() || gen_cond.uncond)
          throw Error("give a prompt or --class/--caption/--uncond, not both");
        prompt_label = resolve_prompt(gen_common.model, gen_prompt, gen_style, gen_cond);
        if (gen_out.empty() && gen_tokens_out.empty() && gen_latents_out.empty())
          gen_out = cli::prompt_file_name(prompt_label);
      } else if (!gen_style.empty()) {
        throw Error("--style selects the drawing of a prompt; give a prompt, e.g. \"red apple\"");
      } else if (default_model && gen_cond.class_id < 0 && !gen_cond.uncond) {
        throw Error(
            "give a prompt, e.g. tessera generate \"red apple\" (tessera classes lists "
            "the names), or -m DIR --class N");
      }
      if (gen_out.empty() && gen_tokens_out.empty() && gen_latents_out.empty())
        throw Error("nothing to write: give -o OUT.png and/or --tokens-out T.npy");
      if (gen_grid && gen_out.empty()) throw Error("--grid needs -o OUT.png");
      check_output_path(gen_out, "-o");
      check_output_path(gen_tokens_out, "--tokens-out");
      check_output_path(gen_stats_out, "--stats-out");
      check_output_path(gen_heatmap_out, "--heatmap-out");
      if (is_mar(gen_common.model)) {
        cli::MarRunOptions mo = mar_run(gen_common, gen_cond, gen_n, gen, gen_mar, g);
        cli::mar_generate(mo, {gen_out, gen_latents_out, gen_stats_out, gen_heatmap_out, gen_grid});
        return 0;
      }
      if (!gen_latents_out.empty()) throw Error("--latents-out is for MAR models");
      LoadOptions lo;
      lo.threads = gen_common.threads;
      lo.load_decoder = !gen_out.empty();
      auto pipe = Pipeline::load(gen_common.model, lo);
      const GptConfig& cfg = pipe->config().gpt;
      apply_model_sampling_defaults(pipe->config().sampling, *g, gen.sampling);
      if (!gen_out.empty() && !pipe->has_decoder())
        throw Error(gen_common.model + " has no VQ decoder: use --tokens-out only");
      const Condition cond = make_condition(gen_cond, cfg);
      std::vector<Condition> conds(gen_n, cond);
      cli::ProgressBar bar("generate", !gen_common.quiet);
      gen.progress = [&](int64_t done, int64_t total) { bar.update(done, total); };
      GenerateStats st;
      auto grids = pipe->generate(conds, gen, &st);
      bar.finish();
      log_info("generated " + std::to_string(st.images) + " image(s), " +
               std::to_string(st.tokens) + " tokens in " + fmt(st.seconds) + " s (" +
               fmt(st.tokens / std::max(st.seconds, 1e-9), 1) + " tokens/s, " + gen.spec.method +
               ", mean accepted length " + fmt(st.mean_accepted_length()) + ", " +
               fmt(static_cast<double>(st.target_forwards()) / std::max<int64_t>(st.images, 1), 1) +
               " target forwards per image)");
      if (!gen_stats_out.empty()) {
        std::ofstream f(gen_stats_out);
        f << stats_json(st, gen.spec.method).dump(2) << "\n";
        if (!f) throw Error("--stats-out " + gen_stats_out + ": cannot write");
        log_info("wrote " + gen_stats_out);
      }
      if (!gen_heatmap_out.empty()) {
        int depth = 1;
        for (const auto& s : st.per_image) depth = std::max<int>(depth, s.proposed.size());
        for (int i = 0; i < gen_n; ++i) {
          const std::string path = cli::numbered(gen_heatmap_out, i, gen_n);
          cli::write_acceptance_heatmap(
              path, st.per_image[i].accepted_depth, cfg.grid, depth,
              "acceptance over the token grid; method=" + gen.spec.method +
                  "; dark = sampled by the target, yellow..blue = accepted at draft depth 1.." +
                  std::to_string(depth));
          log_info("wrote " + path);
        }
      }
      std::vector<int32_t> flat;
      for (const auto& gr : grids) flat.insert(flat.end(), gr.begin(), gr.end());
      if (!gen_tokens_out.empty()) {
        write_npy(gen_tokens_out, {gen_n, cfg.grid, cfg.grid}, flat);
        log_info("wrote " + gen_tokens_out);
      }
      if (!gen_out.empty()) {
        std::vector<std::string> params;
        std::string cond_str =
            gen_cond.uncond
                ? "uncond"
                : (!gen_cond.caption.empty() ? "caption=" + gen_cond.caption
                                             : "class=" + std::to_string(gen_cond.class_id));
        if (!prompt_label.empty()) cond_str += " (" + prompt_label + ")";
        for (int i = 0; i < gen_n; ++i)
          params.push_back("model=" + gen_common.model + "; " + cond_str +
                           "; method=" + gen.spec.method + "; seed=" + std::to_string(gen.seed) +
                           "; image_index=" + std::to_string(i) +
                           "; cfg=" + fmt(gen.sampling.cfg_scale, 3) +
                           "; cfg_interval=" + fmt(gen.sampling.cfg_interval, 3) +
                           "; temperature=" + fmt(gen.sampling.temperature, 3) +
                           "; top_k=" + std::to_string(gen.sampling.top_k) +
                           "; top_p=" + fmt(gen.sampling.top_p, 3) + "; tessera 0.1.0");
        write_images(*pipe, flat, gen_n, gen_out, gen_grid, params);
      }
    } else if (f->parsed()) {
      set_log_level(fwd_common.quiet ? LogLevel::Quiet : LogLevel::Info);
      LoadOptions lo;
      lo.threads = fwd_common.threads;
      lo.load_decoder = false;
      check_output_path(fwd_out, "--logits-out");
      check_output_path(fwd_z_out, "--z-out");
      if (is_mar(fwd_common.model)) {
        if (fwd_z_out.empty()) throw Error("forward on a MAR model needs --z-out Z.npy");
        GenerateOptions unused;
        MarOnly none;
        cli::MarRunOptions mo = mar_run(fwd_common, fwd_cond, 1, unused, none, nullptr);
        cli::mar_forward(mo, fwd_latents, fwd_unknown, fwd_z_out);
        return 0;
      }
      if (fwd_out.empty()) throw Error("--logits-out is required");
      auto pipe = Pipeline::load(fwd_common.model, lo);
      const GptConfig& cfg = pipe->config().gpt;
      std::vector<int32_t> tokens;
      std::stringstream ss(fwd_tokens);
      for (std::string item; std::getline(ss, item, ',');) {
        if (item.empty()) continue;
        size_t used = 0;
        long v = 0;
        try {
          v = std::stol(item, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != item.size()) throw Error("--tokens: '" + item + "' is not an integer");
        if (v < 0 || v >= cfg.vocab_size)
          throw Error("--tokens: token " + item + " out of range [0, " +
                      std::to_string(cfg.vocab_size) + ")");
        tokens.push_back(static_cast<int32_t>(v));
      }
      const Condition cond = make_condition(fwd_cond, cfg);
      const auto logits = pipe->forward_logits(cond, tokens);
      write_npy(fwd_out, {static_cast<int64_t>(tokens.size()) + 1, cfg.vocab_size}, logits);
      log_info("wrote " + fwd_out);
    } else if (d->parsed()) {
      set_log_level(dec_common.quiet ? LogLevel::Quiet : LogLevel::Info);
      LoadOptions lo;
      lo.threads = dec_common.threads;
      check_output_path(dec_out, "-o");
      if (is_mar(dec_common.model)) {
        if (dec_latents.empty()) throw Error("decode on a MAR model needs --latents L.npy");
        cli::MarRunOptions mo;
        mo.model = dec_common.model;
        mo.threads = dec_common.threads;
        cli::mar_decode(mo, dec_latents, dec_out, dec_grid);
        return 0;
      }
      if (dec_tokens.empty()) throw Error("--tokens is required");
      auto pipe = Pipeline::load(dec_common.model, lo);
      const GptConfig& cfg = pipe->config().gpt;
      if (!pipe->has_decoder()) throw Error(dec_common.model + " has no VQ decoder");
      const NpyData<int32_t> a = read_npy_ints(dec_tokens);
      const std::vector<int32_t>& ids = a.values;
      const int64_t per = static_cast<int64_t>(cfg.grid) * cfg.grid;
      const bool shape_ok =
          (a.shape.size() == 2 && a.shape[0] == cfg.grid && a.shape[1] == cfg.grid) ||
          (a.shape.size() == 1 && a.shape[0] == per) ||
          (a.shape.size() == 3 && a.shape[1] == cfg.grid && a.shape[2] == cfg.grid) ||
          (a.shape.size() == 2 && a.shape[1] == per);
      if (!shape_ok || ids.empty())
        throw Error(dec_tokens + ": token array has shape " + shape_string(a.shape) +
                    "; expected [" + std::to_string(cfg.grid) + ", " + std::to_string(cfg.grid) +
                    "], [n, " + std::to_string(cfg.grid) + ", " + std::to_string(cfg.grid) +
                    "] or [n, " + std::to_string(per) + "]");
      for (int32_t t : ids)
        if (t < 0 || t >= cfg.vocab_size)
          throw Error(dec_tokens + ": token " + std::to_string(t) + " out of range [0, " +
                      std::to_string(cfg.vocab_size) + ")");
      const int n = static_cast<int>(static_cast<int64_t>(ids.size()) / per);
      std::vector<std::string> params(n, "decoded from " + dec_tokens + "; tessera 0.1.0");
      write_images(*pipe, ids, n, dec_out, dec_grid, params);
    } else if (c->parsed()) {
      set_log_level(cls_common.quiet ? LogLevel::Quiet : LogLevel::Info);
      if (cls_common.model.empty()) cls_common.model = cli::default_model_dir();
      list_classes(cls_common.model, cls_filter, cls_style);
    } else if (b->parsed()) {
      set_log_level(b_common.quiet ? LogLevel::Quiet : LogLevel::Info);
      LoadOptions lo;
      lo.threads = b_common.threads;
      lo.load_decoder = false;
      if (is_mar(b_common.model)) {
        if (!b_against.empty() || b_repeat != 1)
          throw Error("--against and --repeat are for LlamaGen models; MAR benches with --methods");
        CondOpts bc;
        bc.class_id = b_class;
        GenerateOptions bg = b_gen;
        bg.sampling.cfg_scale = b_cfg;
        cli::MarRunOptions mo = mar_run(b_common, bc, b_n, bg, b_mar, b);
        cli::MarBenchOptions mb;
        mb.methods = split_list(b_methods);
        for (const auto& x : split_list(b_draft_lens))
          mb.draft_lens.push_back(parse_int(x, "--draft-lens"));
        for (const auto& x : split_list(b_batches)) mb.batches.push_back(parse_int(x, "--batches"));
        mb.json = b_json;
        cli::mar_bench(mo, mb);
        return 0;
      }
      {  // like generate, bench samples with the model's own settings unless flags say otherwise
        SamplingOptions s = b_gen.sampling;
        s.cfg_scale = b_cfg;
        apply_model_sampling_defaults(load_model_config(b_common.model).sampling, *b, s);
        b_gen.sampling = s;
        b_cfg = s.cfg_scale;
      }
      if (!b_methods.empty()) {
        auto pipe = Pipeline::load(b_common.model, lo);
        const GptConfig& cfg = pipe->config().gpt;
        if (b_torch) throw Error("--torch and --methods are separate benchmarks");
        if (!b_against.empty() || b_repeat != 1)
          throw Error("--against and --repeat time vanilla decoding; drop --methods");
        if (b_tokens > 0) throw Error("--methods generates whole images; drop --tokens");
        std::vector<std::string> methods = split_list(b_methods);
        methods.erase(std::remove(methods.begin(), methods.end(), "vanilla"), methods.end());
        methods.insert(methods.begin(), "vanilla");  // the baseline, measured in this run
        b_gen.sampling.cfg_scale = b_cfg;
        std::vector<Condition> conds;
        for (int i = 0; i < b_n; ++i)
          conds.push_back(cfg.is_c2i() ? Condition::label((b_class + i) % cfg.num_classes)
                                       : Condition::unconditional());
        {  // warm-up: page in the weights (and the draft model's) before anything is timed
          GenerateOptions w = b_gen;
          w.spec.method = "vanilla";
          w.spec.draft_model.clear();
          w.max_tokens = 2;
          pipe->generate({conds.front()}, w);
        }
        nlohmann::json rows = nlohmann::json::array();
        double vanilla_s = 0.0;
        for (const std::string& m : methods) {
          GenerateOptions o = b_gen;
          o.spec.method = m;
          if (m == "vanilla" || m == "sjd") o.spec.draft_model.clear();
          GenerateStats st;
          if (!b_common.quiet) std::fprintf(stderr, "bench: %s ...\n", m.c_str());
          pipe->generate(conds, o, &st);
          if (m == "vanilla") vanilla_s = st.seconds;
          nlohmann::json r = stats_json(st, m);
          r.erase("per_image");
          r["speedup_vs_vanilla"] = vanilla_s / std::max(st.seconds, 1e-12);
          const double fwd = std::max<int64_t>(st.forward_passes - 1, 1);  // decode forwards
          r["target_ms_per_forward"] = 1e3 * (st.target_seconds - st.prefill_seconds) / fwd;
          r["rule_ms_per_forward"] = 1e3 * st.rule_seconds / fwd;
          r["rule_overhead_vs_target_forward"] =
              st.rule_seconds / std::max(st.target_seconds - st.prefill_seconds, 1e-12);
          rows.push_back(r);
        }
        nlohmann::json j = {{"model", b_common.model},
                            {"draft", b_gen.spec.draft_model},
                            {"threads", pipe->threads()},
                            {"images", b_n},
                            {"batch", b_gen.batch},
                            {"seed", b_gen.seed},
                            {"cfg", b_cfg},
                            {"temperature", b_gen.sampling.temperature},
                            {"top_k", b_gen.sampling.top_k},
                            {"top_p", b_gen.sampling.top_p},
                            {"methods", rows}};
        if (b_json) {
          std::printf("%s\n", j.dump(2).c_str());
        } else {
          std::printf(
              "model %s, draft %s, %d image(s), batch %d, seed %llu, cfg %.2f, T %.2f, "
              "top-k %d, top-p %.2f, %d threads\n",
              b_common.model.c_str(),
              b_gen.spec.draft_model.empty() ? "-" : b_gen.spec.draft_model.c_str(), b_n,
              b_gen.batch, static_cast<unsigned long long>(b_gen.seed), b_cfg,
              b_gen.sampling.temperature, b_gen.sampling.top_k, b_gen.sampling.top_p,
              pipe->threads());
          std::printf("%-12s %10s %8s %7s %9s %9s %8s %8s %8s %8s %9s\n", "method", "s/image",
                      "speed-up", "MAL", "NFE/img", "draft fw", "target%", "draft%", "verify%",
                      "acc@1", "rules/fw");
          for (const auto& r : rows) {
            const double sec = r["seconds"].get<double>();
            const auto& ts = r["time_split_s"];
            const auto acc = r["acceptance_by_depth"].get<std::vector<double>>();
            std::printf(
                "%-12s %10.3f %7.2fx %7.2f %9.1f %9lld %7.1f%% %7.1f%% %7.1f%% %8s %8.2f%%\n",
                r["method"].get<std::string>().c_str(), r["seconds_per_image"].get<double>(),
                r["speedup_vs_vanilla"].get<double>(), r["mean_accepted_length"].get<double>(),
                r["target_forwards_per_image"].get<double>(),
                static_cast<long long>(r["batched_draft_forwards"].get<int64_t>()),
                100 * ts["target"].get<double>() / sec, 100 * ts["draft"].get<double>() / sec,
                100 * ts["verify"].get<double>() / sec, acc.empty() ? "-" : fmt(acc[0], 3).c_str(),
                100 * r["rule_overhead_vs_target_forward"].get<double>());
          }
        }
        return 0;
      }
      if (!b_against.empty() && is_mar(b_against))
        throw Error("--against: " + b_against + " is a MAR model; vanilla LlamaGen benches only");
      cli::VanillaBenchOptions vo;
      vo.model = b_common.model;
      vo.against = b_against;
      vo.threads = b_common.threads;
      vo.n = b_n;
      vo.tokens = b_tokens;
      vo.class_id = b_class;
      vo.sampling = b_gen.sampling;
      vo.repeat = b_repeat;
      vo.torch = b_torch;
      vo.json = b_json;
      cli::bench_vanilla(vo);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
