// Logits of a given token sequence in one pass (no sampling): the model's next-token
// distribution after the prefix and each prefix of `tokens` (tessera forward, parity tests).
#pragma once

#include <span>
#include <vector>

#include "models/autoregressive_model.h"

namespace tessera {

// Logits without guidance for one sequence: [tokens.size() + 1, V].
std::vector<float> teacher_forced_logits(const AutoregressiveModel& model, const Condition& cond,
                                         std::span<const int32_t> tokens);

}  // namespace tessera
