#include "common.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "commands.h"
#include "default_model.h"
#include "image_output.h"
#include "tessera/devices.h"
#include "tessera/file_io.h"
#include "tessera/log.h"
#include "tessera/mar.h"
#include "text_format.h"

namespace tessera::cli {

void add_common(CLI::App* cmd, CommonOpts& o, bool model_required) {
  auto* m = cmd->add_option("-m,--model", o.model, "Model directory (config.json + safetensors)");
  if (model_required) m->required();
  cmd->add_option("-t,--threads", o.threads,
                  "CPU threads (default: all cores; more than the machine has are clamped)")
      ->check(int_at_least(0));
  cmd->add_option("--device", o.device, "Where the model runs: cpu, cuda (= cuda:0) or cuda:N")
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", o.quiet, "No progress or info messages on stderr");
  cmd->add_flag("-v,--verbose", o.verbose,
                "More detail on stderr: load time and weight scan, threads, time split");
  cmd->add_flag("!--no-check-weights", o.check_weights,
                "Unsafe: skip the NaN/Inf scan of the weights at load (a corrupt checkpoint then "
                "gives noise images, exit code 0)");
}

void add_device_loop(CLI::App* cmd, DeviceLoop& loop) {
  cmd->add_option_function<std::string>(
         "--device-loop",
         [&loop](const std::string& v) {
           loop = v == "on" ? DeviceLoop::On : v == "off" ? DeviceLoop::Off : DeviceLoop::Auto;
         },
         "Where tokens are drawn: on draws vanilla's tokens where the logits are (each step a "
         "replayed CUDA graph) and verifies speculative rounds, chains and trees, under the ratio "
         "rules and LANTERN (sd, sjd, eagle, medusa, hawk, lantern, lantern++, cool-sd, "
         "uniform-rsd, amplify, addition) there, reading back one verdict per image, and steps "
         "MAR's diffusion chains there; off reads every step's logits back to the host; auto: on "
         "for a GPU, off on the CPU")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->default_str("auto");
}

namespace {
// Physical cores (distinct core ids per package), or 0 when sysfs does not say.
int physical_cores() {
  std::set<std::pair<std::string, std::string>> cores;
  for (int cpu = 0;; ++cpu) {
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::ifstream core(dir + "core_id"), pkg(dir + "physical_package_id");
    if (!core) break;
    std::string c, p;
    core >> c;
    pkg >> p;
    cores.insert({p, c});
  }
  return static_cast<int>(cores.size());
}
}  // namespace

void apply_common(const CommonOpts& o) {
  if (o.quiet && o.verbose) throw Error("give -q (quiet) or -v (verbose), not both");
  set_log_level(o.quiet ? LogLevel::Quiet : o.verbose ? LogLevel::Debug : LogLevel::Info);
  check_device(o.device);  // before any work: a CUDA device this build or machine lacks
  if (!o.model.empty()) check_model_dir(o.model, "-m " + o.model);
  if (const int cores = physical_cores(); o.threads > cores && cores > 0)
    log_info("note: -t " + std::to_string(o.threads) + " is more threads than this machine's " +
             std::to_string(cores) +
             " physical cores; decoding is memory-bound, so extra threads usually slow it down");
}

void check_model_dir(const std::string& dir, const std::string& flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error(flag + ": " + (fs::exists(dir, ec) ? "not a directory" : "no such directory"));
  if (fs::exists(fs::path(dir) / "config.json", ec)) return;
  std::vector<std::string> inside;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (fs::exists(e.path() / "config.json", ec)) inside.push_back(e.path().filename().string());
  std::sort(inside.begin(), inside.end());
  std::string msg =
      flag + ": not a model directory (no " + (fs::path(dir) / "config.json").string() + ")";
  if (!inside.empty()) {
    msg += "; it holds the models ";
    for (const auto& m : inside) msg += m + (m == inside.back() ? "" : ", ");
    const auto target = std::find(inside.begin(), inside.end(), "target");
    msg += ": e.g. -m " +
           (fs::path(dir) / (target != inside.end() ? *target : inside.front())).string();
  }
  throw Error(msg);
}

Condition make_condition(const CondOpts& c, const GptConfig& cfg) {
  const int given = (c.class_id >= 0) + !c.caption.empty() + c.uncond;
  if (given != 1)
    throw Error(cfg.is_c2i() ? "give exactly one of --class N or --uncond"
                             : "give exactly one of --caption FILE or --uncond");
  if (c.uncond) return Condition::unconditional();
  if (!c.caption.empty()) {
    if (cfg.is_c2i())
      throw Error("--caption " + c.caption +
                  ": this model is class-conditional (c2i): use --class, not --caption");
    return Condition::caption_file(c.caption, cfg);
  }
  if (!cfg.is_c2i())
    throw Error("this model is text-conditional (t2i): use --caption, not --class");
  if (c.class_id >= cfg.num_classes)
    throw Error("class " + std::to_string(c.class_id) + " out of range [0, " +
                std::to_string(cfg.num_classes) + ")");
  return Condition::label(c.class_id);
}

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

void check_output_path(const std::string& path, const char* flag, int n, size_t first, bool image) {
  if (path.empty()) return;
  try {
    if (image) check_image_format(path);
    // Names differ only in their number: the first few thousand and the last stand for the rest
    // (a huge -n is then refused by its memory check, not stuck here in stat calls).
    for (int i = 0; i < std::min(n, 4096); ++i) check_writable(numbered(path, i, n, first));
    if (n > 4096) check_writable(numbered(path, n - 1, n, first));
  } catch (const Error& e) {
    throw Error(std::string(flag) + ": " + e.what());
  }
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
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

bool is_mar(const std::string& dir) {
  return !dir.empty() && model_architecture(dir) == "mar";
}

void add_mar_options(CLI::App* cmd, MarOnly& o, const ModelDefaults& md) {
  // MAR's default of 64 steps is capped at the model's tokens: say what applies to this model.
  const std::string steps =
      md.mar_tokens > 0
          ? "default " + std::to_string(std::min(64, md.mar_tokens)) + ", at most " +
                std::to_string(md.mar_tokens) + " (this model's tokens: one per step)"
          : "default 64, capped at the model's tokens; at most its tokens (256 at 256 px: one per "
            "step)";
  cmd->add_option("--steps", o.steps, "MAR: autoregressive steps (" + steps + ")")
      ->check(int_at_least(1));
  cmd->add_option("--cfg-schedule", o.cfg_schedule, "MAR: guidance schedule, linear or constant")
      ->capture_default_str();
}

MarRunOptions mar_run(const CommonOpts& common, const CondOpts& cond, int n,
                      const GenerateOptions& g, const MarOnly& m, const CLI::App* cmd) {
  if (!cond.caption.empty())
    throw Error("MAR models are class-conditional: use --class, not --caption");
  MarRunOptions o;
  o.model = common.model;
  o.threads = common.threads;
  o.check_weights = common.check_weights;
  o.device = common.device;
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
  mg.sampling.device_loop = g.device_loop;
  mg.spec.method = g.spec.method;
  mg.spec.draft_model = g.spec.draft_model;
  mg.spec.draft_len = g.spec.draft_len > 0 ? g.spec.draft_len : 8;
  mg.spec.params = g.spec.params;
  return o;
}

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

namespace {
int model_num_classes(const std::string& dir) {
  const ModelConfig mc = load_model_config(dir);
  return mc.is_mar() ? mc.mar.num_classes : (mc.gpt.is_c2i() ? mc.gpt.num_classes : 0);
}
}  // namespace

ClassNames model_class_names(const std::string& dir) {
  if (!ClassNames::present(dir))
    throw Error(dir + " has no classes.json (class names); use --class N");
  return ClassNames::load(dir, model_num_classes(dir));
}

std::string cache_note(double weight_bytes, const std::string& what) {
  const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "note: %s is above what the machine's memory read bandwidth allows: the %.1f MB of "
                "weights read per step fit %s this CPU's caches%s, so some reads come from cache, "
                "not memory; the bandwidth bound holds for weights streamed from memory",
                what.c_str(), weight_bytes / 1e6,
                llc > 0 && weight_bytes <= static_cast<double>(llc) ? "in" : "partly in",
                llc > 0 ? (" (" + fmt(llc / 1e6, 1) + " MB last-level)").c_str() : "");
  return buf;
}

std::string load_report_text(const LoadReport& r) {
  char buf[160];
  if (r.checked_bytes == 0) {
    std::snprintf(buf, sizeof buf, "load %.0f ms (weights not scanned: --no-check-weights)",
                  1e3 * r.seconds);
  } else {
    std::snprintf(buf, sizeof buf,
                  "load %.0f ms (NaN/Inf scan of %.1f MB of weights: %.1f ms, %.0f%%)",
                  1e3 * r.seconds, r.checked_bytes / 1e6, 1e3 * r.check_seconds,
                  100.0 * r.check_seconds / std::max(r.seconds, 1e-12));
  }
  return buf;
}

nlohmann::json load_report_json(const LoadReport& r) {
  return {{"seconds", r.seconds},
          {"weight_check_seconds", r.check_seconds},
          {"weight_check_bytes", r.checked_bytes}};
}

}  // namespace tessera::cli

namespace tessera::cli {

ModelDefaults model_defaults(int argc, const char* const* argv) {
  ModelDefaults md;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "-m" || a == "--model") && i + 1 < argc) md.model = argv[i + 1];
    if (a.rfind("--model=", 0) == 0) md.model = a.substr(8);
  }
  md.model_given = !md.model.empty();
  md.sampling = resolve_sampling({});  // LlamaGen's, until the model says otherwise
  // Help must not fail: a model that cannot be read leaves LlamaGen's defaults (the run itself
  // then reports what is wrong with it).
  try {
    if (md.model.empty()) md.model = default_model_dir();
    const ModelConfig mc = load_model_config(md.model);
    md.quality = mc.quality;
    md.draft = mc.companions.draft;
    if (mc.is_mar()) {
      md.mar_tokens = mc.mar.seq_len();
      md.sampling.cfg_scale = 1.0f;  // MAR's own defaults (main_mar.py), see mar_run
      md.sampling.temperature = 1.0f;
    } else {
      md.sampling = resolve_sampling({}, mc.sampling);
    }
  } catch (const std::exception&) {
    md.model.clear();
  }
  return md;
}

}  // namespace tessera::cli
