// The embedded default model (models/emoji, issue 4) used when generate/classes get no -m.
#pragma once

#include <string>

namespace tessera::cli {

// $TESSERA_DEFAULT_MODEL, else the first of <exe>/../models/emoji/target,
// <exe>/../share/tessera/models/emoji/target and <source tree>/models/emoji/target that holds a
// config.json. Throws an Error naming the places it looked when there is none.
std::string default_model_dir();

// The draft model shipped beside a target directory (its sibling "draft"), or "" if none.
std::string sibling_draft_dir(const std::string& target_dir);

// A file name for a prompt's image: "red apple (twitter)" -> "red_apple_twitter.png".
std::string prompt_file_name(const std::string& label);

}  // namespace tessera::cli
