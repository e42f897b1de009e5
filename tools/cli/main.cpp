// tessera command-line tool: a thin front-end over the public API (include/tessera/). Each
// subcommand lives in its own cmd_<name>.cpp; this file parses and dispatches, and turns every
// failure into one "error: ..." line.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "commands.h"
#include "default_model.h"
#include "method_flags.h"
#include "run_settings.h"
#include "tessera/config.h"
#include "tessera/error.h"
#include "tessera/log.h"
#include "tessera_commit.h"

using namespace tessera;

namespace {

// "did you mean" for a mistyped subcommand or flag (CLI11 2.1 has no suggestions of its own).
std::string suggestion(const CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> commands;
  for (const CLI::App* c : app.get_subcommands({})) commands.push_back(c->get_name());
  if (args.empty()) return "";
  const std::string& first = args.front();
  if (first.empty() || first[0] == '-') return "";
  const auto sub = std::find(commands.begin(), commands.end(), first);
  if (sub == commands.end()) {
    const std::string guess = cli::closest(first, commands);
    std::string all;
    for (const auto& c : commands) all += (all.empty() ? "" : ", ") + c;
    return "unknown command '" + first + "'" +
           (guess.empty() ? "" : "; did you mean '" + guess + "'?") + " (commands: " + all + ")";
  }
  const CLI::App* cmd = app.get_subcommand(first);
  std::vector<std::string> flags;
  for (const CLI::Option* o : cmd->get_options({}))
    for (const auto& l : o->get_lnames()) flags.push_back("--" + l);
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string a = args[i].substr(0, args[i].find('='));
    if (a.size() < 3 || a.rfind("--", 0) != 0) continue;
    if (std::find(flags.begin(), flags.end(), a) != flags.end()) continue;
    const std::string guess = cli::closest(a, flags);
    return "unknown flag " + a + " for " + first +
           (guess.empty() ? "" : "; did you mean " + guess + "?") + " (see tessera " + first +
           " --help)";
  }
  return "";
}

// The model directory an image's settings name: -m when given (with a note when its fingerprint
// differs), an old file's absolute path that still exists, else the default model when its name
// is the one stored. `what`: "model" or "draft".
std::string resolve_stored_model(const std::string& png, const std::string& name,
                                 const std::string& hash, const std::string& given,
                                 const std::vector<std::string>& candidates, const char* what,
                                 const char* flag) {
  auto note_if_differs = [&](const std::string& dir) {
    if (!hash.empty() && cli::model_hash(dir) != hash)
      log_info(std::string("note: --from-png ") + png + ": " + dir + " is not the " + what +
               " the image was made with (" + name + ", fingerprint " + hash + " against " +
               cli::model_hash(dir) + "); the image may differ");
  };
  if (!given.empty()) {
    note_if_differs(given);
    return given;
  }
  if (std::filesystem::path(name).is_absolute() && std::filesystem::exists(name))
    return name;  // written before models were recorded by name
  for (const std::string& dir : candidates) {
    if (dir.empty() || cli::model_name(dir) != name) continue;
    log_info(std::string("--from-png: the ") + what + " " + name + " is " + dir +
             (hash.empty() || cli::model_hash(dir) == hash ? " (fingerprint " + hash + ")" : ""));
    note_if_differs(dir);
    return dir;
  }
  throw Error("--from-png " + png + ": made with the " + what + " " + name +
              (hash.empty() ? "" : " (fingerprint " + hash + ")") + ", which is not " +
              (candidates.empty() || candidates.front().empty() ? "here" : candidates.front()) +
              "; give " + flag + " DIR");
}

// generate --from-png IMG: the image's stored settings become flags placed right after
// "generate", except those the user gives too (theirs win); the model and draft it names are
// resolved to directories here.
std::vector<std::string> expand_from_png(const CLI::App& app, std::vector<std::string> args) {
  if (args.empty() || args[0] != "generate") return args;
  std::string png;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--from-png" && i + 1 < args.size()) png = args[i + 1];
    if (args[i].rfind("--from-png=", 0) == 0) png = args[i].substr(11);
  }
  if (png.empty()) return args;
  const CLI::App* gen = app.get_subcommand("generate");
  auto option_of = [&](const std::string& word) -> const CLI::Option* {
    if (word.size() < 2 || word[0] != '-') return nullptr;
    return gen->get_option_no_throw(word.substr(0, word.find('=')));
  };
  auto value_given = [&](const char* lname) {
    for (size_t i = 1; i < args.size(); ++i)
      if (const CLI::Option* o = option_of(args[i]); o && o->check_lname(lname)) {
        const size_t eq = args[i].find('=');
        if (eq != std::string::npos) return args[i].substr(eq + 1);
        return i + 1 < args.size() ? args[i + 1] : std::string();
      }
    return std::string();
  };
  std::vector<const CLI::Option*> given;
  for (size_t i = 1; i < args.size(); ++i)
    if (const CLI::Option* o = option_of(args[i])) given.push_back(o);
  const bool prompt_given =
      args.size() > 1 && std::any_of(args.begin() + 1, args.end(), [&](const std::string& a) {
        const CLI::Option* o = option_of(a);
        return o &&
               (o->check_lname("class") || o->check_lname("uncond") || o->check_lname("caption"));
      });
  const cli::StoredRun run = cli::read_stored_run(png);
  std::vector<std::string> stored = cli::settings_to_args(run, png), keep;
  // The model: -m, else the default model when it is the one named.
  const std::string model = resolve_stored_model(
      png, run.value("model"), run.value("model_hash"), value_given("model"),
      {value_given("model").empty() ? cli::default_model_dir() : ""}, "model", "-m");
  if (value_given("model").empty()) stored.insert(stored.begin(), {"-m", model});
  // The draft: --draft, else the one the model names (chosen without a flag), else its sibling.
  const std::string draft = run.value("draft");
  if (!draft.empty() && draft != cli::kNoDraft && value_given("draft").empty()) {
    const ModelConfig mc = load_model_config(model);
    const std::string named = mc.companion_path(mc.companions.draft);
    const std::string sibling =
        (std::filesystem::path(model).parent_path() / std::filesystem::path(draft).filename())
            .string();
    const std::string dir = resolve_stored_model(png, draft, run.value("draft_hash"), "",
                                                 {named, sibling}, "draft", "--draft");
    if (dir != named) stored.insert(stored.end(), {"--draft", dir});
  }
  // A fixed --draft-len given over a stored auto one: the costs and hold auto chose by go too.
  const std::string len = value_given("draft-len");
  const bool fixed_len = !len.empty() && len != "auto";
  for (size_t i = 0; i < stored.size(); ++i) {
    const CLI::Option* o = gen->get_option_no_throw(stored[i]);
    const bool takes_value = i + 1 < stored.size() && stored[i + 1].rfind("--", 0) != 0;
    const bool overridden =
        !o || std::find(given.begin(), given.end(), o) != given.end() ||
        (prompt_given && (o->check_lname("class") || o->check_lname("uncond") ||
                          o->check_lname("caption") || o->check_lname("prompt"))) ||
        (fixed_len && (o->check_lname("draft-costs") || o->check_lname("draft-hold")));
    if (!o && stored[i] != "--uncond")
      throw Error("--from-png " + png + ": unknown setting " + stored[i] +
                  " (made by another tessera version?)");
    if (!overridden) {
      keep.push_back(stored[i]);
      if (takes_value) keep.push_back(stored[i + 1]);
    }
    if (takes_value) ++i;
  }
  args.insert(args.begin() + 1, keep.begin(), keep.end());
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera: autoregressive image generation (LlamaGen, MAR) with speculative decoding",
               "tessera"};
  app.require_subcommand(1);
  app.set_version_flag(
      "--version", std::string("tessera ") + cli::kVersion + " (commit " + TESSERA_COMMIT + ")");
  std::vector<cli::Command> commands;
  try {
    const cli::ModelDefaults md = cli::model_defaults(argc, argv);
    commands = {cli::add_generate(app, md), cli::add_forward(app),   cli::add_decode(app),
                cli::add_classes(app),      cli::add_bench(app, md), cli::add_tune(app, md),
                cli::add_serve(app, md),    cli::add_encode(app),    cli::add_devices(app)};
  } catch (const std::exception& e) {  // a CLI11 release stricter than the ones tested, say
    std::fprintf(stderr, "error: setting up the command line (CLI11 %s): %s\n", CLI11_VERSION,
                 e.what());
    return 1;
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  // `tessera` alone and `tessera help [COMMAND]` are asking for the help.
  if (args.empty() || args.front() == "help") {
    if (args.size() > 1) {
      const auto subs = app.get_subcommands({});
      if (std::none_of(subs.begin(), subs.end(),
                       [&](const CLI::App* c) { return c->get_name() == args[1]; })) {
        std::string msg = suggestion(app, {args[1]});
        std::fprintf(stderr, "error: %s\n", msg.c_str());
        return 2;
      }
      args = {args[1], "--help"};
    } else {
      args = {"--help"};
    }
  }
  try {
    args = expand_from_png(app, args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them reversed
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string msg = suggestion(app, args);
    if (msg.empty()) msg = std::string(e.what()) + " (see tessera --help)";
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    std::fprintf(stderr, "error: %s\n", msg.c_str());
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
