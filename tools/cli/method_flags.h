// The speculative-decoding flags of generate and bench, built from the method registry
// (tessera/methods.h): --method, --draft, --draft-len, --resample, --tree and one flag per method
// parameter, named after it ("lantern.k" -> --lantern-k), so a new method needs no CLI change.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "tessera/tessera.h"

namespace tessera::cli {

// The flag of a parameter that a ParameterError names: "--" and the name with '.' and '_' as '-'
// ("lantern.k" -> --lantern-k, "draft_len" -> --draft-len, "top_p" -> --top-p).
std::string flag_of(const std::string& param);

// `bench --methods` found method m's settings invalid: the error names the sweep's flags
// (--draft-lens, --batches) where the sweep set the parameter, else the parameter's own flag.
[[noreturn]] void throw_sweep_error(const std::string& m, const ParameterError& e,
                                    bool swept_draft_lens, bool swept_batches,
                                    bool swept_trees = false);

// Parsed flags fill o.method, o.draft_model, o.draft_len, o.resample, o.tree, and o.params with the
// method parameters given on the command line (typed as the registry declares them). The help
// shows the defaults that apply to md's model: its draft and its validated settings.
void add_method_flags(CLI::App* cmd, SpeculativeOptions& o, const ModelDefaults& md);

// --draft-len's value: "auto" (kDraftLenAuto) or a positive integer; a one-line error naming
// `flag` otherwise.
int parse_draft_len(const std::string& v, const char* flag);
// A draft length for messages: "auto", the number, or "default" (0).
std::string draft_len_text(int draft_len);

// --draft-costs' value, "D:V1,V2,...": the seconds of one draft step (0: no draft model), then of
// the target forwards of 1, 2, ... positions. The text reads back as the same doubles, so a run's
// stored costs repeat its --draft-len auto choices exactly. A malformed value is a one-line error
// naming `flag`; the engine checks the counts and signs (ParameterError "auto_costs").
DraftCosts parse_draft_costs(const std::string& v, const char* flag);
std::string draft_costs_text(const DraftCosts& costs);

// Whether `method` drafts with a draft model when one is available (a default model's sibling).
bool uses_draft_model(const std::string& method);

// Before any work: every method exists and runs on this model family ("--method cspd is for MAR
// models only"), and every speculative flag given on `cmd` (--draft, --draft-len, --resample,
// --tree, a method parameter) is used by at least one of them. what: how the methods were given
// ("--method", "--methods").
void check_method_flags(const CLI::App& cmd, const std::vector<std::string>& methods, bool mar,
                        const std::string& what);

// The speculative flags given on `cmd` ("--draft", "--lantern-k", ...).
std::vector<std::string> given_method_flags(const CLI::App& cmd);

// A parameter value as text that the flag parses back exactly ("5", "0.30000000000000004",
// "cosine", "true").
std::string param_text(const ParamValue& v);

// The closest of `names` to `word` when it is close enough to be a typo, else "".
std::string closest(const std::string& word, const std::vector<std::string>& names);

}  // namespace tessera::cli
