#include <algorithm>
#include <filesystem>

#include "engine/generator.h"
#include "models/llamagen.h"
#include "models/vq_decoder.h"
#include "tensor/backend.h"
#include "tessera/tessera.h"

namespace tessera {

struct Pipeline::Impl {
  ModelConfig config;
  Backend* backend = nullptr;
  std::unique_ptr<LlamaGen> gpt;
  std::unique_ptr<VqDecoder> vq;
};

Pipeline::Pipeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Pipeline::~Pipeline() = default;

std::unique_ptr<Pipeline> Pipeline::load(const std::string& model_dir, const LoadOptions& opts) {
  auto impl = std::make_unique<Impl>();
  impl->config = load_model_config(model_dir);
  impl->backend = &cpu_backend();
  if (opts.threads > 0) impl->backend->set_threads(opts.threads);
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
  impl_->backend->set_threads(n);
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
  check(opts.batch >= 1, "--batch must be at least 1");
  const SamplingOptions& s = opts.sampling;
  check(s.temperature >= 0.0f, "--temperature must be >= 0");
  check(s.top_k >= 0, "--top-k must be >= 0");
  check(s.top_p > 0.0f && s.top_p <= 1.0f, "--top-p must be in (0, 1]");
  check(s.cfg_scale >= 0.0f, "--cfg must be >= 0");
  SamplingParams p;
  p.cfg_scale = s.cfg_scale;
  p.cfg_interval = s.cfg_interval;
  p.temperature = s.temperature;
  p.top_k = s.top_k;
  p.top_p = s.top_p;
  GenerateStats local;
  GenerateStats& st = stats ? *stats : local;
  const int N = impl_->config.gpt.n_image_tokens();
  check(opts.max_tokens >= 0 && opts.max_tokens <= N,
        "--tokens must be in [1, " + std::to_string(N) + "]");
  const int64_t total =
      static_cast<int64_t>(conditions.size()) * (opts.max_tokens > 0 ? opts.max_tokens : N);
  int64_t done = 0;
  std::vector<std::vector<int32_t>> out;
  for (size_t b0 = 0; b0 < conditions.size(); b0 += opts.batch) {
    const size_t b1 = std::min(conditions.size(), b0 + static_cast<size_t>(opts.batch));
    std::vector<const Condition*> conds;
    std::vector<uint64_t> idx;
    for (size_t i = b0; i < b1; ++i) {
      conds.push_back(&conditions[i]);
      idx.push_back(opts.first_image_index + i);
    }
    const int64_t per_step = static_cast<int64_t>(conds.size());
    auto on_token = [&] {
      done += per_step;
      if (opts.progress) opts.progress(done, total);
    };
    auto grids =
        generate_batch(*impl_->gpt, conds, idx, p, opts.seed, opts.max_tokens, on_token, st);
    for (auto& g : grids) out.push_back(std::move(g));
  }
  return out;
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
