#include "bench_t5.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench_common.h"
#include "common.h"
#include "tessera/cpu_threads.h"
#include "tessera/error.h"
#include "tessera/log.h"
#include "tessera/peak_flops.h"
#include "tessera/text_encoder.h"
#include "text_format.h"

#ifndef TESSERA_SOURCE_DIR
#define TESSERA_SOURCE_DIR "."
#endif

namespace tessera::cli {
namespace {

// Repeated until the tokenizer cuts it at --tokens: a deterministic prompt of exactly N tokens.
constexpr const char* kSentence =
    "A watercolor painting of a small red fox sitting under a tall pine tree in the snow, "
    "with soft morning light and mountains far away in the background. ";

// The multiply-adds of one encode of n tokens, a multiply-add counted as 2 FLOPs:
//   matrix multiplies  2 * params_per_token * n, params_per_token = L * (4 * d_model * inner +
//                      3 * d_model * d_ff) (q, k, v, o; wi_0, wi_1, wo; inner = heads * d_kv);
//                      the embedding lookup, norms, softmax and GELU are not counted
//   attention          L * 4 * n * n * inner (q·k scores and the weighted sum of the values)
double encode_flops(const T5Config& c, int n) {
  const double inner = static_cast<double>(c.num_heads) * c.d_kv;
  const double per_token =
      static_cast<double>(c.num_layers) * (4.0 * c.d_model * inner + 3.0 * c.d_model * c.d_ff);
  return 2.0 * per_token * n + c.num_layers * 4.0 * n * n * inner;
}

// The python that runs --torch: the eval venv's (TESSERA_EVAL_PYTHON overrides it), checked
// before anything is loaded or timed.
std::string eval_python() {
  const char* env = std::getenv("TESSERA_EVAL_PYTHON");
  const std::string python = env && *env ? env : "/opt/tessera-eval-venv/bin/python3";
  if (std::system(("'" + python + "' -c 'import transformers' >/dev/null 2>&1").c_str()) != 0)
    throw Error("--torch needs transformers: run scripts/setup-deps.sh (" + python +
                " cannot import it; TESSERA_EVAL_PYTHON names another python)");
  return python;
}

// python/bench_t5_torch.py: transformers' T5EncoderModel on the same weights and ids, f32, in
// this run. Returns its JSON line.
nlohmann::json run_torch(const T5BenchOptions& o, const std::string& python,
                         const std::vector<int32_t>& ids, int threads) {
  std::string id_list;
  for (const int32_t id : ids) id_list += (id_list.empty() ? "" : ",") + std::to_string(id);
  const std::string script = std::string(TESSERA_SOURCE_DIR) + "/python/bench_t5_torch.py";
  const std::string cmd = "'" + python + "' " + script + " --model '" + o.model + "' --ids " +
                          id_list + " --threads " + std::to_string(threads) + " --repeat " +
                          std::to_string(o.repeat);
  log_info("running: " + python + " " + script + " --model '" + o.model + "' --ids (" +
           std::to_string(ids.size()) + " ids) --threads " + std::to_string(threads) +
           " --repeat " + std::to_string(o.repeat));
  return run_reference_bench(cmd, "transformers benchmark", script + " on " + o.model);
}

}  // namespace

void bench_t5(const T5BenchOptions& o) {
  const std::string python = o.torch ? eval_python() : "";
  LoadOptions lo;
  lo.threads = o.threads;
  lo.check_weights = o.check_weights;
  lo.device = o.device;
  const double t0 = now_s();
  const auto enc = TextEncoder::load(o.model, lo);
  const double load_s = now_s() - t0;
  const T5Config& c = enc->config().t5;
  const int n = o.tokens;

  // The prompt: the sentence repeated until it has more than n tokens, then cut to n (EOS last).
  std::string prompt = kSentence;
  bool cut = false;
  for (int i = 0; i < 1000 && (enc->tokenize(prompt, n, &cut), !cut); ++i) prompt += kSentence;
  const std::vector<int32_t> ids = enc->tokenize(prompt, n);
  if (static_cast<int>(ids.size()) != n)
    throw Error("internal: the bench prompt has " + std::to_string(ids.size()) +
                " tokens, not --tokens " + std::to_string(n));
  auto encode = [&] { return enc->encode(prompt, n, TextPreprocessing::None); };

  const TextEncoding warm = encode();  // untimed: pages in the weights, sizes the buffers
  if (warm.ids != ids) throw Error("internal: encode tokenized the bench prompt differently");
  // threads: the configured count, which --torch gets too; in use: the pool's team after each
  // timed encode, fewer while other processes keep cores busy (tessera/cpu_threads.h).
  const int threads = enc->threads();
  std::vector<double> ms;
  std::vector<int> in_use;
  for (int r = 0; r < o.repeat; ++r) {
    const double t = now_s();
    encode();
    ms.push_back(1e3 * (now_s() - t));
    in_use.push_back(cpu_threads_in_use());
  }
  const double med = median(ms);
  const double flops = encode_flops(c, n);
  const bool on_cpu = o.device.rfind("cpu", 0) == 0;
  const double peak = on_cpu ? measure_peak_flops().f32_fma_gflops : 0.0;

  nlohmann::json j = {{"model", o.model},
                      {"architecture", "t5_encoder"},
                      {"device", o.device},
                      {"weights_dtype", c.dtype},
                      {"threads", threads},
                      {"threads_in_use_rounds", in_use},
                      {"load_seconds", load_s},
                      {"tokens", n},
                      {"rounds", o.repeat},
                      {"ms", med},
                      {"ms_rounds", ms},
                      {"tokens_per_s", n / (med * 1e-3)},
                      {"gflop_per_encode", flops / 1e9},
                      {"gflops", flops / (med * 1e-3) / 1e9}};
  j["machine_f32_fma_gflops"] = on_cpu ? nlohmann::json(peak) : nlohmann::json();
  j["of_f32_fma_peak"] =
      on_cpu && peak > 0 ? nlohmann::json(flops / (med * 1e-3) / 1e9 / peak) : nlohmann::json();
  if (o.torch) {
    const nlohmann::json t = run_torch(o, python, ids, threads);
    j["torch"] = t;
    j["torch_ms"] = t["ms"];
    j["torch_gflops"] = flops / (t["ms"].get<double>() * 1e-3) / 1e9;
    j["speedup_vs_torch"] = t["ms"].get<double>() / med;
  }

  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::string rounds;
  for (const double x : ms) rounds += (rounds.empty() ? "" : " ") + fmt(x, 1);
  std::printf("model            %s (T5 encoder, %d layers, d_model %d, %s weights, %d threads)\n",
              o.model.c_str(), c.num_layers, c.d_model, c.dtype.c_str(), threads);
  std::printf("  load           %.2f s\n", load_s);
  std::printf("workload         one prompt of %d tokens (EOS included), %.3g GFLOP per encode\n", n,
              flops / 1e9);
  std::printf("  ms/encode      %.1f   (median of %d: %s)\n", med, o.repeat, rounds.c_str());
  std::printf("  tokens/s       %.1f\n", n / (med * 1e-3));
  std::printf("  GFLOP/s        %.3g", flops / (med * 1e-3) / 1e9);
  if (on_cpu && peak > 0)
    std::printf("   (%.0f%% of the measured f32 FMA peak, %.1f GFLOP/s)",
                100.0 * j["of_f32_fma_peak"].get<double>(), peak);
  std::printf("\n");
  if (*std::min_element(in_use.begin(), in_use.end()) < threads)
    std::printf(
        "  note           other processes took cores: the encodes ran on fewer than %d "
        "threads at times\n",
        threads);
  if (o.torch)
    std::printf("transformers     %.1f ms/encode, %.1f GFLOP/s  (tessera speed-up %.2fx)\n",
                j["torch_ms"].get<double>(), j["torch_gflops"].get<double>(),
                j["speedup_vs_torch"].get<double>());
}

}  // namespace tessera::cli
