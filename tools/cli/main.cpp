// tessera command-line tool: a thin front-end over the public API (include/tessera/). Each
// subcommand lives in its own cmd_<name>.cpp; this file parses and dispatches, and turns every
// failure into one "error: ..." line.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <vector>

#include "commands.h"
#include "method_flags.h"
#include "tessera/error.h"

using namespace tessera;

int main(int argc, char** argv) {
  CLI::App app{"tessera: autoregressive image generation (LlamaGen) with speculative decoding"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tessera 0.1.0");
  const std::vector<cli::Command> commands = {cli::add_generate(app), cli::add_forward(app),
                                              cli::add_decode(app), cli::add_classes(app),
                                              cli::add_bench(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    std::fprintf(stderr, "error: %s (see tessera --help)\n", msg.c_str());
    return 2;
  }

  try {
    for (const cli::Command& c : commands)
      if (c.app->parsed()) return c.run();
  } catch (const ParameterError& e) {  // named in the CLI's terms: "--lantern-k must be >= 1"
    std::fprintf(stderr, "error: %s\n", e.message(cli::flag_of).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
