// tessera encode: a prompt's T5 features (the encoder's last hidden states) and token ids, to
// compare with other implementations or to condition t2i runs on (generate --caption).
#include <memory>

#include "commands.h"
#include "common.h"
#include "tessera/image_io.h"
#include "tessera/log.h"
#include "tessera/text_encoder.h"

namespace tessera::cli {

namespace {

struct EncodeArgs {
  CommonOpts common;
  std::string prompt, out, ids_out, preprocessing = "clean";
  int max_length = 120;
  bool pad = false;
};

TextPreprocessing parse_preprocessing(const std::string& s) {
  if (s == "clean") return TextPreprocessing::Clean;
  if (s == "lower") return TextPreprocessing::Lower;
  if (s == "none") return TextPreprocessing::None;
  throw Error("--text-preprocessing " + s + ": use clean, lower or none");
}

int run_encode(EncodeArgs& a) {
  apply_common(a.common);
  if (a.out.empty() && a.ids_out.empty())
    throw Error("give --out FEATURES.npy or --ids-out IDS.npy");
  check_output_path(a.out, "--out");
  check_output_path(a.ids_out, "--ids-out");
  const TextPreprocessing how = parse_preprocessing(a.preprocessing);
  LoadOptions lo;
  lo.threads = a.common.threads;
  lo.check_weights = a.common.check_weights;
  lo.device = a.common.device;
  auto enc = TextEncoder::load(a.common.model, lo);
  const TextEncoding e = enc->encode(a.prompt, a.max_length, how, a.pad ? a.max_length : 0);
  const auto rows = static_cast<int64_t>(e.ids.size());
  log_info("prompt -> " + std::to_string(e.valid()) + " tokens (EOS included)" +
           (e.truncated ? ", cut to --max-length " + std::to_string(a.max_length) : "") +
           (a.pad ? ", padded to " + std::to_string(rows) : ""));
  if (!a.out.empty()) {
    write_npy(a.out, {rows, e.width}, e.features);
    log_info("wrote " + a.out + " [" + std::to_string(rows) + ", " + std::to_string(e.width) + "]");
  }
  if (!a.ids_out.empty()) {
    write_npy(a.ids_out, {rows}, e.ids);
    log_info("wrote " + a.ids_out);
  }
  return 0;
}

}  // namespace

Command add_encode(CLI::App& app) {
  auto a = std::make_shared<EncodeArgs>();
  auto* f = app.add_subcommand(
      "encode",
      "A prompt's T5 text-encoder features (last hidden states) and token ids, as .npy files");
  add_common(f, a->common, /*model_required=*/true);
  f->add_option("-p,--prompt", a->prompt, "The text to encode")->required();
  f->add_option("--out", a->out,
                "Features .npy [tokens, d_model] (real tokens only, EOS included: a --caption "
                "file for generate; with --pad every row)");
  f->add_option("--ids-out", a->ids_out, "Token ids .npy (int32)");
  f->add_option("--max-length", a->max_length,
                "Most tokens, EOS included (longer prompts are cut; LlamaGen: 120)")
      ->check(int_at_least(1));
  f->add_flag("--pad", a->pad,
              "Pad to --max-length and output every row, as transformers' "
              "padding=\"max_length\" with its attention mask gives them");
  f->add_option("--text-preprocessing", a->preprocessing,
                "clean: LlamaGen's T5Embedder default, its clean_caption twice (URLs, HTML, "
                "ids, stray punctuation removed; lowercased); lower: lowercase and strip, as "
                "the embedder without clean_caption; none: the text as given")
      ->check(CLI::IsMember({"clean", "lower", "none"}));
  return {f, [a] { return run_encode(*a); }};
}

}  // namespace tessera::cli
