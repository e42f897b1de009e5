// The round costs of --draft-len auto (speculative/draft_length.h) for one target, its draft
// model and CFG setting on this machine: measured at the first use (pipeline/forward_cost.h, about
// a second) and cached in the user's cache directory, keyed by the models (their config.json
// and weights file's size and modification time), the device they run on (the backend's name) and
// the CPU (model name, kernels, thread count).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "models/autoregressive_model.h"
#include "tessera/tessera.h"

namespace tessera {

struct CostModel {
  const AutoregressiveModel* model = nullptr;
  const ModelConfig* config = nullptr;
};

// verify for k = 1..max_k; draft_step from `draft` (0 when draft.model is null).
DraftCosts calibrated_draft_costs(const CostModel& target, const CostModel& draft, bool cfg,
                                  int max_k);

// The cache key of those costs; `device`: the target's backend's name ("cpu", "cuda:0"), so that a
// calibration on one device is never used on another.
std::string draft_costs_key(const CostModel& target, const CostModel& draft, bool cfg, int max_k,
                            const std::string& device);

// The largest factor by which a shorter k's measured cost exceeds a longer k's (1 when the costs
// never fall with k). A forward of more positions does all the work of one of fewer, and timing
// noise only adds time, so a fall means the shorter k was inflated: another process was on the
// cores during the calibration.
double largest_cost_fall(const std::vector<double>& seconds);

// `measure()` up to `attempts` times, until its costs fall by at most `tolerance` (1.1: 10%) at
// any k; the attempt with the smallest fall when none does. A calibration taken while the machine
// was busy (here: k = 1 at 1.34x k = 4) would otherwise be cached for good, and it steers the
// choice of draft lengths (sjd chose 7-wide Jacobi windows, 1.43x vanilla over 256 images, where a
// calibration on an idle machine chose 3-4, 1.50x).
std::vector<double> calibrate_until_steady(const std::function<std::vector<double>()>& measure,
                                           int attempts = 3, double tolerance = 1.1);

// $XDG_CACHE_HOME/tessera, else $HOME/.cache/tessera ("" when neither is set).
std::string user_cache_dir();

}  // namespace tessera
