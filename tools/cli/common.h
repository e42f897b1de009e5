// Option structs and helpers shared by the subcommands (cmd_*.cpp).
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mar_commands.h"
#include "tessera/class_names.h"
#include "tessera/log.h"
#include "tessera/tessera.h"

namespace tessera::cli {

// -m, -t, -q and -v of every subcommand.
struct CommonOpts {
  std::string model;
  int threads = 0;
  bool check_weights = true;   // --no-check-weights turns the NaN/Inf scan off
  std::string device = "cpu";  // --device
  bool quiet = false;
  bool verbose = false;
};
void add_common(CLI::App* cmd, CommonOpts& o, bool model_required = true);
// --device-loop auto|on|off (GenerateOptions::device_loop).
void add_device_loop(CLI::App* cmd, DeviceLoop& loop);
// Sets the log level from --quiet / --verbose, checks -m names a model directory, and notes a
// -t above the machine's physical cores. Every subcommand calls it first.
void apply_common(const CommonOpts& o);
inline bool verbose() {
  return log_level() >= LogLevel::Debug;
}

// Throws unless dir holds a model (config.json): "not a model directory", naming the models a
// directory of models holds (models/emoji -> target, draft). flag: how the user gave it.
void check_model_dir(const std::string& dir, const std::string& flag);

// What an image is conditioned on: --class, --caption or --uncond.
struct CondOpts {
  int class_id = -1;
  std::string caption;
  bool uncond = false;
  std::string text;  // a typed prompt for a t2i model's text encoder (Pipeline::text_condition)
};
Condition make_condition(const CondOpts& c, const GptConfig& cfg);

// Integers >= min, with a message that says so (CLI11's PositiveNumber prints a float range).
CLI::Validator int_at_least(long long min);

// Fails before any work, naming the flag, the path and the OS reason, when an output could not be
// written: its directory is missing or not writable, or the name is a directory (an empty path:
// not given, nothing to check). n, first: the numbered files (numbered()) it stands for. image:
// also check the name's image format (extension) and pattern.
void check_output_path(const std::string& path, const char* flag, int n = 1, size_t first = 0,
                       bool image = false);

// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> split_list(const std::string& s);
// A positive integer from a list item of `flag`.
int parse_int(const std::string& v, const char* flag);

bool is_mar(const std::string& dir);

// MAR's sampling flags of generate and bench (its methods' flags come from the registry).
struct MarOnly {
  int steps = 64;
  std::string cfg_schedule = "linear";
};
struct ModelDefaults;
void add_mar_options(CLI::App* cmd, MarOnly& o, const ModelDefaults& md);

// The MAR run options from the shared flags. MAR's own defaults (main_mar.py) apply where a shared
// flag was not given: cfg 1.0 (no guidance), temperature 1.0, draft length 8. cmd: the parsed
// subcommand (null: no flag was given).
MarRunOptions mar_run(const CommonOpts& common, const CondOpts& cond, int n,
                      const GenerateOptions& g, const MarOnly& m, const CLI::App* cmd);

// The model's recommended sampling settings (config.json "sampling") for each flag not given.
void apply_model_sampling_defaults(const SamplingDefaults& d, const CLI::App& cmd,
                                   SamplingOptions& s);

// "load 41 ms (NaN/Inf scan of 41.2 MB of weights: 9 ms, 22%)" for the benches' headers, and
// the same as JSON.
std::string load_report_text(const LoadReport& r);
nlohmann::json load_report_json(const LoadReport& r);

// For a rate above the machine's measured read bandwidth (a bench's GB/s, a verify-cost row over
// 100% of its roofline): the weights fit, wholly or partly, in the CPU's caches, which the
// memory-bandwidth bound does not count. One line naming the sizes.
std::string cache_note(double weight_bytes, const std::string& what);

// The class names of a model directory (classes.json); an Error when it has none.
ClassNames model_class_names(const std::string& dir);

}  // namespace tessera::cli
