// tessera decode: token grids (LlamaGen) or latents (MAR) from .npy to PNG images.
#include <memory>

#include "commands.h"
#include "common.h"
#include "default_model.h"
#include "image_output.h"
#include "mar_commands.h"
#include "tessera/image_io.h"
#include "tessera/log.h"

namespace tessera::cli {

namespace {

struct DecodeArgs {
  CommonOpts common;
  std::string tokens, latents, out;
  bool grid = false;
};

int run_decode(DecodeArgs& a) {
  if (a.common.model.empty()) a.common.model = default_model_dir();  // as generate and classes
  apply_common(a.common);
  LoadOptions lo;
  lo.threads = a.common.threads;
  lo.check_weights = a.common.check_weights;
  lo.device = a.common.device;
  check_output_path(a.out, "-o");
  if (is_mar(a.common.model)) {
    if (a.latents.empty()) throw Error("decode on a MAR model needs --latents L.npy");
    MarRunOptions mo;
    mo.model = a.common.model;
    mo.threads = a.common.threads;
    mo.check_weights = a.common.check_weights;
    mo.device = a.common.device;
    mar_decode(mo, a.latents, a.out, a.grid);
    return 0;
  }
  if (a.tokens.empty()) throw Error("--tokens is required");
  auto pipe = Pipeline::load(a.common.model, lo);
  const GptConfig& cfg = pipe->config().gpt;
  if (!pipe->has_decoder()) throw Error(a.common.model + " has no VQ decoder");
  const NpyData<int32_t> arr = read_npy_ints(a.tokens);
  const std::vector<int32_t>& ids = arr.values;
  const std::vector<int64_t>& shape = arr.shape;
  const int64_t per = static_cast<int64_t>(cfg.grid) * cfg.grid;
  const bool shape_ok = (shape.size() == 2 && shape[0] == cfg.grid && shape[1] == cfg.grid) ||
                        (shape.size() == 1 && shape[0] == per) ||
                        (shape.size() == 3 && shape[1] == cfg.grid && shape[2] == cfg.grid) ||
                        (shape.size() == 2 && shape[1] == per);
  if (!shape_ok || ids.empty())
    throw Error(a.tokens + ": token array has shape " + shape_string(shape) + "; expected [" +
                std::to_string(cfg.grid) + ", " + std::to_string(cfg.grid) + "], [n, " +
                std::to_string(cfg.grid) + ", " + std::to_string(cfg.grid) + "] or [n, " +
                std::to_string(per) + "]");
  for (int32_t t : ids)
    if (t < 0 || t >= cfg.vocab_size)
      throw Error(a.tokens + ": token " + std::to_string(t) + " out of range [0, " +
                  std::to_string(cfg.vocab_size) + ")");
  const int n = static_cast<int>(static_cast<int64_t>(ids.size()) / per);
  check_output_path(a.out, "-o", a.grid ? 1 : n);  // every numbered name, before decoding
  const std::vector<std::string> params(n, "decoded from " + a.tokens + "; tessera 0.1.0");
  write_pngs(decode_tokens(*pipe, ids), n, pipe->image_size(), a.out, a.grid, params);
  return 0;
}

}  // namespace

Command add_decode(CLI::App& app) {
  auto a = std::make_shared<DecodeArgs>();
  auto* d = app.add_subcommand("decode", "Decode token grids (.npy) to PNG images");
  add_common(d, a->common, /*model_required=*/false);
  d->add_option("--tokens", a->tokens,
                ".npy of token ids: [grid,grid], [n,grid,grid] or [n,grid*grid]");
  d->add_option("--latents", a->latents, "MAR: .npy of latents [n, seq_len, token_dim]");
  d->add_option("-o,--output", a->out, "Output PNG (numbered when several)")->required();
  d->add_flag("--grid", a->grid, "Write all images as one grid PNG");
  return {d, [a] { return run_decode(*a); }};
}

}  // namespace tessera::cli
