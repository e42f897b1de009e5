// The public TextEncoder: a T5 encoder directory's tokenizer and encoder behind one object, and
// the prompt preprocessing LlamaGen's T5Embedder applies.
#include "tessera/text_encoder.h"

#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>

#include "io/regular_file.h"
#include "models/caption_cleaning.h"
#include "models/prompt_text.h"
#include "models/t5_encoder.h"
#include "models/t5_tokenizer.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/device.h"
#include "tessera/error.h"
#include "tessera/log.h"

namespace tessera {

std::string preprocess_prompt(const std::string& prompt, TextPreprocessing how) {
  switch (how) {
    case TextPreprocessing::Clean:
      return clean_caption_twice(prompt);
    case TextPreprocessing::Lower:
      return lowercase_and_strip(prompt);
    case TextPreprocessing::None:
      break;
  }
  return prompt;
}

int TextEncoding::valid() const {
  int n = 0;
  for (const uint8_t m : mask) n += m != 0;
  return n;
}

struct TextEncoder::Impl {
  ModelConfig config;
  std::unique_ptr<T5Tokenizer> tokenizer;
  std::unique_ptr<T5Encoder> encoder;
  mutable std::mutex mutex;  // encode calls run one at a time
};

TextEncoder::TextEncoder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TextEncoder::~TextEncoder() = default;

std::unique_ptr<TextEncoder> TextEncoder::load(const std::string& dir, const LoadOptions& opts) {
  check_param(opts.threads >= 0, "threads", "must be >= 0 (0: every CPU this process may use)");
  if (opts.threads > 0) {  // as Pipeline::load: the CPU threads are the process's
    const int used = set_cpu_threads(opts.threads);
    if (used < opts.threads)
      log_info("note: " + std::to_string(opts.threads) +
               " threads requested, but this process may use " + std::to_string(used) +
               " CPUs; running on " + std::to_string(used));
  }
  Backend& backend = backend_for(opts.device);
  auto impl = std::make_unique<Impl>();
  // A Hugging Face T5 directory (config.json with "model_type") has to be converted first.
  auto hugging_face = [&] {
    const std::string path = (std::filesystem::path(dir) / "config.json").string();
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) return false;
    const auto j = nlohmann::json::parse(read_small_file(path, size_t{1} << 20), nullptr, false);
    return j.is_object() && j.contains("model_type") && !j.contains("tessera_format");
  };
  try {
    impl->config = load_model_config(dir);
  } catch (const Error&) {
    if (!hugging_face()) throw;
    impl->config.architecture = "huggingface";
  }
  if (!impl->config.is_t5() && hugging_face())
    throw Error(dir +
                " is a Hugging Face model directory: convert it first, with "
                "tools/convert_t5.py --hf " +
                dir + " --out T5_DIR");
  if (!impl->config.is_t5())
    throw Error(dir + " is not a text encoder (its config.json says architecture \"" +
                impl->config.architecture +
                "\"; tools/convert_t5.py makes a T5 encoder directory)");
  impl->config.check_weights = opts.check_weights;
  impl->tokenizer = std::make_unique<T5Tokenizer>(impl->config);
  impl->encoder = std::make_unique<T5Encoder>(impl->config, backend);
  return std::unique_ptr<TextEncoder>(new TextEncoder(std::move(impl)));
}

const ModelConfig& TextEncoder::config() const {
  return impl_->config;
}
int TextEncoder::width() const {
  return impl_->config.t5.d_model;
}
int TextEncoder::threads() const {
  return cpu_threads();
}

std::vector<int32_t> TextEncoder::tokenize(const std::string& text, int max_length,
                                           bool* truncated) const {
  return impl_->tokenizer->encode(text, max_length, truncated);
}

TextEncoding TextEncoder::encode(const std::string& prompt, int max_length, TextPreprocessing how,
                                 int pad_to) const {
  check_param(max_length >= 0, "max_length", "must be >= 0 (0: no limit)");
  check_param(pad_to >= 0, "pad_to", "must be >= 0 (0: no padding)");
  // clean_caption's regular expressions take time quadratic in the text on some inputs (20,000
  // characters of "a.a.": 17 s); T5 reads at most max_length tokens, a few hundred characters,
  // so a prompt far longer is refused rather than left to stall the engine.
  check_param(prompt.size() <= kMaxPromptBytes, "prompt",
              "has " + std::to_string(prompt.size()) + " bytes; the limit is " +
                  std::to_string(kMaxPromptBytes) + " (T5 reads at most " +
                  std::to_string(max_length) + " tokens of it)");
  const std::string text = preprocess_prompt(prompt, how);
  check_param(!text.empty(), "prompt", "is empty");
  TextEncoding out;
  out.width = width();
  out.ids = tokenize(text, max_length, &out.truncated);
  check_param(pad_to == 0 || static_cast<int>(out.ids.size()) <= pad_to, "pad_to",
              "is below the prompt's " + std::to_string(out.ids.size()) + " tokens");
  out.mask.assign(out.ids.size(), 1);
  if (pad_to > 0) {
    out.ids.resize(static_cast<size_t>(pad_to), impl_->tokenizer->pad_id());
    out.mask.resize(static_cast<size_t>(pad_to), 0);
  }
  std::lock_guard<std::mutex> lock(impl_->mutex);
  out.features = impl_->encoder->encode(out.ids, out.mask, 1);
  return out;
}

}  // namespace tessera
