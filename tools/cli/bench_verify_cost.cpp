#include "bench_verify_cost.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common.h"
#include "tessera/bandwidth.h"
#include "tessera/kernel_bench.h"
#include "tessera/peak_flops.h"
#include "tessera/tessera.h"

namespace tessera::cli {

namespace {
// A number with `digits` decimals, or "-" for none (a verification the backend cannot make).
std::string fixed_or_dash(double v, int digits) {
  if (!(v > 0.0)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}
}  // namespace

void parse_k_range(const std::string& text, int& from, int& to) {
  const size_t colon = text.find(':');
  from = colon == std::string::npos ? 1 : parse_int(text.substr(0, colon), "--k-range");
  to = parse_int(colon == std::string::npos ? text : text.substr(colon + 1), "--k-range");
  if (from < 1 || to < from)
    throw Error(
        "--k-range: expected FROM:TO with 1 <= FROM <= TO (new positions per sequence), "
        "got '" +
        text + "'");
}

void bench_verify_cost(const VerifyCostOptions& o) {
  LoadOptions lo;
  lo.threads = o.threads;
  lo.check_weights = o.check_weights;
  lo.device = o.device;
  lo.load_decoder = false;
  auto pipe = Pipeline::load(o.model, lo);
  const int n_tokens = pipe->config().gpt.n_image_tokens();
  if (o.k_to > n_tokens)
    throw Error("--k-range: k " + std::to_string(o.k_to) + " exceeds the image's " +
                std::to_string(n_tokens) + " tokens");
  const bool cfg = o.cfg_scale > 1.0f;
  const double bandwidth = (o.read_gbs > 0.0 ? o.read_gbs : memory_read_bandwidth_gbs()) * 1e9;
  const PeakFlops peak = measure_peak_flops();
  // The compute bound per unit of work on the kernel path that runs. f32 and f16 weights are
  // multiplied in f32 (FMAs). bf16 weights: on the "amx" path (TESSERA_LINEAR_ISA=amx) at the AMX
  // tile peak; otherwise the kernel widens them to f32 and the bound takes the faster of f32 FMAs
  // and bf16 dot products. Attention is f32 FMAs.
  const bool bf16 = pipe->config().gpt.dtype == "bf16";
  const bool amx = bf16 && linear_kernel_isa() == "amx" && peak.amx_bf16_gflops > 0;
  const double matmul_gflops = amx    ? peak.amx_bf16_gflops
                               : bf16 ? std::max(peak.f32_fma_gflops, peak.bf16_dot_gflops)
                                      : peak.f32_fma_gflops;
  const char* matmul_unit = amx                                    ? "AMX bf16"
                            : matmul_gflops == peak.f32_fma_gflops ? "f32 FMA"
                                                                   : "bf16 dot";
  const double bytes = static_cast<double>(pipe->weight_bytes_per_step());
  const std::vector<double> sec = pipe->forward_seconds(o.k_to, cfg, o.repeat);
  // The device loop's verification of a chain of k - 1 drafts (the forward's k positions): its
  // upload, target distributions, walk and download (empty where the backend cannot).
  const std::vector<double> verify =
      o.k_to > 1 ? pipe->verify_seconds(o.k_to - 1, cfg, o.repeat) : std::vector<double>{};
  auto compute_seconds = [&](int k) {
    const ForwardFlops f = pipe->forward_flops(k, cfg);
    return f.matmul / (matmul_gflops * 1e9) + f.attention / (peak.f32_fma_gflops * 1e9);
  };
  auto bound = [&](int k) { return std::max(bytes / bandwidth, compute_seconds(k)); };

  // An overhead-free loop that reads f32 weights with a kernel's FMAs on them and nothing else
  // (tessera/bandwidth.h), against its own roofline: max(time to read at its 1-row rate, time of
  // its FMAs at the peak). What this machine allows where memory and arithmetic both count.
  nlohmann::json probe = nlohmann::json::array();
  const std::vector<int> probe_rows = {1, 2, 4, 8, 12, 16, 24, 32};
  const bool csv = o.format == "csv";  // csv has no place for the probe's table
  const std::vector<ReadWithFmaProbe> probe_runs =
      csv ? std::vector<ReadWithFmaProbe>{} : memory_read_with_fma(probe_rows);
  int errors = 0;  // fractions of a roofline above kRooflineMeasurementError
  auto flagged = [&errors](double fraction) {
    const bool error = fraction > kRooflineMeasurementError;
    errors += error ? 1 : 0;
    return error;
  };
  for (const ReadWithFmaProbe& p : probe_runs) {
    const int r = p.rows;
    const double gbs = p.read_gbs;
    const double read = 1.0 / (probe_runs[0].read_gbs * 1e9);  // seconds per byte at 1 row
    const double compute = 2.0 * r / 4.0 / (peak.f32_fma_gflops * 1e9);
    const double fraction = std::max(read, compute) * gbs * 1e9;
    probe.push_back({{"rows", r},
                     {"flops_per_byte", r / 2.0},
                     {"read_gbs", gbs},
                     {"compute_over_read", compute / read},
                     {"fraction_of_roofline", fraction},
                     {"measurement_error", flagged(fraction)},
                     {"sum", p.sum}});
  }

  nlohmann::json rows = nlohmann::json::array();
  for (int k = o.k_from; k <= o.k_to; ++k) {
    const double t = sec[k - 1], b = bound(k);
    // k positions verify k - 1 drafts; k = 1 (no draft) has no walk.
    const double v = k >= 2 && !verify.empty() ? verify[k - 2] : 0.0;
    rows.push_back({{"k", k},
                    {"verify_seconds", v},
                    {"verify_over_forward", v / t},
                    {"rows", k * (cfg ? 2 : 1)},
                    {"seconds", t},
                    {"ratio", t / sec[0]},
                    {"roofline_seconds", b},
                    {"roofline_ratio", b / bound(1)},
                    {"gflops", pipe->forward_flops(k, cfg).total() / t / 1e9},
                    {"fraction_of_roofline", b / t},
                    {"measurement_error", flagged(b / t)}});
  }
  if (o.format == "json") {
    nlohmann::json j = {{"model", o.model},
                        {"dtype", pipe->config().gpt.dtype},
                        {"threads", pipe->threads()},
                        {"cfg", cfg},
                        {"weight_bytes", bytes},
                        {"read_bandwidth_gbs", bandwidth / 1e9},
                        {"f32_fma_gflops", peak.f32_fma_gflops},
                        {"bf16_dot_gflops", peak.bf16_dot_gflops},
                        {"amx_bf16_gflops", peak.amx_bf16_gflops},
                        {"linear_kernel", linear_kernel_isa()},
                        {"matmul_peak_used", matmul_unit},
                        {"read_bandwidth_given", o.read_gbs > 0.0},
                        {"rows", rows},
                        {"read_with_fma_probe", probe},
                        {"measurement_error_above", kRooflineMeasurementError},
                        {"measurement_errors", errors}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  if (csv) {
    std::printf(
        "k,rows,seconds,ratio,roofline_seconds,roofline_ratio,gflops,fraction_of_roofline,"
        "measurement_error,verify_seconds,verify_over_forward\n");
  } else {
    std::printf(
        "model %s (%s, %.1f MB streamed per forward), %d thread(s), %s, linear kernel %s; read "
        "bandwidth %.1f GB/s%s, f32 FMA peak %.0f GFLOP/s, bf16 dot peak %.0f GFLOP/s, AMX bf16 "
        "peak %.0f GFLOP/s (roofline: matrix multiplies at %s, attention at f32 FMA); best of %d "
        "forwards per k after half an image in the KV cache\n",
        o.model.c_str(), pipe->config().gpt.dtype.c_str(), bytes / 1e6, pipe->threads(),
        cfg ? "CFG: 2 rows per position" : "no CFG: 1 row per position",
        linear_kernel_isa().c_str(), bandwidth / 1e9, o.read_gbs > 0.0 ? " (given)" : "",
        peak.f32_fma_gflops, peak.bf16_dot_gflops, peak.amx_bf16_gflops, matmul_unit, o.repeat);
    std::printf(
        "| k | rows | ms | ratio to k=1 | roofline ms | roofline ratio | GFLOP/s | of roofline "
        "| verify ms (k - 1 drafts) | verify / forward |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  }
  // md: a flagged fraction is marked, and a note under the tables says what the mark means.
  auto mark = [](const nlohmann::json& row) {
    return row["measurement_error"].get<bool>() ? " (!)" : "";
  };
  for (const auto& r : rows) {
    const double t = r["seconds"].get<double>(), b = r["roofline_seconds"].get<double>();
    const double v = r["verify_seconds"].get<double>();
    if (csv)
      std::printf("%d,%d,%.6f,%.4f,%.6f,%.4f,%.2f,%.4f,%d,%.9f,%.4f\n", r["k"].get<int>(),
                  r["rows"].get<int>(), t, r["ratio"].get<double>(), b,
                  r["roofline_ratio"].get<double>(), r["gflops"].get<double>(),
                  r["fraction_of_roofline"].get<double>(),
                  static_cast<int>(r["measurement_error"].get<bool>()), v,
                  r["verify_over_forward"].get<double>());
    else
      std::printf("| %d | %d | %.3f | %.2f | %.3f | %.2f | %.1f | %.0f%%%s | %s | %s |\n",
                  r["k"].get<int>(), r["rows"].get<int>(), t * 1e3, r["ratio"].get<double>(),
                  b * 1e3, r["roofline_ratio"].get<double>(), r["gflops"].get<double>(),
                  100 * r["fraction_of_roofline"].get<double>(), mark(r),
                  fixed_or_dash(v * 1e3, 3).c_str(),
                  fixed_or_dash(r["verify_over_forward"].get<double>(), 2).c_str());
  }
  const std::string what =
      "more than " + std::to_string(static_cast<int>(100 * kRooflineMeasurementError + 0.5)) +
      "% of the roofline: a measurement error, not a speed (a time below its bound means the "
      "bound's bandwidth, peak or FLOP count is wrong, or the timing missed work)";
  if (csv) {
    if (errors > 0) std::fprintf(stderr, "warning: %d row(s) at %s\n", errors, what.c_str());
    return;
  }
  std::vector<int> over;
  for (const auto& r : rows)
    if (r["fraction_of_roofline"].get<double>() > 1.0) over.push_back(r["k"].get<int>());
  if (!over.empty())
    std::printf("%s\n",
                cache_note(bytes, std::to_string(over.size()) + " of the forwards (k = " +
                                      std::to_string(over.front()) + ".." +
                                      std::to_string(over.back()) + ") over 100% of the roofline")
                    .c_str());
  std::printf(
      "\nA loop that only reads f32 weights and multiplies each into `rows` accumulators (FMAs, "
      "prefetched as the kernel prefetches; no other work), against max(its 1-row read time, its "
      "FMAs at the peak):\n"
      "| rows | flop/B | GB/s | arithmetic / read time | of roofline |\n|---|---|---|---|---|\n");
  for (const auto& p : probe)
    std::printf("| %d | %.1f | %.1f | %.2f | %.0f%%%s |\n", p["rows"].get<int>(),
                p["flops_per_byte"].get<double>(), p["read_gbs"].get<double>(),
                p["compute_over_read"].get<double>(), 100 * p["fraction_of_roofline"].get<double>(),
                mark(p));
  if (errors > 0) std::printf("\n(!) %s\n", what.c_str());
}

}  // namespace tessera::cli
