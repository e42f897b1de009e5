// The public Pipeline: one object for every model family tessera runs. It loads a model
// directory, dispatches to the family its config.json names (LlamaGen: discrete tokens; MAR:
// continuous tokens) and owns what the families share (the config, the backend, threads).
#include <memory>
#include <mutex>

#include "common/clock.h"
#include "models/weights.h"
#include "pipeline/device_memory.h"
#include "pipeline/llamagen_family.h"
#include "pipeline/mar_family.h"
#include "speculative/model_defaults.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/device.h"
#include "tessera/error.h"
#include "tessera/generation.h"
#include "tessera/log.h"
#include "tessera/mar.h"
#include "tessera/tessera.h"
#include "tessera/text_encoder.h"

namespace tessera {

struct Pipeline::Impl {
  ModelConfig config;
  LoadReport report;
  Backend* backend = nullptr;
  std::unique_ptr<LlamaGenFamily> llamagen;
  std::unique_ptr<MarFamily> mar;
  LoadOptions options;
  std::mutex text_mutex;  // guards text_encoder's first load
  std::unique_ptr<TextEncoder> text_encoder;
  std::pair<std::string, Condition> last_prompt;  // the last prompt encoded (-n, a request's n)

  // The text encoder of typed prompts, loaded by the first prompt (a t2i model only).
  TextEncoder& text(const char* what);
  // The Caption of a typed prompt (Pipeline::text_condition).
  Condition encode_prompt(const std::string& prompt);
  // conds with each Prompt replaced by its Caption.
  std::vector<Condition> with_captions(const std::vector<Condition>& conds);

  // The family a call needs, or an error naming what the model is instead.
  LlamaGenFamily& discrete(const char* call) {
    if (!llamagen)
      throw Error(config.dir + " is a MAR model (continuous tokens): " + call +
                  " is for LlamaGen models; use generate_latents / decode_latents");
    return *llamagen;
  }
  MarFamily& continuous(const char* call) {
    if (!mar)
      throw Error(config.dir + " is a LlamaGen model (discrete tokens): " + call +
                  " is for MAR models; use generate / decode");
    return *mar;
  }
};

namespace {
// Sets the CPU threads, saying so when the request is more than the machine lets us use.
void use_threads(int n) {
  const int used = set_cpu_threads(n);
  if (used < n)
    log_info("note: " + std::to_string(n) + " threads requested, but this process may use " +
             std::to_string(used) + " CPUs; running on " + std::to_string(used));
}
}  // namespace

TextEncoder& Pipeline::Impl::text(const char* what) {
  discrete(what);
  const GptConfig& gpt = config.gpt;
  if (gpt.is_c2i())
    throw Error(config.dir +
                " is class-conditional (c2i): a typed prompt needs a text-conditional (t2i) model "
                "and its text encoder; a c2i model takes a class");
  std::lock_guard<std::mutex> lock(text_mutex);
  if (text_encoder) return *text_encoder;
  const std::string dir = !options.text_encoder.empty()
                              ? options.text_encoder
                              : config.companion_path(config.companions.text_encoder);
  if (dir.empty())
    throw Error(config.dir +
                " names no text encoder (config.json companions \"text_encoder\"): give one "
                "(--text-encoder T5_DIR, made by tools/convert_t5.py) or caption features "
                "(--caption FILE)");
  LoadOptions lo;
  lo.device = options.device;
  lo.check_weights = options.check_weights;
  auto enc = TextEncoder::load(dir, lo);
  if (enc->width() != gpt.caption_dim)
    throw Error(dir + ": the text encoder's features have width " + std::to_string(enc->width()) +
                " but " + config.dir + " takes captions of width " +
                std::to_string(gpt.caption_dim) + " (caption_dim): it belongs to another model");
  text_encoder = std::move(enc);
  return *text_encoder;
}

Condition Pipeline::Impl::encode_prompt(const std::string& prompt) {
  TextEncoder& enc = text("text_condition");
  {
    std::lock_guard<std::mutex> lock(text_mutex);
    if (last_prompt.second.kind == Condition::Kind::Caption && last_prompt.first == prompt)
      return last_prompt.second;
  }
  const int T = config.gpt.cls_token_num;
  // LlamaGen's T5Embedder: at most the caption length of tokens (EOS included), no padding here:
  // the real rows are what the model sees (Condition::from_caption left-pads them).
  const TextEncoding e = enc.encode(prompt, T, options.text_preprocessing);
  if (e.truncated)
    log_info("note: the prompt is longer than the model's " + std::to_string(T) +
             " caption tokens; it was cut to its first " + std::to_string(T - 1) +
             " tokens and EOS, as LlamaGen cuts it");
  const int rows = static_cast<int>(e.ids.size());
  Condition c = Condition::from_caption(e.features, rows, e.width, config.gpt);
  c.prompt = prompt;
  std::lock_guard<std::mutex> lock(text_mutex);
  last_prompt = {prompt, c};
  return c;
}

std::vector<Condition> Pipeline::Impl::with_captions(const std::vector<Condition>& conds) {
  std::vector<Condition> out;
  out.reserve(conds.size());
  for (const Condition& c : conds)
    out.push_back(c.kind == Condition::Kind::Prompt ? encode_prompt(c.prompt) : c);
  return out;
}

Pipeline::Pipeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Pipeline::~Pipeline() = default;

std::unique_ptr<Pipeline> Pipeline::load(const std::string& model_dir, const LoadOptions& opts) {
  check_param(opts.threads >= 0, "threads", "must be >= 0 (0: every CPU this process may use)");
  if (opts.threads > 0) use_threads(opts.threads);
  // The device first: a CUDA device this build or machine lacks fails before any file is read.
  Backend& backend = backend_for(opts.device);
  const double t0 = now_s();
  const WeightCheckTotals checked0 = weight_check_totals();
  auto impl = std::make_unique<Impl>();
  impl->config = load_model_config(model_dir);
  impl->config.check_weights = opts.check_weights;
  // A device's memory is checked before any weight is uploaded; the CPU keeps its own checks.
  if (&backend != &backend_for(Device::cpu()))
    check_device_memory(impl->config, opts.load_decoder, backend, opts.device);
  impl->backend = &backend;
  impl->options = opts;
  if (impl->config.is_mar())
    impl->mar = std::make_unique<MarFamily>(impl->config, backend, opts.load_decoder);
  else
    impl->llamagen = std::make_unique<LlamaGenFamily>(impl->config, backend, opts.load_decoder);
  const WeightCheckTotals checked = weight_check_totals();
  impl->report.seconds = now_s() - t0;
  impl->report.checked_bytes = checked.bytes - checked0.bytes;
  impl->report.check_seconds = checked.seconds - checked0.seconds;
  return std::unique_ptr<Pipeline>(new Pipeline(std::move(impl)));
}

int64_t Pipeline::available_memory() const {
  return impl_->backend->available_memory();
}
std::string Pipeline::device() const {
  return impl_->backend->name();
}
const LoadReport& Pipeline::load_report() const {
  return impl_->report;
}
const ModelConfig& Pipeline::config() const {
  return impl_->config;
}
const std::string& Pipeline::architecture() const {
  return impl_->config.architecture;
}
bool Pipeline::continuous_tokens() const {
  return impl_->mar != nullptr;
}
bool Pipeline::has_decoder() const {
  return impl_->mar ? impl_->mar->has_decoder() : impl_->llamagen->has_decoder();
}
void Pipeline::set_threads(int n) {
  check_param(n >= 0, "threads", "must be >= 0 (0: every CPU this process may use)");
  use_threads(n > 0 ? n : available_cpus());
}
int Pipeline::threads() const {
  return cpu_threads();
}
int Pipeline::image_size() const {
  return impl_->mar ? impl_->mar->image_size() : impl_->llamagen->image_size();
}

std::vector<double> Pipeline::forward_seconds(int max_k, bool cfg, int repeats) {
  return impl_->discrete("forward_seconds").forward_seconds(max_k, cfg, repeats);
}
std::vector<double> Pipeline::verify_seconds(int max_k, bool cfg, int repeats) {
  return impl_->discrete("verify_seconds").verify_seconds(max_k, cfg, repeats);
}
ForwardFlops Pipeline::forward_flops(int k, bool cfg) const {
  return impl_->discrete("forward_flops").forward_flops(k, cfg);
}
SpeculativeOptions Pipeline::with_model_defaults(const SpeculativeOptions& o) const {
  return speculative::with_model_defaults(o, impl_->config.quality);
}
int64_t Pipeline::weight_bytes_per_step() const {
  return impl_->discrete("weight_bytes_per_step").weight_bytes_per_step();
}
std::vector<std::vector<int32_t>> Pipeline::generate(const std::vector<Condition>& conditions,
                                                     const GenerateOptions& opts,
                                                     GenerateStats* stats) {
  LlamaGenFamily& family = impl_->discrete("generate");
  for (const Condition& c : conditions)
    if (c.kind == Condition::Kind::Prompt)
      return family.generate(impl_->with_captions(conditions), opts, stats);
  return family.generate(conditions, opts, stats);
}
std::unique_ptr<Generation> Pipeline::start_generation(const GenerateOptions& opts) {
  return tessera::start_generation(impl_->discrete("start_generation"), opts,
                                   impl_->config.gpt.n_image_tokens(), impl_->config.sampling,
                                   [this](const std::string& p) { return text_condition(p); });
}
Condition Pipeline::text_condition(const std::string& prompt) {
  return impl_->encode_prompt(prompt);
}
SamplingOptions Pipeline::default_sampling() const {
  return resolve_sampling({}, config().sampling);
}
void Pipeline::validate(const GenerateOptions& opts) {
  impl_->discrete("validate").validate(opts);
}
std::vector<float> Pipeline::forward_logits(const Condition& condition,
                                            std::span<const int32_t> tokens) {
  LlamaGenFamily& family = impl_->discrete("forward_logits");
  if (condition.kind == Condition::Kind::Prompt)
    return family.forward_logits(impl_->encode_prompt(condition.prompt), tokens);
  return family.forward_logits(condition, tokens);
}
std::vector<float> Pipeline::decode_float(std::span<const int32_t> tokens, int n) {
  return impl_->discrete("decode").decode_float(tokens, n);
}
std::vector<uint8_t> Pipeline::decode(std::span<const int32_t> tokens, int n) {
  return impl_->discrete("decode").decode(tokens, n);
}

void Pipeline::validate_latents(const MarGenerateOptions& opts) {
  impl_->continuous("validate_latents").generate({}, opts, nullptr);  // no image: the checks only
}
std::vector<std::vector<float>> Pipeline::generate_latents(const std::vector<int>& labels,
                                                           const MarGenerateOptions& opts,
                                                           MarStats* stats) {
  return impl_->continuous("generate_latents").generate(labels, opts, stats);
}
std::vector<float> Pipeline::forward_z(int label, std::span<const float> tokens,
                                       std::span<const uint8_t> unknown) {
  return impl_->continuous("forward_z").forward_z(label, tokens, unknown);
}
std::vector<float> Pipeline::decode_latents_float(std::span<const float> latents, int n) {
  return impl_->continuous("decode_latents").decode_float(latents, n);
}
std::vector<uint8_t> Pipeline::decode_latents(std::span<const float> latents, int n) {
  return impl_->continuous("decode_latents").decode(latents, n);
}

std::string model_architecture(const std::string& model_dir) {
  return load_model_config(model_dir).architecture;
}

}  // namespace tessera
