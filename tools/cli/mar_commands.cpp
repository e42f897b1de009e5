#include "mar_commands.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "common.h"
#include "heatmap.h"
#include "image_output.h"
#include "interrupt.h"
#include "method_flags.h"
#include "progress.h"
#include "stats_json.h"
#include "tessera/file_io.h"
#include "tessera/image_io.h"
#include "tessera/log.h"
#include "tessera/methods.h"
#include "text_format.h"

namespace tessera::cli {

namespace {

// The pre-fill fraction of the cspd methods: the one given, else the registry's default.
double prefill_of(const MethodParams& params) {
  if (const auto it = params.find("prefill"); it != params.end())
    return std::visit(
        [](const auto& v) -> double {
          if constexpr (std::is_arithmetic_v<std::decay_t<decltype(v)>>) return v;
          return 0.0;
        },
        it->second);
  for (const MethodInfo& m : registered_methods())
    for (const ParamInfo& p : m.params)
      if (p.name == "prefill") return std::stod(p.default_value);
  return 0.0;
}

std::unique_ptr<Pipeline> load(const MarRunOptions& o, bool decoder) {
  LoadOptions lo;
  lo.threads = o.threads;
  lo.check_weights = o.check_weights;
  lo.device = o.device;
  lo.load_decoder = decoder;
  return Pipeline::load(o.model, lo);
}

int label_of(const MarRunOptions& o) {
  if ((o.class_id >= 0) + o.uncond != 1) throw Error("give exactly one of --class N or --uncond");
  return o.uncond ? -1 : o.class_id;
}

}  // namespace

int mar_generate(const MarRunOptions& o, const MarGenerateOutputs& out) {
  const int label = label_of(o);
  auto pipe = load(o, !out.png.empty());
  const MarConfig& c = pipe->config().mar;
  if (!out.png.empty() && !pipe->has_decoder())
    throw Error(o.model + " has no VAE decoder: use --latents-out only");
  ProgressBar bar("generate", !o.quiet);
  MarGenerateOptions g = o.gen;
  bool announced = false;
  g.progress = [&](int64_t done, int64_t total) {
    if (!announced && !out.run_line.empty()) log_info(out.run_line);
    announced = true;
    bar.update(done, total);
  };
  MarStats st;
  g.cancel = InterruptGuard::flag();
  // Each image is decoded and written as it finishes (a --grid sheet as it grows).
  std::optional<ImageWriter> writer;
  if (!out.png.empty()) {
    writer.emplace(out.png, out.grid, o.n, out.first_name, pipe->image_size());
    g.on_image = [&](size_t i, const std::vector<float>& latents) {
      RunSettings one = out.settings;
      one.add("image_index", std::to_string(g.first_image_index + i));
      writer->add(static_cast<int>(i), pipe->decode_latents(latents, 1), one.text());
    };
  }
  const auto images = pipe->generate_latents(std::vector<int>(o.n, label), g, &st);
  bar.finish();
  const int made = static_cast<int>(images.size());
  log_info("generated " + std::to_string(st.images) + " image(s), " + std::to_string(st.tokens) +
           " tokens in " + fmt(st.seconds) + " s (" + g.spec.method + ", " +
           fmt(static_cast<double>(st.target_forwards), 0) + " target forwards" +
           (g.spec.method == "vanilla" ? std::string(")")
                                       : ", acceptance " + fmt(st.acceptance_rate(), 3) + " of " +
                                             std::to_string(st.drafted) + " drafts)"));
  if (!out.stats.empty()) {
    nlohmann::json j = mar_stats_json(st, g.spec.method);
    j["settings"] = out.settings.json();
    write_file_atomic(out.stats, j.dump(2) + "\n");
    log_info("wrote " + out.stats);
  }
  if (!out.heatmap.empty())
    write_numbered(out.heatmap, made, o.n, out.first_name, [&](int i, const std::string& path) {
      write_acceptance_heatmap(path, st.token_origin[i], c.seq_side(), 2,
                               "token origin; method=" + g.spec.method +
                                   "; dark = target (pre-fill), 1 = accepted draft, 2 = rejected "
                                   "draft replaced by the verification");
    });
  std::vector<float> flat;
  for (const auto& im : images) flat.insert(flat.end(), im.begin(), im.end());
  if (!out.latents.empty()) {
    write_npy(out.latents, {made, c.seq_len(), c.token_dim()}, flat);
    log_info("wrote " + out.latents);
  }
  if (writer) writer->finish();
  return made;
}

void mar_forward(const MarRunOptions& o, const std::string& latents, const std::string& unknown,
                 const std::string& z_out) {
  const int label = label_of(o);
  auto pipe = load(o, false);
  const MarConfig& c = pipe->config().mar;
  if (latents.empty()) throw Error("forward on a MAR model needs --latents L.npy");
  const NpyData<float> a = read_npy_floats(latents);
  const std::vector<float>& tokens = a.values;
  if (static_cast<int64_t>(tokens.size()) != static_cast<int64_t>(c.seq_len()) * c.token_dim())
    throw Error(latents + ": latent array has shape " + shape_string(a.shape) + "; expected [" +
                std::to_string(c.seq_len()) + ", " + std::to_string(c.token_dim()) + "]");
  std::vector<uint8_t> mask(c.seq_len(), 0);
  if (!unknown.empty()) {
    const NpyData<float> m = read_npy_floats(unknown);
    const std::vector<float>& v = m.values;
    if (static_cast<int>(v.size()) != c.seq_len())
      throw Error(unknown + ": mask has shape " + shape_string(m.shape) + "; expected [" +
                  std::to_string(c.seq_len()) + "]");
    for (int i = 0; i < c.seq_len(); ++i) mask[i] = v[i] != 0.0f;
  }
  const std::vector<float> z = pipe->forward_z(label, tokens, mask);
  write_npy(z_out, {c.seq_len(), c.dim}, z);
  log_info("wrote " + z_out);
}

void mar_decode(const MarRunOptions& o, const std::string& latents, const std::string& png,
                bool grid) {
  auto pipe = load(o, true);
  const MarConfig& c = pipe->config().mar;
  if (!pipe->has_decoder()) throw Error(o.model + " has no VAE decoder");
  const NpyData<float> a = read_npy_floats(latents);
  const std::vector<float>& v = a.values;
  const int64_t per = static_cast<int64_t>(c.seq_len()) * c.token_dim();
  const bool ok = !v.empty() && static_cast<int64_t>(v.size()) % per == 0 && a.shape.size() >= 2 &&
                  a.shape.back() == c.token_dim() && a.shape[a.shape.size() - 2] == c.seq_len();
  if (!ok)
    throw Error(latents + ": latent array has shape " + shape_string(a.shape) + "; expected [n, " +
                std::to_string(c.seq_len()) + ", " + std::to_string(c.token_dim()) + "]");
  const int n = static_cast<int>(static_cast<int64_t>(v.size()) / per);
  check_output_path(png, "-o", grid ? 1 : n);  // every numbered name, before decoding
  write_pngs(decode_latents(*pipe, v), n, pipe->image_size(), png, grid,
             std::vector<std::string>(n, "decoded from " + latents + "; tessera 0.1.0"));
}

void mar_bench(const MarRunOptions& run, const MarBenchOptions& b) {
  auto pipe = load(run, false);
  const MarConfig& c = pipe->config().mar;
  MarRunOptions o = run;
  if (o.gen.sampling.num_iter == 0) o.gen.sampling.num_iter = std::min(64, c.seq_len());
  std::vector<int> labels;
  for (int i = 0; i < o.n; ++i) labels.push_back((std::max(o.class_id, 0) + i) % c.num_classes);
  const std::vector<int> batches = b.batches.empty() ? std::vector<int>{o.gen.batch} : b.batches;
  const std::vector<int> lens =
      b.draft_lens.empty() ? std::vector<int>{o.gen.spec.draft_len} : b.draft_lens;
  // Every run is checked before the first starts, and a bad value names the sweep's flag.
  for (int batch : batches)
    for (const auto& m : b.methods)
      for (int gamma : lens) {
        MarGenerateOptions g = o.gen;
        g.batch = batch;
        g.spec.method = m;
        g.spec.draft_len = gamma;
        try {
          pipe->validate_latents(g);
        } catch (const ParameterError& e) {
          throw_sweep_error(m, e, !b.draft_lens.empty(), !b.batches.empty());
        }
      }
  {  // warm-up: page in the weights (and the draft's) before anything is timed
    MarGenerateOptions w = o.gen;
    w.sampling.num_iter = 1;
    w.spec.method = "vanilla";
    pipe->generate_latents({labels.front()}, w);
  }
  nlohmann::json rows = nlohmann::json::array();
  for (int batch : batches) {
    double vanilla_s = 0.0;
    auto run = [&](const std::string& method, int gamma) {
      MarGenerateOptions g = o.gen;
      g.batch = batch;
      g.spec.method = method;
      g.spec.draft_len = gamma;
      MarStats st;
      if (!o.quiet)
        std::fprintf(stderr, "bench: batch %d %s%s ...\n", batch, method.c_str(),
                     method == "vanilla" ? "" : (" gamma " + std::to_string(gamma)).c_str());
      pipe->generate_latents(labels, g, &st);
      if (method == "vanilla") vanilla_s = st.seconds;
      nlohmann::json r = mar_stats_json(st, g.spec.method);
      r["batch"] = batch;
      r["draft_len"] = method == "vanilla" ? 0 : gamma;
      r["speedup_vs_vanilla"] = vanilla_s / std::max(st.seconds, 1e-12);
      rows.push_back(r);
    };
    run("vanilla", 0);
    for (const auto& m : b.methods)
      if (m != "vanilla")
        for (int gamma : lens) run(m, gamma);
  }
  nlohmann::json j = {{"model", o.model},
                      {"device", pipe->device()},
                      {"draft", o.gen.spec.draft_model},
                      {"threads", pipe->threads()},
                      {"images", o.n},
                      {"steps", o.gen.sampling.num_iter},
                      {"cfg", o.gen.sampling.cfg_scale},
                      {"cfg_schedule", o.gen.sampling.cfg_schedule},
                      {"temperature", o.gen.sampling.temperature},
                      {"prefill", prefill_of(o.gen.spec.params)},
                      {"seed", o.gen.seed},
                      {"runs", rows}};
  if (b.format == "json") {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  const bool csv = b.format == "csv";
  if (csv) {
    std::printf(
        "method,batch,draft_len,s_per_image,speedup,acceptance,target_forwards,"
        "draft_forwards,target_transformer_share,target_head_share,draft_share,"
        "verify_share\n");
  } else {
    std::printf(
        "model %s on %s, draft %s, %d image(s), %d steps, cfg %.2f (%s), T %.2f, prefill %.2f, "
        "%d threads\n",
        o.model.c_str(), pipe->device().c_str(),
        o.gen.spec.draft_model.empty() ? "-" : o.gen.spec.draft_model.c_str(), o.n,
        o.gen.sampling.num_iter, o.gen.sampling.cfg_scale, o.gen.sampling.cfg_schedule.c_str(),
        o.gen.sampling.temperature, prefill_of(o.gen.spec.params), pipe->threads());
    // The LlamaGen bench's format: a markdown table.
    std::printf(
        "| method | batch | draft-len | s/image | speed-up | accept | tgt fw | dft fw | "
        "tgt-tf%% | tgt-hd%% | draft%% | verify%% |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  }
  for (const auto& r : rows) {
    const double sec = std::max(r["seconds"].get<double>(), 1e-12);
    const auto& ts = r["time_split_s"];
    const double shares[4] = {ts["target_transformer"].get<double>() / sec,
                              ts["target_head"].get<double>() / sec,
                              ts["draft"].get<double>() / sec, ts["verify"].get<double>() / sec};
    const std::string m = r["method"].get<std::string>();
    const int dl = r["draft_len"].get<int>();
    const long long tf = r["target_forwards"].get<int64_t>(),
                    df = r["draft_forwards"].get<int64_t>();
    if (csv)
      std::printf("%s,%d,%d,%.6f,%.4f,%.4f,%lld,%lld,%.4f,%.4f,%.4f,%.4f\n", m.c_str(),
                  r["batch"].get<int>(), dl, r["seconds_per_image"].get<double>(),
                  r["speedup_vs_vanilla"].get<double>(), r["acceptance_rate"].get<double>(), tf, df,
                  shares[0], shares[1], shares[2], shares[3]);
    else
      std::printf(
          "| %s | %d | %s | %.3f | %.2fx | %.3f | %lld | %lld | %.1f%% | %.1f%% | %.1f%% | "
          "%.1f%% |\n",
          m.c_str(), r["batch"].get<int>(), dl > 0 ? std::to_string(dl).c_str() : "-",
          r["seconds_per_image"].get<double>(), r["speedup_vs_vanilla"].get<double>(),
          r["acceptance_rate"].get<double>(), tf, df, 100 * shares[0], 100 * shares[1],
          100 * shares[2], 100 * shares[3]);
  }
  if (b.legend && !csv)
    std::printf(
        "\nmethod     the decoding method; vanilla, the baseline, runs first on the same classes "
        "and seeds\n"
        "batch      images generated together (-b, or --batches)\n"
        "draft-len  MAR steps drafted per window (gamma: --draft-len, or --draft-lens); - for "
        "vanilla\n"
        "s/image    wall time of the generation divided by the images\n"
        "speed-up   vanilla's s/image at this batch divided by the method's (> 1: faster)\n"
        "accept     fraction of drafted tokens accepted\n"
        "tgt fw     batched forward passes of the target MAE (prefill steps and verifications)\n"
        "dft fw     batched forward passes of the draft MAE\n"
        "tgt-tf%%    share of the wall time in the target's transformer\n"
        "tgt-hd%%    share of the wall time in the target's diffusion head\n"
        "draft%%     share of the wall time in drafting (the draft's transformer and head)\n"
        "verify%%    share of the wall time in acceptance tests and residual sampling\n");
}

}  // namespace tessera::cli
