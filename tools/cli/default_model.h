// The embedded default model (models/emoji, issue 4) used when generate/classes get no -m.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace tessera::cli {

// $TESSERA_DEFAULT_MODEL, else the first of <exe>/../models/emoji/target,
// <exe>/../share/tessera/models/emoji/target and <source tree>/models/emoji/target that holds a
// config.json. Throws an Error naming the places it looked when there is none.
std::string default_model_dir();

// --draft's value that asks for Jacobi drafts even where the model names a draft.
inline constexpr const char* kNoDraft = "none";

// Which drafts a run's methods use, and why: the run's first line names both.
struct DrafterChoice {
  std::string kind = "none";  // none (no method drafts) | model | jacobi
  std::string dir;            // the draft model's directory (kind "model")
  std::string why;            // "--draft", "named in DIR/config.json", ...
};

// The drafter of `methods` on the model in model_dir: --draft DIR (`draft_flag`; "none": Jacobi
// iteration), else the draft the model's config.json names ("companions"), else Jacobi iteration
// where a method can draft that way. So `-m DIR` runs what the default model runs when DIR is the
// default model. Throws, before any work, when --draft or the named draft is not a model
// directory, or when a method needs a draft model and none is given or named.
DrafterChoice choose_drafter(const std::string& model_dir, const std::vector<std::string>& methods,
                             const std::string& draft_flag);

// The drafter directory of one method in a run whose drafter choice is `run`: --draft when given,
// else for a method drafted by another companion (eagle: the model's "eagle" EAGLE drafter) that
// companion, else run.dir. Throws when the method needs a companion the model does not name.
std::string method_draft_dir(const std::string& model_dir, const std::string& method,
                             const std::string& draft_flag, const DrafterChoice& run);

// A model's name as the images it makes record it: its directory's parent and name
// ("emoji/target"), so that a file names no home directory and another user's copy resolves.
std::string model_name(const std::string& dir);
// A fingerprint of a model directory (16 hex digits): FNV-1a over its config.json and, for each
// .safetensors file, its size, its header and 64 blocks of 4 KiB spread over its data, so that a
// model of any size is fingerprinted in about a millisecond, and retrained weights change it.
std::string model_hash(const std::string& dir);

// A file name for a prompt's image: "red apple (twitter)" -> "red_apple_twitter.png".
std::string prompt_file_name(const std::string& label);

// The methods tessera serve answers (and the Python package's ServeEngine), each with its drafter's
// directory on this model: the listed ones (comma-separated; each must run here), or with "all"
// every LlamaGen method the model's companions can draft (the others are left out, named with -v).
// gen's own method is always served and keeps draft_flag (its --draft). flag: how the user gave
// the list, for errors.
std::map<std::string, std::string> serving_methods(const std::string& model_dir,
                                                   const std::string& methods,
                                                   const GenerateOptions& gen,
                                                   const std::string& draft_flag, Pipeline& pipe,
                                                   const std::string& flag = "--methods");

}  // namespace tessera::cli
