// The speculative-decoding flags of generate and bench, built from the method registry
// (tessera/methods.h): --method, --draft, --draft-len, --resample and one flag per method
// parameter, named after it ("lantern.k" -> --lantern-k), so a new method needs no CLI change.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "tessera/tessera.h"

namespace tessera::cli {

// The flag of a parameter that a ParameterError names: "--" and the name with '.' and '_' as '-'
// ("lantern.k" -> --lantern-k, "draft_len" -> --draft-len, "top_p" -> --top-p).
std::string flag_of(const std::string& param);

// Parsed flags fill o.method, o.draft_model, o.draft_len, o.resample, and o.params with the
// method parameters given on the command line (typed as the registry declares them).
void add_method_flags(CLI::App* cmd, SpeculativeOptions& o);

// Whether `method` drafts with a draft model when one is available (a default model's sibling).
bool uses_draft_model(const std::string& method);

}  // namespace tessera::cli
