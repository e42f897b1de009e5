// tessera generate: images (or token grids / latents) from a prompt, a class or a caption.
#include <algorithm>
#include <memory>

#include "commands.h"
#include "common.h"
#include "default_model.h"
#include "heatmap.h"
#include "image_output.h"
#include "mar_commands.h"
#include "method_flags.h"
#include "progress.h"
#include "stats_json.h"
#include "tessera/file_io.h"
#include "tessera/image_io.h"
#include "tessera/log.h"
#include "text_format.h"

namespace tessera::cli {

namespace {

struct GenerateArgs {
  CommonOpts common;
  CondOpts cond;
  GenerateOptions gen;
  int n = 1;
  std::string out, tokens_out, latents_out, stats_out, heatmap_out;
  bool grid = false;
  std::string prompt, style;
  MarOnly mar;
};

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

int run_generate(GenerateArgs& a, const CLI::App& g) {
  apply_quiet(a.common);
  GenerateOptions& gen = a.gen;
  const bool default_model = a.common.model.empty();
  if (default_model) {
    a.common.model = default_model_dir();
    // Draft-based methods use the draft shipped with the default model.
    if (gen.spec.draft_model.empty() && uses_draft_model(gen.spec.method))
      gen.spec.draft_model = sibling_draft_dir(a.common.model);
  }
  std::string prompt_label;
  if (!a.prompt.empty()) {
    if (a.cond.class_id >= 0 || !a.cond.caption.empty() || a.cond.uncond)
      throw Error("give a prompt or --class/--caption/--uncond, not both");
    prompt_label = resolve_prompt(a.common.model, a.prompt, a.style, a.cond);
    if (a.out.empty() && a.tokens_out.empty() && a.latents_out.empty())
      a.out = prompt_file_name(prompt_label);
  } else if (!a.style.empty()) {
    throw Error("--style selects the drawing of a prompt; give a prompt, e.g. \"red apple\"");
  } else if (default_model && a.cond.class_id < 0 && !a.cond.uncond) {
    throw Error(
        "give a prompt, e.g. tessera generate \"red apple\" (tessera classes lists "
        "the names), or -m DIR --class N");
  }
  if (a.out.empty() && a.tokens_out.empty() && a.latents_out.empty())
    throw Error("nothing to write: give -o OUT.png and/or --tokens-out T.npy");
  if (a.grid && a.out.empty()) throw Error("--grid needs -o OUT.png");
  // Before any work: an unwritable output must not be found after minutes of generation.
  check_output_path(a.out, "-o", a.grid ? 1 : a.n);
  check_output_path(a.tokens_out, "--tokens-out");
  check_output_path(a.latents_out, "--latents-out");
  check_output_path(a.stats_out, "--stats-out");
  check_output_path(a.heatmap_out, "--heatmap-out", a.n);
  if (is_mar(a.common.model)) {
    MarRunOptions mo = mar_run(a.common, a.cond, a.n, gen, a.mar, &g);
    mar_generate(mo, {a.out, a.latents_out, a.stats_out, a.heatmap_out, a.grid});
    return 0;
  }
  if (!a.latents_out.empty()) throw Error("--latents-out is for MAR models");
  LoadOptions lo;
  lo.threads = a.common.threads;
  lo.check_weights = a.common.check_weights;
  lo.load_decoder = !a.out.empty();
  auto pipe = Pipeline::load(a.common.model, lo);
  const GptConfig& cfg = pipe->config().gpt;
  apply_model_sampling_defaults(pipe->config().sampling, g, gen.sampling);
  if (!a.out.empty() && !pipe->has_decoder())
    throw Error(a.common.model + " has no VQ decoder: use --tokens-out only");
  const Condition cond = make_condition(a.cond, cfg);
  {
    // What the run keeps per image until it ends: the condition, the tokens (the grids and the
    // flat copy that is decoded and written), per-token statistics and, for --grid, the pixels
    // of the sheet. Refused up front rather than failing after hours of generation.
    const double px = static_cast<double>(pipe->image_size()) * pipe->image_size() * 3;
    const double per_image = sizeof(Condition) + 512.0 + 16.0 * cfg.n_image_tokens() +
                             (a.grid ? 2.0 * px : 0.0);
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
  gen.progress = [&](int64_t done, int64_t total) { bar.update(done, total); };
  GenerateStats st;
  auto grids = pipe->generate(conds, gen, &st);
  bar.finish();
  log_info("generated " + std::to_string(st.images) + " image(s), " + std::to_string(st.tokens) +
           " tokens in " + fmt(st.seconds) + " s (" +
           fmt(st.tokens / std::max(st.seconds, 1e-9), 1) + " tokens/s, " + gen.spec.method +
           ", mean accepted length " + fmt(st.mean_accepted_length()) + ", " +
           fmt(static_cast<double>(st.target_forwards()) / std::max<int64_t>(st.images, 1), 1) +
           " target forwards per image)");
  if (!a.stats_out.empty()) {
    write_file_atomic(a.stats_out, stats_json(st, gen.spec.method).dump(2) + "\n");
    log_info("wrote " + a.stats_out);
  }
  if (!a.heatmap_out.empty()) {
    int depth = 1;
    for (const auto& s : st.per_image) depth = std::max<int>(depth, s.proposed.size());
    write_numbered(a.heatmap_out, a.n, [&](int i, const std::string& path) {
      write_acceptance_heatmap(
          path, st.per_image[i].accepted_depth, cfg.grid, depth,
          "acceptance over the token grid; method=" + gen.spec.method +
              "; dark = sampled by the target, yellow..blue = accepted at draft depth 1.." +
              std::to_string(depth));
    });
  }
  std::vector<int32_t> flat;
  for (const auto& gr : grids) flat.insert(flat.end(), gr.begin(), gr.end());
  if (!a.tokens_out.empty()) {
    write_npy(a.tokens_out, {a.n, cfg.grid, cfg.grid}, flat);
    log_info("wrote " + a.tokens_out);
  }
  if (!a.out.empty()) {
    std::vector<std::string> params;
    std::string cond_str = a.cond.uncond             ? "uncond"
                           : !a.cond.caption.empty() ? "caption=" + a.cond.caption
                                                     : "class=" + std::to_string(a.cond.class_id);
    if (!prompt_label.empty()) cond_str += " (" + prompt_label + ")";
    for (int i = 0; i < a.n; ++i)
      params.push_back("model=" + a.common.model + "; " + cond_str + "; method=" + gen.spec.method +
                       "; seed=" + std::to_string(gen.seed) + "; image_index=" + std::to_string(i) +
                       "; cfg=" + fmt(gen.sampling.cfg_scale, 3) +
                       "; cfg_interval=" + fmt(gen.sampling.cfg_interval, 3) +
                       "; temperature=" + fmt(gen.sampling.temperature, 3) +
                       "; top_k=" + std::to_string(gen.sampling.top_k) +
                       "; top_p=" + fmt(gen.sampling.top_p, 3) + "; tessera 0.1.0");
    write_pngs(decode_tokens(*pipe, flat), a.n, pipe->image_size(), a.out, a.grid, params);
  }
  return 0;
}

}  // namespace

Command add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  auto* g = app.add_subcommand(
      "generate",
      "Generate images (or token grids) from a prompt, a class or a caption; without -m it uses "
      "the embedded emoji model, e.g. tessera generate \"red apple\"");
  add_common(g, a->common, /*model_required=*/false);
  g->add_option("prompt", a->prompt,
                "Class name to match (models with classes.json, such as the default emoji model)");
  g->add_option("--style", a->style,
                "Drawing style for a prompt (emoji model: twitter, google or openmoji)");
  g->add_option("--class", a->cond.class_id, "Class label (c2i models)")->check(int_at_least(0));
  g->add_option("--caption", a->cond.caption,
                "T5 caption features, .npy [rows, dim] or .safetensors (t2i)");
  g->add_flag("--uncond", a->cond.uncond, "Unconditional generation (null class / empty caption)");
  g->add_option("-n,--n", a->n, "Number of images")->check(int_at_least(1));
  g->add_option("-b,--batch", a->gen.batch, "Images generated together")->check(int_at_least(1));
  g->add_option("-s,--seed", a->gen.seed, "Random seed; image i uses stream (seed, i)");
  g->add_option("--cfg", a->gen.sampling.cfg_scale, "Classifier-free guidance scale (<= 1: off)")
      ->capture_default_str();
  g->add_option("--cfg-interval", a->gen.sampling.cfg_interval,
                "Guide only while the decode step index <= this (-1: always)")
      ->capture_default_str();
  g->add_option("--temperature", a->gen.sampling.temperature, "Sampling temperature (0: greedy)")
      ->capture_default_str();
  g->add_option("--top-k", a->gen.sampling.top_k, "Keep the k most likely tokens (0: off)")
      ->capture_default_str();
  g->add_option("--top-p", a->gen.sampling.top_p, "Nucleus sampling threshold (1: off)")
      ->capture_default_str();
  g->add_option("-o,--output", a->out, "Output PNG (numbered _0000.. when --n > 1)");
  g->add_option("--tokens-out", a->tokens_out, "Write token grids [n, grid, grid] as int32 .npy");
  g->add_flag("--grid", a->grid, "Write all images as one grid PNG");
  add_method_flags(g, a->gen.spec);
  g->add_option("--stats-out", a->stats_out,
                "Write per-image and aggregate statistics (NFE, accepted lengths, ...) as JSON");
  g->add_option("--heatmap-out", a->heatmap_out,
                "Write each image's acceptance heatmap over the token grid (PNG)");
  add_mar_options(g, a->mar);
  g->add_option("--latents-out", a->latents_out,
                "MAR: write the generated latents [n, seq_len, token_dim] as float32 .npy");
  return {g, [a, g] { return run_generate(*a, *g); }};
}

}  // namespace tessera::cli
