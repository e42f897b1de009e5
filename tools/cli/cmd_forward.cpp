// tessera forward: teacher-forced logits of a token sequence (LlamaGen), or the MAE output z of a
// canvas (MAR), for debugging and parity checks.
#include <memory>
#include <sstream>

#include "commands.h"
#include "common.h"
#include "default_model.h"
#include "mar_commands.h"
#include "tessera/image_io.h"
#include "tessera/log.h"

namespace tessera::cli {

namespace {

struct ForwardArgs {
  CommonOpts common;
  CondOpts cond;
  std::string tokens, logits_out;
  std::string latents, unknown, z_out;  // MAR
};

// "3,17,5" -> token ids, each in [0, vocab).
std::vector<int32_t> parse_tokens(const std::string& list, int vocab) {
  std::vector<int32_t> tokens;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) continue;
    size_t used = 0;
    long v = 0;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size()) throw Error("--tokens: '" + item + "' is not an integer");
    if (v < 0 || v >= vocab)
      throw Error("--tokens: token " + item + " out of range [0, " + std::to_string(vocab) + ")");
    tokens.push_back(static_cast<int32_t>(v));
  }
  return tokens;
}

int run_forward(ForwardArgs& a) {
  if (a.common.model.empty()) a.common.model = default_model_dir();  // as generate and classes
  apply_common(a.common);
  LoadOptions lo;
  lo.threads = a.common.threads;
  lo.check_weights = a.common.check_weights;
  lo.device = a.common.device;
  lo.load_decoder = false;
  check_output_path(a.logits_out, "--logits-out");
  check_output_path(a.z_out, "--z-out");
  if (is_mar(a.common.model)) {
    if (a.z_out.empty()) throw Error("forward on a MAR model needs --z-out Z.npy");
    MarRunOptions mo = mar_run(a.common, a.cond, 1, GenerateOptions{}, MarOnly{}, nullptr);
    mar_forward(mo, a.latents, a.unknown, a.z_out);
    return 0;
  }
  if (a.logits_out.empty()) throw Error("--logits-out is required");
  auto pipe = Pipeline::load(a.common.model, lo);
  const GptConfig& cfg = pipe->config().gpt;
  const std::vector<int32_t> tokens = parse_tokens(a.tokens, cfg.vocab_size);
  const Condition cond = make_condition(a.cond, cfg);
  const auto logits = pipe->forward_logits(cond, tokens);
  write_npy(a.logits_out, {static_cast<int64_t>(tokens.size()) + 1, cfg.vocab_size}, logits);
  log_info("wrote " + a.logits_out);
  return 0;
}

}  // namespace

Command add_forward(CLI::App& app) {
  auto a = std::make_shared<ForwardArgs>();
  auto* f =
      app.add_subcommand("forward", "Teacher-forced logits for a token sequence (no guidance)");
  add_common(f, a->common, /*model_required=*/false);
  f->add_option("--class", a->cond.class_id, "Class label (c2i)")->check(int_at_least(0));
  f->add_option("--caption", a->cond.caption, "Caption features file (t2i)");
  f->add_flag("--uncond", a->cond.uncond, "Unconditional prefix");
  f->add_option("--tokens", a->tokens, "Comma-separated token ids, e.g. 3,17,5 (may be empty)");
  f->add_option("--logits-out", a->logits_out, "Output .npy, float32 [len+1, vocab] (LlamaGen)");
  f->add_option("--latents", a->latents, "MAR: canvas latents .npy [seq_len, token_dim]");
  f->add_option("--unknown", a->unknown, "MAR: mask .npy [seq_len], nonzero = masked");
  f->add_option("--z-out", a->z_out, "MAR: output .npy, float32 z [seq_len, dim]");
  return {f, [a] { return run_forward(*a); }};
}

}  // namespace tessera::cli
