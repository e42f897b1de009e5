#include "bench_vanilla.h"
#include "bench_common.h"
#include "common.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "tessera/bandwidth.h"
#include "tessera/cpu_threads.h"
#include "tessera/error.h"
#include "tessera/log.h"
#include "tessera/tessera.h"
#include "text_format.h"

#ifndef TESSERA_SOURCE_DIR
#define TESSERA_SOURCE_DIR "."
#endif

namespace tessera::cli {
namespace {

struct Round {
  double tokens_per_s = 0, ms_per_step = 0, prefill_ms = 0;
};

struct Timed {
  std::string dir;
  std::unique_ptr<Pipeline> pipe;
  std::vector<Condition> conds;  // the images of one generate call (validated at load)
  std::vector<Round> rounds;
};

// The round whose tokens/s is the median (the lower middle one for an even count), so that its
// figures are reported together.
const Round& median_round(const std::vector<Round>& rs) {
  std::vector<size_t> idx(rs.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(),
            [&](size_t a, size_t b) { return rs[a].tokens_per_s < rs[b].tokens_per_s; });
  return rs[idx[(idx.size() - 1) / 2]];
}

std::vector<Condition> conditions(const Pipeline& p, int n, int class_id) {
  const GptConfig& cfg = p.config().gpt;
  if (cfg.is_c2i() && (class_id < 0 || class_id >= cfg.num_classes))
    throw Error("--class " + std::to_string(class_id) + " out of range [0, " +
                std::to_string(cfg.num_classes) + ")");
  return std::vector<Condition>(
      n, cfg.is_c2i() ? Condition::label(class_id) : Condition::unconditional());
}

GenerateOptions generate_options(const VanillaBenchOptions& o, int max_tokens) {
  GenerateOptions go;
  go.sampling = o.sampling;
  go.batch = o.n;
  go.max_tokens = max_tokens;
  go.device_loop = o.device_loop;
  return go;
}

Round time_once(Timed& t, const VanillaBenchOptions& o, int K) {
  GenerateStats st;
  t.pipe->generate(t.conds, generate_options(o, K), &st);
  const int64_t steps = st.forward_passes - 1;
  Round r;
  r.tokens_per_s = st.tokens / st.seconds;
  r.ms_per_step = steps > 0 ? 1e3 * (st.seconds - st.prefill_seconds) / steps : 0.0;
  r.prefill_ms = 1e3 * st.prefill_seconds;
  return r;
}

nlohmann::json model_json(const Timed& t, double machine_gbs) {
  const Round& r = median_round(t.rounds);
  const double bytes = static_cast<double>(t.pipe->weight_bytes_per_step());
  // The roofline of the host's RAM; none for a model on a GPU (machine_gbs 0: not measured).
  const nlohmann::json stream_ms =
      machine_gbs > 0 ? nlohmann::json(bytes / (machine_gbs * 1e9) * 1e3) : nlohmann::json();
  const nlohmann::json over =
      machine_gbs > 0 ? nlohmann::json(r.ms_per_step / stream_ms.get<double>()) : nlohmann::json();
  std::vector<double> tps;
  for (const Round& x : t.rounds) tps.push_back(x.tokens_per_s);
  return {{"model", t.dir},
          {"device", t.pipe->device()},
          {"weights_dtype", t.pipe->config().gpt.dtype},
          {"load", load_report_json(t.pipe->load_report())},
          {"tokens_per_s", r.tokens_per_s},
          {"ms_per_token", r.ms_per_step},
          {"prefill_ms", r.prefill_ms},
          {"weight_bytes_per_step", bytes},
          {"achieved_weight_gbs", r.ms_per_step > 0 ? bytes / (r.ms_per_step * 1e-3) / 1e9 : 0.0},
          {"weight_stream_ms", stream_ms},
          {"step_over_stream", over},
          {"tokens_per_s_rounds", tps}};
}

double run_torch(const VanillaBenchOptions& o, const GptConfig& cfg, int K, int threads) {
  if (o.n != 1) throw Error("--torch compares one image; use -n 1");
  const int torch_k = std::min(K, cfg.n_image_tokens() - 2);  // it spends 2 on warm-up
  const std::string script = std::string(TESSERA_SOURCE_DIR) + "/python/bench_torch.py";
  const std::string cmd = "/usr/bin/python3 " + script + " --model '" + o.model + "' --tokens " +
                          std::to_string(torch_k) + " --threads " + std::to_string(threads) +
                          " --cfg " + fmt(o.sampling.cfg_scale, 3) + " --dtype " +
                          (cfg.dtype == "bf16" ? "bf16" : "f32");
  log_info("running: " + cmd);
  return run_reference_bench(cmd, "PyTorch reference benchmark", cmd)["tokens_per_s"].get<double>();
}

}  // namespace

void bench_vanilla(const VanillaBenchOptions& o) {
  LoadOptions lo;
  lo.threads = o.threads;
  lo.check_weights = o.check_weights;
  lo.device = o.device;
  lo.load_decoder = false;
  std::vector<Timed> models;
  for (const std::string& dir : {o.model, o.against}) {
    if (dir.empty()) continue;
    Timed t{dir, Pipeline::load(dir, lo), {}, {}};
    t.conds = conditions(*t.pipe, o.n, o.class_id);  // validates --class before any timing
    models.push_back(std::move(t));
  }
  const GptConfig& cfg = models[0].pipe->config().gpt;
  const int K = o.tokens > 0 ? o.tokens : cfg.n_image_tokens();
  for (const Timed& t : models) {
    const int grid_tokens = t.pipe->config().gpt.n_image_tokens();
    if (K > grid_tokens)
      throw Error("--tokens must be at most " + std::to_string(grid_tokens) + " (" + t.dir + ")");
  }
  const int threads = models[0].pipe->threads();

  // Warm-up: page in every model's mapped weights before anything is timed.
  for (Timed& t : models) t.pipe->generate(t.conds, generate_options(o, std::min(K, 2)));
  // Rounds alternate the order (AB, BA, ...), so a drift in the machine's speed within a round
  // does not favour one model; each round's ratio compares two runs seconds apart.
  for (int r = 0; r < o.repeat; ++r) {
    if (o.repeat > 1)
      log_info("bench: round " + std::to_string(r + 1) + "/" + std::to_string(o.repeat));
    for (size_t i = 0; i < models.size(); ++i) {
      Timed& t = models[r % 2 == 0 ? i : models.size() - 1 - i];
      t.rounds.push_back(time_once(t, o, K));
    }
  }
  // One more run of the first model, untimed, counting the CPU worker pool's parallel regions by
  // op: each forked region costs a wake-up and a join of the workers.
  count_cpu_regions(true);
  GenerateStats counted;
  models[0].pipe->generate(models[0].conds, generate_options(o, K), &counted);
  std::vector<CpuRegionCount> regions = cpu_region_counts();
  count_cpu_regions(false);
  std::sort(regions.begin(), regions.end(),
            [](const CpuRegionCount& x, const CpuRegionCount& y) { return x.forked > y.forked; });
  const double forwards = static_cast<double>(std::max<int64_t>(1, counted.forward_passes));
  nlohmann::json region_json = nlohmann::json::array();
  double forked_total = 0, serial_total = 0;
  for (const CpuRegionCount& c : regions) {
    region_json.push_back({{"op", c.op},
                           {"forked", static_cast<double>(c.forked) / forwards},
                           {"serial", static_cast<double>(c.serial) / forwards}});
    forked_total += static_cast<double>(c.forked) / forwards;
    serial_total += static_cast<double>(c.serial) / forwards;
  }

  // The host's RAM bandwidth bounds a CPU step only: a GPU's is measured by scripts/gpu-check.sh.
  const bool on_cpu = o.device.rfind("cpu", 0) == 0;
  const double machine = on_cpu ? memory_read_bandwidth_gbs() : 0.0;

  nlohmann::json j = model_json(models[0], machine);
  j["threads"] = threads;
  j["images"] = o.n;
  j["tokens_per_image"] = K;
  j["cfg"] = o.sampling.cfg_scale;
  j["temperature"] = o.sampling.temperature;
  j["top_k"] = o.sampling.top_k;
  j["top_p"] = o.sampling.top_p;
  j["rounds"] = o.repeat;
  // The step loop the runs took: steps drawn on the device, and those replayed as a graph.
  j["device_loop_steps"] = counted.device_steps;
  j["replayed_steps"] = counted.replayed_steps;
  j["machine_read_gbs"] = on_cpu ? nlohmann::json(machine) : nlohmann::json();
  j["parallel_regions_per_forward"] = {
      {"forked", forked_total}, {"serial", serial_total}, {"by_op", region_json}};
  std::vector<double> ratios;
  if (models.size() > 1) {
    for (int r = 0; r < o.repeat; ++r)
      ratios.push_back(models[0].rounds[r].tokens_per_s / models[1].rounds[r].tokens_per_s);
    nlohmann::json a = model_json(models[1], machine);
    j["against"] = a;
    j["ratio_rounds"] = ratios;
    j["tokens_per_s_ratio_vs_against"] = median(ratios);
  }
  if (o.torch) {
    const double torch_tps = run_torch(o, cfg, K, threads);
    j["torch_tokens_per_s"] = torch_tps;
    j["speedup_vs_torch"] = j["tokens_per_s"].get<double>() / torch_tps;
  }

  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  auto list = [](const nlohmann::json& v) {
    std::string s;
    for (const auto& x : v) {
      if (!s.empty()) s += ' ';
      s += fmt(x.get<double>(), 2);
    }
    return s;
  };
  auto print_model = [&](const char* label, const nlohmann::json& m) {
    std::printf("%-16s %s (%s weights, %d threads, %s kernels)\n", label,
                m["model"].get<std::string>().c_str(),
                m["weights_dtype"].get<std::string>().c_str(), threads,
                m["device"].get<std::string>().c_str());
    const auto& ld = m["load"];
    std::printf("  %s\n", load_report_text({ld["seconds"].get<double>(),
                                            ld["weight_check_bytes"].get<int64_t>(),
                                            ld["weight_check_seconds"].get<double>()})
                              .c_str());
    std::printf("  tokens/s        %.2f", m["tokens_per_s"].get<double>());
    if (o.repeat > 1)
      std::printf("   (median of %d rounds: %s)", o.repeat, list(m["tokens_per_s_rounds"]).c_str());
    std::printf("\n  ms/token        %.2f   prefill %.2f ms\n", m["ms_per_token"].get<double>(),
                m["prefill_ms"].get<double>());
    std::printf("  weights/step    %.1f MB  achieved %.2f GB/s",
                m["weight_bytes_per_step"].get<double>() / 1e6,
                m["achieved_weight_gbs"].get<double>());
    if (m["weight_stream_ms"].is_null())
      std::printf("\n");
    else
      std::printf("  (stream once: %.2f ms; step/stream = %.2fx)\n",
                  m["weight_stream_ms"].get<double>(), m["step_over_stream"].get<double>());
  };
  const SamplingOptions& sp = o.sampling;
  std::printf(
      "workload         %d image(s) x %d tokens, cfg %.2f (%d rows per step), T %.2f, "
      "top-k %d, top-p %.2f\n",
      o.n, K, sp.cfg_scale, sp.cfg_scale > 1.0f ? 2 * o.n : o.n, sp.temperature, sp.top_k,
      sp.top_p);
  if (on_cpu)
    std::printf("machine read     %.2f GB/s\n", machine);
  else
    std::printf(
        "machine read     not measured: the model is on %s (scripts/gpu-check.sh measures "
        "the card)\n",
        o.device.c_str());
  print_model("model", j);
  {
    std::string forked, serial;
    for (const auto& r : region_json) {
      const std::string op = r["op"].get<std::string>();
      if (r["forked"].get<double>() > 0)
        forked += (forked.empty() ? "" : ", ") + op + " " + fmt(r["forked"].get<double>(), 1);
      if (r["serial"].get<double>() > 0)
        serial += (serial.empty() ? "" : ", ") + op + " " + fmt(r["serial"].get<double>(), 1);
    }
    std::printf("  regions/forward %s shared by the threads (%s); %s on one thread (%s)\n",
                fmt(forked_total, 1).c_str(), forked.empty() ? "none" : forked.c_str(),
                fmt(serial_total, 1).c_str(), serial.empty() ? "none" : serial.c_str());
  }
  if (j["achieved_weight_gbs"].get<double>() > machine)
    std::printf("%s\n", cache_note(j["weight_bytes_per_step"].get<double>(),
                                   "the achieved " +
                                       fmt(j["achieved_weight_gbs"].get<double>(), 2) + " GB/s")
                            .c_str());
  if (models.size() > 1) {
    print_model("against", j["against"]);
    std::printf("tokens/s ratio   %.2fx model/against  (median of %d paired rounds: %s)\n",
                j["tokens_per_s_ratio_vs_against"].get<double>(), o.repeat,
                list(j["ratio_rounds"]).c_str());
  }
  if (o.torch)
    std::printf("pytorch ref      %.2f tokens/s  (tessera speed-up %.2fx)\n",
                j["torch_tokens_per_s"].get<double>(), j["speedup_vs_torch"].get<double>());
}

}  // namespace tessera::cli
