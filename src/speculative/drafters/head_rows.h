// The guided distributions of draft logit rows (Medusa's and Hawk's heads, EAGLE-2's expansions),
// computed where the logits are (distribution_rows) and read back as the drafter needs them: each
// row's most likely ids with their mass (Medusa's candidates, EAGLE-2's, top_rows) or the rows
// themselves (Hawk's q). One upload of the rows'
// settings before, one download after, no wait in between; a row with a non-finite logit is an
// Error, on the CPU (with its token index) or from the device's flag.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sampling/sample_rows.h"
#include "speculative/draft.h"
#include "tensor/backend.h"

namespace tessera::speculative {

class HeadRows {
 public:
  // A ParameterError ("method", naming the method) when the backend cannot compute rows of this
  // vocabulary (a GPU's limit; any on the CPU).
  HeadRows(Backend& backend, int vocab, const std::string& method);
  // Heads' logits [count * R, V]: head k's conditional rows at k R + [0, rows) and, with CFG
  // (R = 2 rows), its unconditional ones right after. params[k * rows + r]: the settings of head
  // k's row r (its image's sampling and token index). Queues the distributions. A non-finite
  // logit sets a flag that the reads below check: one of this compute's (zeroed), or flag_into
  // (I32 [1]), which is not zeroed, so that several computes gather into it (Hawk's device loop).
  void compute(const Tensor& logits, int rows, int count, bool cfg,
               std::span<const DeviceSampleParams> params, const Tensor* flag_into = nullptr);
  // The last compute's distributions where they are: F32 [n, V], valid until the next compute.
  Tensor distributions() const { return probs_.bytes_as(0, DType::F32, {n_, V_}); }
  // The last compute's rows' K most likely ids (top_rows): row i's at [i K, i K + K), -1 past
  // the ids with mass (Medusa's candidates on the host loop); one download.
  const std::vector<int32_t>& top(int K);
  // The same ids left where they are, for a tree whose tokens stay there to the verdicts
  // (Medusa's on the device loop): tokens (the ids, -1 past those with mass, then the error
  // flag) and inputs (the ids, 0 for -1), as DeviceDraftRows holds them (no q: one-hot drafts).
  // Nothing comes back.
  const DeviceDraftRows& top_on_device(int K);
  // The ids with their mass left where they are (EAGLE-2's candidates on the device loop,
  // dynamic_frontier.h): ids I32 [n K], mass F32 [n K], and the rows' error flag I32 [1] (nonzero:
  // a non-finite logit), valid until the next compute. Nothing comes back.
  struct Ranked {
    Tensor ids, mass, flag;
  };
  Ranked top_with_mass_on_device(int K);
  // The last compute's distributions: row i's at [i V, i V + V).
  const std::vector<float>& read();

 private:
  Backend& be_;
  int n_ = 0, V_ = 0;
  size_t flag_at_ = 0;
  // Settings and flag; distributions and a flag word; ids, their mass and the flag.
  Tensor up_, probs_, down_, inputs_;
  Tensor flag_;  // the flag the last compute set
  DeviceDraftRows on_device_;
  std::vector<uint8_t> up_host_;
  std::vector<int32_t> ids_, down_host_;
  std::vector<float> rows_;
};

}  // namespace tessera::speculative
