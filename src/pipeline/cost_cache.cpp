#include "pipeline/cost_cache.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/thread_pool.h"
#include "io/regular_file.h"
#include "io/strict_json.h"
#include "pipeline/forward_cost.h"
#include "tessera/file_io.h"
#include "tessera/kernel_bench.h"

namespace tessera {

namespace {

// Bump when the measurement changes meaning or the kernels' costs change shape (a calibration
// of older kernels would choose draft lengths for costs this build no longer has): 3 = the
// one-accumulator linear kernel of issue 25; 4 = the draft model's linears threaded (a cheaper
// draft step); 5 = weights in panels with broadcast register tiles, and blocked attention scores
// (cheaper multi-position forwards); 6 = attention over a window's rows from L2 with its
// reductions in vectors (an 8-position forward fell from 1.84x to 1.63x a one-position one); 7 =
// a window's rows attend in groups that share key and value loads, and weights are prefetched
// twice (to L2, then to L1); 8 = bf16 panels stored as AMX tiles and widened in pairs, and the
// opt-in AMX path (an 8-position GPT-B bf16 forward 1.2x a one-position one on it, not 2x); 9 =
// row tiles stream the next panel (13+ row forwards 5-15% cheaper), and a calibration whose costs
// fall with k is measured again (calibrate_until_steady).
constexpr int kFormat = 9;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown cpu";
}

// A model as the costs see it: its configuration and its weights file's identity.
std::string model_key(const ModelConfig& c) {
  std::string key = std::to_string(fnv1a(read_small_file(c.dir + "/config.json", 1 << 20)));
  struct stat st {};
  const std::string weights = c.dir + "/" + (c.is_eagle() ? c.eagle.file : c.gpt.file);
  if (::stat(weights.c_str(), &st) == 0) {
    // Appended piece by piece: GCC 12 misreports "literal" + std::string&& (-Wrestrict, bug
    // 105329).
    for (const auto v : {static_cast<int64_t>(st.st_size), static_cast<int64_t>(st.st_mtim.tv_sec),
                         static_cast<int64_t>(st.st_mtim.tv_nsec)}) {
      key += ':';
      key += std::to_string(v);
    }
  }
  return key;
}

std::vector<double> measure(const AutoregressiveModel& m, bool cfg, int max_k) {
  ForwardCostSettings s;
  s.max_k = max_k;
  s.cfg = cfg;
  s.repeats = 2;
  return calibrate_until_steady([&] { return measure_forward_seconds(m, s); });
}

DraftCosts cached_or_measured(const std::string& key, const CostModel& target,
                              const CostModel& draft, bool cfg, int max_k);

}  // namespace

double largest_cost_fall(const std::vector<double>& seconds) {
  double fall = 1.0, cheapest_after = std::numeric_limits<double>::infinity();
  for (size_t k = seconds.size(); k-- > 0;) {
    fall = std::max(fall, seconds[k] / cheapest_after);
    cheapest_after = std::min(cheapest_after, seconds[k]);
  }
  return fall;
}

std::vector<double> calibrate_until_steady(const std::function<std::vector<double>()>& measure,
                                           int attempts, double tolerance) {
  std::vector<double> best;
  double best_fall = std::numeric_limits<double>::infinity();
  for (int a = 0; a < attempts; ++a) {
    std::vector<double> costs = measure();
    const double fall = largest_cost_fall(costs);
    if (fall <= tolerance) return costs;
    if (fall < best_fall) {
      best_fall = fall;
      best = std::move(costs);
    }
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.2f", fall);
    log_info(std::string("note: a shorter forward measured ") + ratio +
             "x a longer one, so the machine looks busy; " +
             (a + 1 < attempts ? "measuring the forward costs again"
                               : "keeping the steadiest of the measurements"));
  }
  return best;
}

std::string user_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/tessera";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/tessera";
  return "";
}

std::string draft_costs_key(const CostModel& target, const CostModel& draft, bool cfg, int max_k,
                            const std::string& device) {
  std::string key = "v";
  for (const std::string& part :
       {std::to_string(kFormat), std::string("|target "), model_key(*target.config),
        std::string("|draft "), draft.model ? model_key(*draft.config) : std::string("-"),
        std::string(cfg ? "|cfg 1" : "|cfg 0"), std::string("|k "), std::to_string(max_k),
        std::string("|cpu "), cpu_model_name(), std::string("|kernels "), linear_kernel_isa(),
        std::string("|threads "), std::to_string(cpu_pool().threads()), std::string("|device "),
        device})
    key += part;
  return key;
}

DraftCosts calibrated_draft_costs(const CostModel& target, const CostModel& draft, bool cfg,
                                  int max_k) {
  const std::string key =
      draft_costs_key(target, draft, cfg, max_k, target.model->backend().name());
  // One measurement per process and key even without a cache directory: the images of one run
  // must not depend on its calls.
  static std::mutex mutex;
  static std::map<std::string, DraftCosts> memo;
  const std::lock_guard<std::mutex> lock(mutex);
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  const DraftCosts c = cached_or_measured(key, target, draft, cfg, max_k);
  memo[key] = c;
  return c;
}

namespace {
DraftCosts cached_or_measured(const std::string& key, const CostModel& target,
                              const CostModel& draft, bool cfg, int max_k) {
  const std::string dir = user_cache_dir();
  char name[40];
  std::snprintf(name, sizeof name, "/forward-costs-%016llx.json",
                static_cast<unsigned long long>(fnv1a(key)));
  const std::string path = dir.empty() ? "" : dir + name;
  if (!path.empty() && std::filesystem::exists(path)) {
    try {
      const nlohmann::json j = parse_strict_json(read_small_file(path, 1 << 20), path);
      DraftCosts c;
      c.verify = j.at("verify").get<std::vector<double>>();
      c.draft_step = j.at("draft_step").get<double>();
      bool ok = j.at("key").get<std::string>() == key &&
                static_cast<int>(c.verify.size()) == max_k && c.draft_step >= 0.0;
      for (double v : c.verify) ok = ok && v > 0.0 && std::isfinite(v);
      if (ok) return c;
      log_info("note: " + path + " does not hold these models' costs; measuring them again");
    } catch (const std::exception& e) {
      log_info("note: ignoring the corrupt cost cache " + path + " (" + e.what() +
               "); measuring again");
    }
  }
  log_info("--draft-len auto: measuring this model's forward costs (once per model and device)");
  DraftCosts c;
  c.verify = measure(*target.model, cfg, max_k);
  if (draft.model) c.draft_step = measure(*draft.model, cfg, 1)[0];
  if (!path.empty()) {
    try {
      std::filesystem::create_directories(dir);
      const nlohmann::json j = {{"key", key}, {"verify", c.verify}, {"draft_step", c.draft_step}};
      write_file_atomic(path, j.dump(1) + "\n");
    } catch (const std::exception& e) {
      log_info(std::string("note: cannot cache the forward costs: ") + e.what());
    }
  }
  return c;
}
}  // namespace

}  // namespace tessera
