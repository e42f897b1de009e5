// `tessera bench --concurrent N`: N copies of one `tessera generate` run started at once, each
// one's time against the same run alone (two runs sharing a machine must not starve each other:
// the CPU workers sleep rather than spin on cores another process is using).
#pragma once

#include <string>
#include <vector>

namespace tessera::cli {

struct ConcurrentBenchOptions {
  int copies = 2;
  std::vector<std::string> methods;  // "vanilla" first; each timed alone and as N copies
  std::string model, draft;          // draft: for the draft-based methods ("" = none)
  int threads = 0, n = 1, class_id = 0, repeat = 1;
  long long seed = 0;
  std::string device = "cpu";  // passed on to each copy
  std::string format = "md";   // md | json
};

void bench_concurrent(const ConcurrentBenchOptions& o);

}  // namespace tessera::cli
