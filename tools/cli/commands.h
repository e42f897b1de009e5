// The subcommands of tessera, one file each (cmd_<name>.cpp): add_<name> registers the subcommand
// and its flags on the app and returns what runs it once the command line selected it.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "tessera/tessera.h"

namespace tessera::cli {

struct Command {
  CLI::App* app = nullptr;   // the subcommand; app->parsed() after a parse that selected it
  std::function<int()> run;  // returns the exit code; bad input throws tessera::Error
};

// What --help shows as the sampling defaults: the model's own settings (config.json "sampling",
// MAR's cfg 1 and temperature 1), resolved from -m on the command line or the default model
// before the flags are defined.
struct ModelDefaults {
  SamplingOptions sampling;
  QualitySection quality;    // the model's validated method settings (config.json "quality")
  std::string draft;         // the draft its config.json names, as written ("../draft"); "": none
  int mar_tokens = 0;        // a MAR model's tokens per image (its most --steps); 0: not MAR
  std::string model;         // the model they were read from ("" when none could be read)
  bool model_given = false;  // from -m (else the default model)
};
ModelDefaults model_defaults(int argc, const char* const* argv);

Command add_generate(CLI::App& app, const ModelDefaults& md);
Command add_forward(CLI::App& app);
Command add_encode(CLI::App& app);
Command add_decode(CLI::App& app);
Command add_classes(CLI::App& app);
Command add_devices(CLI::App& app);
Command add_bench(CLI::App& app, const ModelDefaults& md);
Command add_tune(CLI::App& app, const ModelDefaults& md);
Command add_serve(CLI::App& app, const ModelDefaults& md);

}  // namespace tessera::cli
