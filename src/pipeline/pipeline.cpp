#include <algorithm>
#include <filesystem>

#include "decode/decoder.h"
#include "decode/guidance.h"
#include "decode/teacher_forcing.h"
#include "models/llamagen.h"
#include "models/vq_decoder.h"
#include "speculative/drafters/jacobi_drafter.h"
#include "speculative/drafters/model_drafter.h"
#include "speculative/method.h"
#include "speculative/speculative_decoder.h"
#include "tensor/cpu/cpu_backend.h"
#include "tessera/tessera.h"

namespace tessera {

struct Pipeline::Impl {
  ModelConfig config;
  Backend* backend = nullptr;
  std::unique_ptr<LlamaGen> gpt;
  std::unique_ptr<VqDecoder> vq;
  // The draft model of the last speculative call (reloaded when --draft changes).
  std::string draft_dir;
  ModelConfig draft_config;
  std::unique_ptr<LlamaGen> draft;

  const LlamaGen& draft_model(const std::string& dir);
};

const LlamaGen& Pipeline::Impl::draft_model(const std::string& dir) {
  if (draft && draft_dir == dir) return *draft;
  draft.reset();
  ModelConfig dc = load_model_config(dir);
  const GptConfig &t = config.gpt, &d = dc.gpt;
  auto same = [&](const char* what, long a, long b) {
    check_param(a == b, "draft",
                "{draft} " + dir + ": " + what + " " + std::to_string(b) +
                    " does not match the target's " + std::to_string(a) +
                    " (a draft model must share the target's VQ vocabulary, grid and "
                    "conditioning)");
  };
  same("vocab_size", t.vocab_size, d.vocab_size);
  same("grid", t.grid, d.grid);
  check_param(t.model_type == d.model_type, "draft",
              "{draft} " + dir + ": the target is " + (t.is_c2i() ? "c2i" : "t2i") +
                  " but the draft model is " + (d.is_c2i() ? "c2i" : "t2i"));
  if (t.is_c2i())
    same("num_classes", t.num_classes, d.num_classes);
  else
    same("caption_dim", t.caption_dim, d.caption_dim);
  draft = std::make_unique<LlamaGen>(dc, *backend);
  draft_config = std::move(dc);
  draft_dir = dir;
  return *draft;
}

int64_t GenerateStats::rounds() const {
  int64_t r = 0;
  for (const auto& s : per_image) r += s.rounds;
  return r;
}
int64_t GenerateStats::target_forwards() const {
  int64_t r = 0;
  for (const auto& s : per_image) r += s.target_forwards;
  return r;
}
double GenerateStats::mean_accepted_length() const {
  const int64_t r = rounds();
  return r > 0 ? static_cast<double>(tokens - images) / r : 0.0;
}
std::vector<double> ImageStats::acceptance_by_depth() const {
  std::vector<double> out(proposed.size(), 0.0);
  for (size_t i = 0; i < proposed.size(); ++i)
    if (proposed[i] > 0)
      out[i] = static_cast<double>(i < accepted.size() ? accepted[i] : 0) / proposed[i];
  return out;
}
std::vector<double> GenerateStats::acceptance_by_depth() const {
  ImageStats all;  // the counts of every image, summed
  for (const auto& s : per_image) {
    all.proposed.resize(std::max(all.proposed.size(), s.proposed.size()), 0);
    all.accepted.resize(std::max(all.accepted.size(), s.accepted.size()), 0);
    for (size_t i = 0; i < s.proposed.size(); ++i) all.proposed[i] += s.proposed[i];
    for (size_t i = 0; i < s.accepted.size(); ++i) all.accepted[i] += s.accepted[i];
  }
  return all.acceptance_by_depth();
}

Pipeline::Pipeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Pipeline::~Pipeline() = default;

std::unique_ptr<Pipeline> Pipeline::load(const std::string& model_dir, const LoadOptions& opts) {
  auto impl = std::make_unique<Impl>();
  impl->config = load_model_config(model_dir);
  impl->backend = &cpu_backend();
  if (opts.threads > 0) set_cpu_threads(opts.threads);
  impl->gpt = std::make_unique<LlamaGen>(impl->config, *impl->backend);
  if (opts.load_decoder && impl->config.has_vq)
    impl->vq = std::make_unique<VqDecoder>(impl->config, *impl->backend);
  return std::unique_ptr<Pipeline>(new Pipeline(std::move(impl)));
}

const ModelConfig& Pipeline::config() const {
  return impl_->config;
}
bool Pipeline::has_decoder() const {
  return impl_->vq != nullptr;
}
void Pipeline::set_threads(int n) {
  set_cpu_threads(n);
}
int Pipeline::threads() const {
  return cpu_threads();
}
int Pipeline::image_size() const {
  return impl_->config.gpt.grid *
         (impl_->config.has_vq ? impl_->config.vq.upsample_factor() : impl_->config.gpt.downsample);
}
int64_t Pipeline::weight_bytes_per_step() const {
  return impl_->gpt->streamed_weight_bytes();
}

std::vector<std::vector<int32_t>> Pipeline::generate(const std::vector<Condition>& conditions,
                                                     const GenerateOptions& opts,
                                                     GenerateStats* stats) {
  check_param(opts.batch >= 1, "batch", "must be at least 1");
  const SamplingOptions& s = opts.sampling;
  check_param(s.temperature >= 0.0f, "temperature", "must be >= 0");
  check_param(s.top_k >= 0, "top_k", "must be >= 0");
  check_param(s.top_p > 0.0f && s.top_p <= 1.0f, "top_p", "must be in (0, 1]");
  check_param(s.cfg_scale >= 0.0f, "cfg", "must be >= 0");
  const SamplingParams p = to_sampling_params(s);
  GenerateStats local;
  GenerateStats& st = stats ? *stats : local;
  const int N = impl_->config.gpt.n_image_tokens();
  check_param(opts.max_tokens >= 0 && opts.max_tokens <= N, "tokens",
              "must be in [1, " + std::to_string(N) + "]");
  const int64_t total =
      static_cast<int64_t>(conditions.size()) * (opts.max_tokens > 0 ? opts.max_tokens : N);
  int64_t done = 0;
  check_param(opts.spec.max_rounds >= 0, "max_rounds", "must be >= 0");
  // The draft model is validated before the method's tables (LANTERN's can take seconds) are built.
  const bool wants_draft = !opts.spec.draft_model.empty() && opts.spec.method != "vanilla";
  const LlamaGen* draft = wants_draft ? &impl_->draft_model(opts.spec.draft_model) : nullptr;
  speculative::Method method = speculative::make_method(opts.spec, impl_->config.dir, impl_->config.gpt);
  std::vector<const Condition*> conds;
  std::vector<uint64_t> idx;
  for (size_t i = 0; i < conditions.size(); ++i) {
    conds.push_back(&conditions[i]);
    idx.push_back(opts.first_image_index + i);
  }
  DecoderSettings ds;
  ds.sampling = p;
  ds.seed = opts.seed;
  ds.max_tokens = opts.max_tokens;
  ds.on_tokens = [&](int64_t k) {
    done += k;
    if (opts.progress) opts.progress(done, total);
  };
  const int max_images = static_cast<int>(std::min<size_t>(conditions.size(), opts.batch));
  if (!method.rule) {
    VanillaDecoder decoder(*impl_->gpt, std::max(max_images, 1), ds, st);
    return generate_all(decoder, conds, idx, st);
  }
  check_param(opts.max_tokens == 0 || opts.max_tokens == N, "tokens",
              "{tokens} (a partial grid) is only supported by {method} vanilla");
  std::unique_ptr<speculative::Drafter> drafter;
  if (draft)
    drafter = std::make_unique<speculative::ModelDrafter>(*draft, p, method.draft_len,
                                                          std::max(max_images, 1));
  else
    drafter = std::make_unique<speculative::JacobiDrafter>(impl_->config.gpt.vocab_size, p);
  speculative::LoopSettings ls;
  ls.rule = method.rule.get();
  ls.drafter = drafter.get();
  ls.draft_len = method.draft_len;
  ls.max_rounds = opts.spec.max_rounds;
  speculative::SpeculativeDecoder decoder(*impl_->gpt, std::max(max_images, 1), ds, ls, st);
  return generate_all(decoder, conds, idx, st);
}

std::vector<float> Pipeline::forward_logits(const Condition& condition,
                                            std::span<const int32_t> tokens) {
  return teacher_forced_logits(*impl_->gpt, condition, tokens);
}

std::vector<float> Pipeline::decode_float(std::span<const int32_t> tokens, int n) {
  check(impl_->vq != nullptr,
        "this model directory has no VQ decoder (vq.safetensors); use --tokens-out only");
  const int grid = impl_->config.gpt.grid;
  Tensor y = impl_->vq->decode(tokens, n, grid);
  std::vector<float> out(static_cast<size_t>(y.numel()));
  impl_->backend->download(y, out.data());
  return out;
}

std::vector<uint8_t> Pipeline::decode(std::span<const int32_t> tokens, int n) {
  const int size = image_size();
  return to_pixels(decode_float(tokens, n), n, size, size);
}

}  // namespace tessera
