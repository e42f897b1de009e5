#include "decode/teacher_forcing.h"

#include "decode/session.h"
#include "tessera/error.h"

namespace tessera {

std::vector<float> teacher_forced_logits(const AutoregressiveModel& model, const Condition& cond,
                                         std::span<const int32_t> tokens) {
  const ArModelInfo& info = model.info();
  const int V = info.vocab_size, L = static_cast<int>(tokens.size());
  check(L <= info.n_tokens - 1, "forward: at most " + std::to_string(info.n_tokens - 1) +
                                    " tokens, got " + std::to_string(L));
  for (int32_t t : tokens)
    check(t >= 0 && t < V,
          "token " + std::to_string(t) + " out of range [0, " + std::to_string(V) + ")");
  SessionOptions so;
  so.max_new = std::max(L, 1);
  so.max_outputs_per_seq = std::max(L, 1);
  Session session(model, so);
  const int32_t slot = session.acquire_slot();
  const Condition* c = &cond;
  std::vector<float> first, rest;
  session.read(session.prefill(std::span(&c, 1), false, std::span(&slot, 1)).logits, first);
  if (L == 0) return first;
  StepBatch b;
  b.n_new = L;
  b.slots = {slot};
  b.tokens.assign(tokens.begin(), tokens.end());
  for (int j = 0; j < L; ++j) {
    b.positions.push_back(model.token_position(j));
    b.output_at.push_back(j);
  }
  session.read(session.forward(b).logits, rest);
  first.insert(first.end(), rest.begin(), rest.end());
  return first;
}

}  // namespace tessera
