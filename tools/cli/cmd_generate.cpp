// tessera generate: images (or token grids / latents) from a prompt, a class or a caption.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>

#include "commands.h"
#include "common.h"
#include "default_model.h"
#include "heatmap.h"
#include "image_output.h"
#include "interrupt.h"
#include "mar_commands.h"
#include "method_flags.h"
#include "progress.h"
#include "run_settings.h"
#include "stats_json.h"
#include "tessera/file_io.h"
#include "tessera/image_io.h"
#include "tessera/log.h"
#include "tessera/methods.h"
#include "text_format.h"

namespace tessera::cli {

namespace {

struct GenerateArgs {
  CommonOpts common;
  CondOpts cond;
  GenerateOptions gen;
  int n = 1;
  std::string seed = "0";  // text: -1 (any negative) means a random seed
  std::string out, tokens_out, latents_out, stats_out, heatmap_out;
  bool grid = false;
  std::string prompt, style, from_png;
  std::string text_encoder, caption_out, preprocessing = "clean";  // t2i prompts
  std::vector<std::string> prompt_words;  // the positional prompt: unquoted words are one prompt
  std::string draft_costs;                // --draft-costs D:V1,V2,...
  size_t output_begin = 0;
  MarOnly mar;
};

// -s: a non-negative integer, or a negative one for a random seed (as stable-diffusion.cpp does),
// which is printed and stored like any other.
uint64_t resolve_seed(const std::string& text) {
  size_t used = 0;
  long long v = 0;
  unsigned long long u = 0;
  try {
    if (!text.empty() && text[0] == '-') {
      v = std::stoll(text, &used);
    } else {
      u = std::stoull(text, &used);
    }
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size())
    throw Error("-s " + text + ": not an integer (a negative seed picks a random one)");
  if (v >= 0) return u;
  std::random_device rd;  // 31 bits: a seed short enough to read and retype
  const uint64_t seed = rd() & 0x7fffffffu;
  log_info("seed " + std::to_string(seed) + " (random)");
  return seed;
}

// "run: model=...; method=...; drafter=model (--draft); ...": the line every run starts with.
std::string run_line(const RunSettings& rs, const std::string& drafter_source, int n) {
  RunSettings shown = rs;
  for (auto& [k, v] : shown.items)
    if (k == "drafter" && !drafter_source.empty()) v += " (" + drafter_source + ")";
  return "run: " + shown.text() + (n > 1 ? "; images=" + std::to_string(n) : "");
}

// Flags of the other model family are refused rather than ignored.
void check_family_flags(const CLI::App& g, bool mar) {
  const std::vector<std::string> mar_only = {"--steps", "--cfg-schedule", "--latents-out"};
  const std::vector<std::string> llamagen_only = {"--top-k", "--top-p", "--cfg-interval",
                                                  "--tokens-out", "--caption"};
  if (mar && g.count("--caption") > 0)
    throw Error(
        "--caption is for text-conditional LlamaGen models; MAR models are "
        "class-conditional: use --class or --uncond");
  for (const std::string& f : mar ? llamagen_only : mar_only)
    if (g.count(f) > 0)
      throw Error(f + " is for " + (mar ? "LlamaGen" : "MAR") + " models only; this is a " +
                  (mar ? "MAR" : "LlamaGen") + " model");
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

// The file an image is written to without -o: its class's name where the model has class names
// (red_apple_twitter.png), else class_N.png, uncond.png or the caption file's name.
std::string default_output_name(const std::string& dir, const CondOpts& c) {
  if (c.uncond) return "uncond.png";
  if (!c.caption.empty()) return std::filesystem::path(c.caption).stem().string() + ".png";
  if (c.class_id >= 0 && ClassNames::present(dir)) {
    const ClassNames names = model_class_names(dir);
    if (c.class_id < static_cast<int>(names.classes().size()))
      return prompt_file_name(names.label(c.class_id));
  }
  return "class_" + std::to_string(std::max(c.class_id, 0)) + ".png";
}

int run_generate(GenerateArgs& a, const CLI::App& g) {
  // From the start: a Ctrl-C while loading then means no image is started, exit 130.
  InterruptGuard interrupt;
  GenerateOptions& gen = a.gen;
  if (!a.prompt_words.empty()) {
    if (!a.prompt.empty())
      throw Error("give the prompt once: as words (generate red apple) or with -p \"red apple\"");
    for (const auto& w : a.prompt_words) a.prompt += (a.prompt.empty() ? "" : " ") + w;
  }
  const bool default_model = a.common.model.empty();
  if (default_model) a.common.model = default_model_dir();
  apply_common(a.common);
  const bool mar = is_mar(a.common.model);
  check_family_flags(g, mar);
  check_method_flags(g, {gen.spec.method}, mar, "--method");
  if (!a.draft_costs.empty()) {
    if (gen.spec.draft_len != kDraftLenAuto)
      throw Error("--draft-costs is what --draft-len auto decides from; --draft-len " +
                  draft_len_text(gen.spec.draft_len) + " is fixed");
    gen.spec.auto_costs = parse_draft_costs(a.draft_costs, "--draft-costs");
  }
  if (gen.spec.auto_hold > 0 && gen.spec.draft_len != kDraftLenAuto)
    throw Error("--draft-hold is what --draft-len auto holds its lengths for; --draft-len " +
                draft_len_text(gen.spec.draft_len) + " is fixed");
  gen.seed = resolve_seed(a.seed);
  // Where the drafts come from: --draft, the draft the model's config.json names, or Jacobi
  // iteration; stored as what they are, printed with where that came from.
  const MethodInfo* method = find_method(gen.spec.method);
  const DrafterChoice dc = choose_drafter(a.common.model, {gen.spec.method}, gen.spec.draft_model);
  const std::string drafter = dc.kind, drafter_source = dc.why;
  gen.spec.draft_model = dc.dir;
  std::string prompt_label;
  if (!a.prompt.empty()) {
    if (a.cond.class_id >= 0 || !a.cond.caption.empty() || a.cond.uncond)
      throw Error("give a prompt or --class/--caption/--uncond, not both");
    if (!mar && !load_model_config(a.common.model).gpt.is_c2i()) {
      // A text-conditional model: the prompt goes to its text encoder, not to class names.
      if (!a.style.empty()) throw Error("--style picks a class's drawing; this is a t2i model");
      a.cond.text = prompt_label = a.prompt;
    } else {
      prompt_label = resolve_prompt(a.common.model, a.prompt, a.style, a.cond);
    }
    if (a.out.empty() && a.tokens_out.empty() && a.latents_out.empty())
      a.out = prompt_file_name(prompt_label);
  } else if (!a.style.empty()) {
    throw Error("--style selects the drawing of a prompt; give a prompt, e.g. \"red apple\"");
  } else if (default_model && a.cond.class_id < 0 && !a.cond.uncond) {
    throw Error(
        "give a prompt, e.g. tessera generate \"red apple\" (tessera classes lists "
        "the names), or -m DIR --class N");
  }
  if (a.out.empty() && a.tokens_out.empty() && a.latents_out.empty()) {
    // No output named: the image is named after what it shows, in the current directory.
    a.out = default_output_name(a.common.model, a.cond);
    if (!a.from_png.empty() && std::filesystem::exists(a.out) &&
        std::filesystem::equivalent(a.out, a.from_png))
      throw Error("--from-png " + a.from_png +
                  ": without -o the image would be written over it; give -o OUT.png");
  }
  if (a.cond.text.empty() && (g.count("--text-encoder") > 0 || g.count("--caption-out") > 0 ||
                              g.count("--text-preprocessing") > 0))
    throw Error(
        "--text-encoder, --caption-out and --text-preprocessing are for a typed prompt on a "
        "text-conditional (t2i) model; give one, e.g. tessera generate -m T2I_DIR \"a red "
        "apple\"");
  if (a.grid && a.out.empty()) throw Error("--grid needs -o OUT.png");
  if (g.count("--output-begin-idx") > 0 && a.out.empty() && a.heatmap_out.empty())
    throw Error("--output-begin-idx numbers the images of -o (and --heatmap-out); give -o");
  // Before any work: an unwritable output must not be found after minutes of generation.
  check_output_path(a.out, "-o", a.grid ? 1 : a.n, a.output_begin, /*image=*/true);
  check_output_path(a.tokens_out, "--tokens-out");
  check_output_path(a.latents_out, "--latents-out");
  check_output_path(a.stats_out, "--stats-out");
  check_output_path(a.caption_out, "--caption-out");
  check_output_path(a.heatmap_out, "--heatmap-out", a.n, a.output_begin);
  if (a.n > 1 && g.count("--image-index") > 0 && verbose())
    log_info("images use random streams " + std::to_string(gen.first_image_index) + ".." +
             std::to_string(gen.first_image_index + a.n - 1));

  // The settings, complete: printed now, stored in every image and in --stats-out.
  RunSettings rs;
  // The model by name and fingerprint, not by path (a path would name this user's directories
  // and fail on another machine): --from-png resolves it against -m or the default model.
  rs.add("model", model_name(a.common.model));
  rs.add("model_hash", model_hash(a.common.model));
  if (a.cond.uncond)
    rs.add("uncond", "true");
  else if (!a.cond.caption.empty())
    rs.add("caption", a.cond.caption);
  else if (a.cond.text.empty())
    rs.add("class", std::to_string(a.cond.class_id));
  // The prompt as typed (--from-png matches it again, to the same class and the same text).
  if (!prompt_label.empty()) rs.add("prompt", a.prompt);
  if (!a.style.empty()) rs.add("style", a.style);
  rs.add("method", gen.spec.method);
  if (method->drafts != DraftSource::None) {
    rs.add("drafter", drafter);
    if (!gen.spec.draft_model.empty()) {
      rs.add("draft", model_name(gen.spec.draft_model));
      rs.add("draft_hash", model_hash(gen.spec.draft_model));
    } else if (uses_draft_model(gen.spec.method))
      rs.add("draft", kNoDraft);  // Jacobi drafts, though the model may name a draft
    rs.add("draft_len", draft_len_text(gen.spec.draft_len));
    if (!gen.spec.resample.empty()) rs.add("resample", gen.spec.resample);
    if (!gen.spec.tree.empty()) rs.add("tree", gen.spec.tree);
  }
  // The method's parameters go here (in name order, the model's validated ones among them once
  // the model is loaded), so that a run and its --from-png replay store the same text.
  const size_t params_at = rs.items.size();
  auto add_params = [&](const MethodParams& params) {
    std::vector<std::pair<std::string, std::string>> items;
    for (const auto& [name, value] : params) items.emplace_back(name, param_text(value));
    rs.items.insert(rs.items.begin() + static_cast<std::ptrdiff_t>(params_at), items.begin(),
                    items.end());
  };
  rs.add("seed", std::to_string(gen.seed));
  if (mar) {
    if (method->drafts != DraftSource::None) add_params(gen.spec.params);
    MarRunOptions mo = mar_run(a.common, a.cond, a.n, gen, a.mar, &g);
    rs.add("steps", g.count("--steps") > 0 ? std::to_string(a.mar.steps) : "default");
    rs.add("cfg", exact(mo.gen.sampling.cfg_scale));
    rs.add("cfg_schedule", mo.gen.sampling.cfg_schedule);
    rs.add("temperature", exact(mo.gen.sampling.temperature));
    rs.add("tessera", kVersion);
    mo.gen.first_image_index = gen.first_image_index;
    const int made = mar_generate(mo, {a.out, a.latents_out, a.stats_out, a.heatmap_out, a.grid,
                                       a.output_begin, rs, run_line(rs, drafter_source, a.n)});
    if (!InterruptGuard::interrupted()) return 0;
    log_info("interrupted: " + std::to_string(made) + " of " + std::to_string(a.n) +
             " images generated and written");
    return kInterruptedExit;
  }

  LoadOptions lo;
  lo.threads = a.common.threads;
  lo.check_weights = a.common.check_weights;
  lo.device = a.common.device;
  lo.load_decoder = !a.out.empty();
  lo.text_encoder = a.text_encoder;
  lo.text_preprocessing = a.preprocessing == "none"    ? TextPreprocessing::None
                          : a.preprocessing == "lower" ? TextPreprocessing::Lower
                                                       : TextPreprocessing::Clean;
  auto pipe = Pipeline::load(a.common.model, lo);
  const GptConfig& cfg = pipe->config().gpt;
  if (verbose())
    log_info(load_report_text(pipe->load_report()) + ", " + std::to_string(pipe->threads()) +
             " threads, device " + pipe->device());
  apply_model_sampling_defaults(pipe->config().sampling, g, gen.sampling);
  // Parameters not given take the model's validated settings (config.json "quality"): store the
  // values used, so that --from-png reproduces the image after the model's settings change.
  if (method->drafts != DraftSource::None) add_params(pipe->with_model_defaults(gen.spec).params);
  rs.add("cfg", exact(gen.sampling.cfg_scale));
  rs.add("cfg_interval", exact(gen.sampling.cfg_interval));
  rs.add("temperature", exact(gen.sampling.temperature));
  rs.add("top_k", std::to_string(gen.sampling.top_k));
  rs.add("top_p", exact(gen.sampling.top_p));
  rs.add("tessera", kVersion);
  if (!a.out.empty() && !pipe->has_decoder())
    throw Error(a.common.model + " has no VQ decoder: use --tokens-out only");
  const auto encode_t0 = std::chrono::steady_clock::now();
  const Condition cond =
      a.cond.text.empty() ? make_condition(a.cond, cfg) : pipe->text_condition(a.cond.text);
  if (!a.cond.text.empty() && verbose()) {
    int tokens = 0;
    for (const uint8_t m : cond.caption_mask) tokens += m != 0;
    log_info(
        "prompt: " + std::to_string(tokens) + " tokens (EOS included), loaded and encoded in " +
        fmt(std::chrono::duration<double>(std::chrono::steady_clock::now() - encode_t0).count()) +
        " s");
  }
  if (!a.cond.text.empty()) {
    if (a.preprocessing != "clean") rs.add("text_preprocessing", a.preprocessing);
    if (!a.caption_out.empty()) {  // the real rows: a --caption file that reproduces the run
      std::vector<float> rows;
      for (int t = 0; t < cfg.cls_token_num; ++t)
        if (cond.caption_mask[t])
          rows.insert(rows.end(), cond.caption.begin() + int64_t{t} * cfg.caption_dim,
                      cond.caption.begin() + int64_t{t + 1} * cfg.caption_dim);
      const auto n_rows = static_cast<int64_t>(rows.size()) / cfg.caption_dim;
      write_npy(a.caption_out, {n_rows, cfg.caption_dim}, rows);
      log_info("wrote " + a.caption_out + " [" + std::to_string(n_rows) + ", " +
               std::to_string(cfg.caption_dim) + "]");
    }
  }
  {
    // What the run keeps per image until it ends: the condition, the tokens (the grids and the
    // flat copy that is decoded and written), per-token statistics and, for --grid, the pixels
    // of the sheet. Refused up front rather than failing after hours of generation.
    const double px = static_cast<double>(pipe->image_size()) * pipe->image_size() * 3;
    const double per_image =
        sizeof(Condition) + 512.0 + 16.0 * cfg.n_image_tokens() + (a.grid ? 2.0 * px : 0.0);
    const double need = per_image * a.n;
    if (need > static_cast<double>(pipe->available_memory()))
      throw Error("-n " + std::to_string(a.n) + " images need about " +
                  std::to_string(static_cast<int64_t>(need / (1 << 20))) + " MiB of host memory" +
                  (a.grid ? " (with a --grid sheet)" : "") + ", " +
                  std::to_string(pipe->available_memory() >> 20) +
                  " MiB is available: split the run (--seed stays reproducible per image)");
  }
  std::vector<Condition> conds(a.n, cond);
  ProgressBar bar("generate", !a.common.quiet);
  // The run line once the engine has accepted the settings (a bad method parameter is then one
  // error line), before the first token.
  bool announced = false;
  const std::string line = run_line(rs, drafter_source, a.n);
  gen.progress = [&](int64_t done, int64_t total) {
    if (!announced) log_info(line);
    announced = true;
    bar.update(done, total);
  };
  GenerateStats st;
  // With --draft-len auto the costs each round's length was chosen from and the rounds a choice
  // was held for join the settings, after draft_len, once the run has them: --from-png then
  // repeats the lengths on any machine and either loop.
  auto settings = [&]() {
    RunSettings all = rs;
    if (!st.draft_costs.verify.empty()) {
      auto at = std::find_if(all.items.begin(), all.items.end(),
                             [](const auto& kv) { return kv.first == "draft_len"; });
      at = all.items.insert(at == all.items.end() ? at : at + 1,
                            {"draft_costs", draft_costs_text(st.draft_costs)});
      if (st.draft_hold > 0)
        all.items.insert(at + 1, {"draft_hold", std::to_string(st.draft_hold)});
    }
    return all;
  };
  gen.cancel = InterruptGuard::flag();
  // Each image is decoded and written as it finishes (a --grid sheet as it grows).
  std::optional<ImageWriter> writer;
  if (!a.out.empty()) {
    writer.emplace(a.out, a.grid, a.n, a.output_begin, pipe->image_size());
    gen.on_image = [&](size_t i, const std::vector<int32_t>& grid) {
      RunSettings one = settings();
      one.add("image_index", std::to_string(gen.first_image_index + i));
      writer->add(static_cast<int>(i), pipe->decode(grid, 1), one.text());
    };
  }
  auto grids = pipe->generate(conds, gen, &st);
  bar.finish();
  const int made = static_cast<int>(grids.size());
  log_info("generated " + std::to_string(st.images) + " image(s), " + std::to_string(st.tokens) +
           " tokens in " + fmt(st.seconds) + " s (" +
           fmt(st.tokens / std::max(st.seconds, 1e-9), 1) + " tokens/s, " + gen.spec.method +
           ", mean accepted length " + fmt(st.mean_accepted_length()) + ", " +
           fmt(static_cast<double>(st.target_forwards()) / std::max<int64_t>(st.images, 1), 1) +
           " target forwards per image)");
  for (const std::string& note : st.notes) log_info(note);  // e.g. outside validated settings
  if (verbose())
    log_info("time split: target " + fmt(st.target_seconds) + " s, draft " + fmt(st.draft_seconds) +
             " s, verify " + fmt(st.verify_seconds) + " s (rules " + fmt(st.rule_seconds) + " s)");
  if (!a.stats_out.empty()) {
    nlohmann::json j = stats_json(st, gen.spec.method);
    j["settings"] = settings().json();
    j["first_image_index"] = gen.first_image_index;
    write_file_atomic(a.stats_out, j.dump(2) + "\n");
    log_info("wrote " + a.stats_out);
  }
  if (!a.heatmap_out.empty()) {
    int depth = 1;
    for (const auto& s : st.per_image) depth = std::max<int>(depth, s.proposed.size());
    write_numbered(a.heatmap_out, made, a.n, a.output_begin, [&](int i, const std::string& path) {
      write_acceptance_heatmap(
          path, st.per_image[i].accepted_depth, cfg.grid, depth,
          "acceptance over the token grid; method=" + gen.spec.method +
              "; dark = sampled by the target, yellow..blue = accepted at draft depth 1.." +
              std::to_string(depth) +
              (st.per_image[i].accepted_vertical.empty()
                   ? ""
                   : "; magenta = a vertical head's cached proposal accepted (Hawk)"),
          st.per_image[i].accepted_vertical);
    });
  }
  std::vector<int32_t> flat;
  for (const auto& gr : grids) flat.insert(flat.end(), gr.begin(), gr.end());
  if (!a.tokens_out.empty()) {
    write_npy(a.tokens_out, {made, cfg.grid, cfg.grid}, flat);
    log_info("wrote " + a.tokens_out);
  }
  if (writer) writer->finish();
  if (!InterruptGuard::interrupted()) return 0;
  log_info("interrupted: " + std::to_string(made) + " of " + std::to_string(a.n) +
           " images generated and written");
  return kInterruptedExit;
}

}  // namespace

Command add_generate(CLI::App& app, const ModelDefaults& md) {
  auto a = std::make_shared<GenerateArgs>();
  a->gen.sampling = md.sampling;  // so that --help shows the defaults that will apply
  auto* g = app.add_subcommand(
      "generate",
      "Generate images (or token grids) from a prompt, a class or a caption; without -m it uses "
      "the embedded emoji model, e.g. tessera generate \"red apple\"");
  add_common(g, a->common, /*model_required=*/false);
  // Named in capitals: CLI11 >= 2.4 refuses a positional whose name is also a long option's
  // (--prompt below) and throws at start-up.
  g->add_option("PROMPT", a->prompt_words,
                "Class name to match, or the emoji itself (models with classes.json, such as the "
                "default emoji model); unquoted words are one prompt")
      ->expected(0, -1);
  g->add_option("-p,--prompt", a->prompt, "The same as the positional prompt");
  g->add_option("--style", a->style,
                "Drawing style for a prompt (emoji model: twitter, google or openmoji)");
  g->add_option("--class", a->cond.class_id, "Class label (c2i models)")->check(int_at_least(0));
  g->add_option("--caption", a->cond.caption,
                "T5 caption features, .npy [rows, dim] or .safetensors (t2i)");
  g->add_option("--text-encoder", a->text_encoder,
                "T5 encoder directory of a typed prompt (t2i; tools/convert_t5.py makes one); "
                "default: the one the model's config.json names");
  g->add_option("--caption-out", a->caption_out,
                "Write the typed prompt's caption features (.npy, for --caption)");
  g->add_option("--text-preprocessing", a->preprocessing,
                "clean: LlamaGen's T5Embedder default, its clean_caption twice (URLs, HTML, "
                "ids, stray punctuation removed; lowercased); lower: lowercase and strip, as "
                "the embedder without clean_caption; none: the text as given")
      ->check(CLI::IsMember({"clean", "lower", "none"}));
  g->add_flag("--uncond", a->cond.uncond, "Unconditional generation (null class / empty caption)");
  g->add_option("-n,--n", a->n, "Number of images")->check(int_at_least(1))->capture_default_str();
  g->add_option("-b,--batch", a->gen.batch, "Images generated together")
      ->check(int_at_least(1))
      ->capture_default_str();
  g->add_option("-s,--seed", a->seed,
                "Random seed (negative: a random one, printed and stored); image i uses stream "
                "(seed, i)")
      ->capture_default_str();
  g->add_option("--image-index", a->gen.first_image_index,
                "Random stream of the first image: image i of the run uses stream N + i (to "
                "regenerate image N of an earlier run alone)")
      ->capture_default_str();
  add_device_loop(g, a->gen.device_loop);
  const std::string from = md.model_given ? "from " + md.model : "the default model's";
  g->add_option("--cfg", a->gen.sampling.cfg_scale,
                "Classifier-free guidance scale (<= 1: off; default: " + from + " config.json)")
      ->capture_default_str();
  g->add_option("--cfg-interval", a->gen.sampling.cfg_interval,
                "Guide only while the decode step index <= this (-1: always; LlamaGen)")
      ->capture_default_str();
  g->add_option("--temperature", a->gen.sampling.temperature, "Sampling temperature (0: greedy)")
      ->capture_default_str();
  g->add_option("--top-k", a->gen.sampling.top_k,
                "Keep the k most likely tokens (0: off; LlamaGen)")
      ->capture_default_str();
  g->add_option("--top-p", a->gen.sampling.top_p, "Nucleus sampling threshold (1: off; LlamaGen)")
      ->capture_default_str();
  g->add_option("-o,--output", a->out,
                "Output image: .png, .jpg/.jpeg or .webp by extension; numbered _0000.. when "
                "-n > 1, or a printf-style pattern such as img_%03d.png");
  g->add_option("--output-begin-idx", a->output_begin,
                "First number of the output names (pattern or _0000 suffix)")
      ->capture_default_str();
  g->add_option("--from-png", a->from_png,
                "Reproduce an image: the settings stored in IMG.png (its 'parameters'); flags "
                "given after it override them");
  g->add_option("--tokens-out", a->tokens_out, "Write token grids [n, grid, grid] as int32 .npy");
  g->add_flag("--grid", a->grid, "Write all images as one grid image");
  add_method_flags(g, a->gen.spec, md);
  g->add_option("--draft-costs", a->draft_costs,
                "The costs --draft-len auto chooses each round's length from, D:V1,V2,...: the "
                "seconds of one draft step, then of target forwards of 1, 2, ... positions "
                "(default: measured on this machine); every image stores those it used, so "
                "--from-png repeats its lengths on any machine")
      ->type_name("D:V1,V2,...");
  g->add_option("--stats-out", a->stats_out,
                "Write the settings and per-image and aggregate statistics (NFE, accepted "
                "lengths, ...) as JSON");
  g->add_option("--heatmap-out", a->heatmap_out,
                "Write each image's acceptance heatmap over the token grid (PNG)");
  add_mar_options(g, a->mar, md);
  g->add_option("--latents-out", a->latents_out,
                "MAR: write the generated latents [n, seq_len, token_dim] as float32 .npy");
  return {g, [a, g] { return run_generate(*a, *g); }};
}

}  // namespace tessera::cli
