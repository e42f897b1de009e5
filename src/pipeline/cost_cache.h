// The round costs of --draft-len auto (speculative/draft_length.h) for one target, its draft
// model and CFG setting on this machine: measured at the first use (pipeline/forward_cost.h, about
// a second) and cached in the user's cache directory, keyed by the models (their config.json
// and weights file's size and modification time) and the CPU (model name, thread count).
#pragma once

#include <string>

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

// $XDG_CACHE_HOME/tessera, else $HOME/.cache/tessera ("" when neither is set).
std::string user_cache_dir();

}  // namespace tessera
