#include "models/medusa_heads.h"

#include <algorithm>
#include <filesystem>

#include "models/weights.h"
#include "tessera/error.h"

namespace tessera {

MedusaHeads::MedusaHeads(const ModelConfig& mc, const AutoregressiveModel& target)
    : cfg_(mc.medusa), backend_(target.backend()), shared_head_(target.output_head()) {
  const MedusaConfig& c = cfg_;
  const ArModelInfo& t = target.info();
  const std::string kind = c.is_hawk() ? "Hawk" : "Medusa";
  auto fits = [&](bool ok, const std::string& what) {
    if (!ok)
      throw ParameterError("draft", "{draft} " + mc.dir + ": the " + kind + " heads' " + what +
                                        " (they were trained for another target)");
  };
  fits(c.dim == t.dim,
       "width " + std::to_string(c.dim) + " is not the target's " + std::to_string(t.dim));
  fits(c.vocab_size == t.vocab_size, "vocabulary " + std::to_string(c.vocab_size) +
                                         " is not the target's " + std::to_string(t.vocab_size));
  const std::string path = (std::filesystem::path(mc.dir) / c.file).string();
  WeightLoader w(path, parse_dtype(c.dtype), backend_, mc.check_weights);
  const int64_t D = c.dim, V = c.vocab_size;
  for (int k = 0; k < c.num_heads; ++k) {
    // Medusa's names: medusa_head[k] = Sequential(ResBlock, [Linear(D, V, bias=False)]).
    const std::string p = "medusa_head." + std::to_string(k) + ".";
    w_.push_back(w.linear(p + "0.linear.weight", {D, D}));
    b_.push_back(w.f32(p + "0.linear.bias", {D}));
    if (c.per_head_lm_head) lm_head_.push_back(w.linear(p + "1.weight", {V, D}));
  }
  if (c.is_hawk()) {
    // Vertical heads predict a row below: trained for one row width, they must meet it.
    fits(c.row_width == t.row_width, "row width " + std::to_string(c.row_width) +
                                         " is not the target's " + std::to_string(t.row_width) +
                                         " tokens per row");
    for (int d = 0; d < c.vertical_heads; ++d) {
      const std::string p = "vertical_head." + std::to_string(d) + ".";
      w_.push_back(w.linear(p + "0.linear.weight", {D, D}));
      b_.push_back(w.f32(p + "0.linear.bias", {D}));
    }
  }
  w.finish();
}

MedusaHeads::Workspace MedusaHeads::make_workspace(int max_rows, int max_head_rows) const {
  Workspace ws;
  ws.rows = std::max(max_rows, 1);
  ws.head_rows = max_head_rows > 0 ? max_head_rows : total_heads() * ws.rows;
  ws.features = backend_.empty(DType::F32, {ws.rows, cfg_.dim});
  ws.hidden = backend_.empty(DType::F32, {ws.head_rows, cfg_.dim});
  ws.logits = backend_.empty(DType::F32, {ws.head_rows, cfg_.vocab_size});
  return ws;
}

Tensor MedusaHeads::forward(Workspace& ws, int rows, int first, int count) const {
  check(rows >= 1 && rows <= ws.rows && first >= 0 && count >= 1 &&
            first + count <= total_heads() && static_cast<int64_t>(count) * rows <= ws.head_rows,
        "internal: a draft-head forward exceeds its workspace or heads");
  Backend& be = backend_;
  const Tensor h = ws.features.rows(0, rows);
  for (int k = 0; k < count; ++k) {
    Tensor y = ws.hidden.rows(static_cast<int64_t>(k) * rows, rows);
    be.linear(h, w_[first + k], &b_[first + k], y);  // W_k h + b_k
    be.silu(y);
    be.add(y, h, y);  // h + SiLU(...)
  }
  Tensor logits = ws.logits.rows(0, static_cast<int64_t>(count) * rows);
  if (lm_head_.empty()) {
    Tensor y = ws.hidden.rows(0, static_cast<int64_t>(count) * rows);
    be.linear(y, shared_head_, nullptr, logits);  // one call for every head
  } else {
    for (int k = 0; k < count; ++k) {
      const int64_t at = static_cast<int64_t>(k) * rows;
      Tensor out = logits.rows(at, rows);
      be.linear(ws.hidden.rows(at, rows), lm_head_[first + k], nullptr, out);
    }
  }
  return logits;
}

int64_t MedusaHeads::streamed_weight_bytes() const {
  int64_t bytes = static_cast<int64_t>(shared_head_.nbytes());
  for (const auto* v : {&w_, &lm_head_})
    for (const Tensor& t : *v) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

}  // namespace tessera
