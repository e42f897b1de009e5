// `tessera bench --methods` on a LlamaGen model: vanilla and each listed speculative method on the
// same classes and seeds in one run, with speed-ups over that vanilla run.
#pragma once

#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace tessera::cli {

struct MethodsBenchOptions {
  std::string model;
  int threads = 0;
  bool check_weights = true;  // --no-check-weights turns the NaN/Inf scan off
  bool quiet = false;
  int n = 1;  // images; image i has class (class_id + i) % num_classes
  int class_id = 0;
  std::vector<std::string> methods;  // vanilla is added first if missing
  GenerateOptions gen;               // sampling, batch, seed and the speculative flags
  bool json = false;
};

void bench_methods(const MethodsBenchOptions& o);

}  // namespace tessera::cli
