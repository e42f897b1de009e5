#include "bench_methods.h"
#include "common.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "method_flags.h"
#include "stats_json.h"
#include "text_format.h"

namespace tessera::cli {

void bench_methods(const MethodsBenchOptions& b) {
  LoadOptions lo;
  lo.threads = b.threads;
  lo.check_weights = b.check_weights;
  lo.load_decoder = false;
  auto pipe = Pipeline::load(b.model, lo);
  const GptConfig& cfg = pipe->config().gpt;
  std::vector<std::string> methods = b.methods;
  methods.erase(std::remove(methods.begin(), methods.end(), "vanilla"), methods.end());
  methods.insert(methods.begin(), "vanilla");  // the baseline, measured in this run
  std::vector<Condition> conds;
  for (int i = 0; i < b.n; ++i)
    conds.push_back(cfg.is_c2i() ? Condition::label((b.class_id + i) % cfg.num_classes)
                                 : Condition::unconditional());
  {  // warm-up: page in the weights (and the draft model's) before anything is timed
    GenerateOptions w = b.gen;
    w.spec.method = "vanilla";
    w.spec.draft_model.clear();
    w.max_tokens = 2;
    pipe->generate({conds.front()}, w);
  }
  nlohmann::json rows = nlohmann::json::array();
  double vanilla_s = 0.0;
  for (const std::string& m : methods) {
    GenerateOptions o = b.gen;
    o.spec.method = m;
    if (!uses_draft_model(m)) o.spec.draft_model.clear();
    GenerateStats st;
    if (!b.quiet) std::fprintf(stderr, "bench: %s ...\n", m.c_str());
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
  const SamplingOptions& s = b.gen.sampling;
  nlohmann::json j = {{"model", b.model},
                      {"draft", b.gen.spec.draft_model},
                      {"threads", pipe->threads()},
                      {"load", load_report_json(pipe->load_report())},
                      {"images", b.n},
                      {"batch", b.gen.batch},
                      {"seed", b.gen.seed},
                      {"cfg", s.cfg_scale},
                      {"temperature", s.temperature},
                      {"top_k", s.top_k},
                      {"top_p", s.top_p},
                      {"methods", rows}};
  if (b.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf(
      "model %s, draft %s, %d image(s), batch %d, seed %llu, cfg %.2f, T %.2f, "
      "top-k %d, top-p %.2f, %d threads\n",
      b.model.c_str(), b.gen.spec.draft_model.empty() ? "-" : b.gen.spec.draft_model.c_str(), b.n,
      b.gen.batch, static_cast<unsigned long long>(b.gen.seed), s.cfg_scale, s.temperature, s.top_k,
      s.top_p, pipe->threads());
  std::printf("%s\n", load_report_text(pipe->load_report()).c_str());
  std::printf("%-12s %10s %8s %7s %9s %9s %8s %8s %8s %8s %9s\n", "method", "s/image", "speed-up",
              "MAL", "NFE/img", "draft fw", "target%", "draft%", "verify%", "acc@1", "rules/fw");
  for (const auto& r : rows) {
    const double sec = r["seconds"].get<double>();
    const auto& ts = r["time_split_s"];
    const auto acc = r["acceptance_by_depth"].get<std::vector<double>>();
    std::printf("%-12s %10.3f %7.2fx %7.2f %9.1f %9lld %7.1f%% %7.1f%% %7.1f%% %8s %8.2f%%\n",
                r["method"].get<std::string>().c_str(), r["seconds_per_image"].get<double>(),
                r["speedup_vs_vanilla"].get<double>(), r["mean_accepted_length"].get<double>(),
                r["target_forwards_per_image"].get<double>(),
                static_cast<long long>(r["batched_draft_forwards"].get<int64_t>()),
                100 * ts["target"].get<double>() / sec, 100 * ts["draft"].get<double>() / sec,
                100 * ts["verify"].get<double>() / sec, acc.empty() ? "-" : fmt(acc[0], 3).c_str(),
                100 * r["rule_overhead_vs_target_forward"].get<double>());
  }
}

}  // namespace tessera::cli
