#include "pipeline/forward_cost.h"

#include <algorithm>
#include <limits>

#include "common/clock.h"
#include "decode/session.h"
#include "tessera/error.h"

namespace tessera {

std::vector<double> measure_forward_seconds(const AutoregressiveModel& model,
                                            const ForwardCostSettings& s) {
  const ArModelInfo& info = model.info();
  check(s.max_k >= 1 && s.max_k <= info.n_tokens, "forward cost: k must be in [1, " +
                                                      std::to_string(info.n_tokens) + "], got " +
                                                      std::to_string(s.max_k));
  check(s.repeats >= 1, "forward cost: repeats must be at least 1");
  const int context =
      std::clamp(s.context < 0 ? info.n_tokens / 2 : s.context, 1, info.n_tokens - s.max_k + 1);
  const int chunk = std::max(s.max_k, 16);  // the prefix is filled this many positions at a time
  SessionOptions so;
  so.n_slots = s.cfg ? 2 : 1;
  so.extra_capacity = s.max_k;
  so.max_new = chunk;
  so.max_outputs_per_seq = s.max_k;
  Session session(model, so);
  std::vector<int32_t> slots;
  for (int i = 0; i < so.n_slots; ++i) slots.push_back(session.acquire_slot());
  // The condition does not change the cost; the unconditional one exists for every model.
  const Condition cond = Condition::unconditional();
  const Condition* conds[] = {&cond};
  std::vector<float> host;
  // A model that reads features (an EAGLE drafter) has no prefix of its own to prefill; its rows
  // read any feature (zeros) beside their tokens.
  const size_t fd = static_cast<size_t>(info.feature_dim);
  if (fd == 0) session.read(session.prefill(conds, s.cfg, slots).logits, host);

  // A forward of n rows per slot for tokens [from, from + n), returning the last `outputs` rows.
  auto step = [&](int from, int n, int outputs) {
    StepBatch b;
    b.n_new = n;
    b.slots = slots;
    for (size_t q = 0; q < slots.size(); ++q)
      for (int r = 0; r < n; ++r) {
        b.tokens.push_back((from + r) * 7919 % info.vocab_size);  // any valid tokens
        b.positions.push_back(model.token_position(from + r));
      }
    b.features.assign(fd * b.tokens.size(), 0.0f);
    for (int r = n - outputs; r < n; ++r) b.output_at.push_back(r);
    session.read(session.forward(b).logits, host);
  };
  for (int t = 0; t < context - 1; t += chunk) step(t, std::min(chunk, context - 1 - t), 1);
  const int base = session.length(slots[0]);

  // Sweeps over k (the first one a warm-up), so that a burst of load from other processes
  // inflates one sweep's k alike instead of a run of neighbouring k.
  std::vector<double> seconds(s.max_k, std::numeric_limits<double>::infinity());
  for (int r = 0; r <= s.repeats; ++r)
    for (int k = 1; k <= s.max_k; ++k) {
      const double t0 = now_s();
      step(context - 1, k, k);
      const double dt = now_s() - t0;
      for (int slot : slots) session.remove(slot, base);
      if (r > 0) seconds[k - 1] = std::min(seconds[k - 1], dt);
    }
  return seconds;
}

}  // namespace tessera
