// The subcommands of tessera, one file each (cmd_<name>.cpp): add_<name> registers the subcommand
// and its flags on the app and returns what runs it once the command line selected it.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace tessera::cli {

struct Command {
  CLI::App* app = nullptr;   // the subcommand; app->parsed() after a parse that selected it
  std::function<int()> run;  // returns the exit code; bad input throws tessera::Error
};

Command add_generate(CLI::App& app);
Command add_forward(CLI::App& app);
Command add_decode(CLI::App& app);
Command add_classes(CLI::App& app);
Command add_bench(CLI::App& app);

}  // namespace tessera::cli
