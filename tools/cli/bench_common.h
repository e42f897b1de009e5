// What the bench subcommands share: a clock, medians, and the reference benchmarks they run in
// the same session (python/bench_torch.py, python/bench_t5_torch.py).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tessera::cli {

// Seconds on the steady clock.
double now_s();
// The median (the mean of the middle two for an even count).
double median(std::vector<double> v);
// Runs a reference benchmark's command line and returns the JSON line it ends with
// ({"impl": ...}); throws Error("the <what> failed (<shown>)") when it exits non-zero or prints
// none.
nlohmann::json run_reference_bench(const std::string& cmd, const std::string& what,
                                   const std::string& shown);

}  // namespace tessera::cli
