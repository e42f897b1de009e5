// `tessera bench --methods` on a LlamaGen model: vanilla and each listed speculative method on the
// same classes and seeds in one run, with speed-ups over that vanilla run.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace tessera::cli {

struct MethodsBenchOptions {
  std::string model;
  int threads = 0;
  bool check_weights = true;   // --no-check-weights turns the NaN/Inf scan off
  std::string device = "cpu";  // --device
  bool quiet = false;
  int n = 1;  // images; image i has class (class_id + i / per_class) % num_classes
  int class_id = 0;
  int per_class = 2;                 // images per class (pixel diversity needs at least 2)
  std::vector<std::string> methods;  // vanilla is added first if missing
  GenerateOptions gen;               // sampling, batch, seed and the speculative flags
  std::string format = "md";         // md (table), csv or json
  int repeat = 1;                    // timed runs per row (mean ± stddev)
  // Sweeps: every combination is a row group (empty: -t, -b, --draft-len as given).
  std::vector<int> thread_counts, batches, draft_lens;
  // --trees: each method that drafts with a model runs once per entry, a --tree spec or "chain"
  // (no tree; Medusa: its heads' chain); Jacobi drafts run once, as chains. Empty: --tree as
  // given. The tree is part of a run (quality is measured for each), not of the sweep.
  std::vector<std::string> trees;
  // Classifier directory for the quality columns (tessera/quality.h); empty: speed only.
  std::string classifier;
  bool legend = false;      // print the columns' definitions after the table
  std::string drafter_why;  // where the draft model came from (the header says)
  // Drafter directories of methods drafted by another companion than the run's (eagle).
  std::map<std::string, std::string> draft_dirs;
};

// The classifier for `--quality WHAT` on MODEL: "off" -> none, "auto" -> the classifier MODEL's
// config.json names (companions; an error when it holds no classifier.json), else
// MODEL/../classifier when it holds a classifier.json (the emoji family's layout), else none;
// otherwise WHAT must be a classifier directory.
std::string resolve_classifier(const std::string& what, const std::string& model);

void bench_methods(const MethodsBenchOptions& o);

}  // namespace tessera::cli
