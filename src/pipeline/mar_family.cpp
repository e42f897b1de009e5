// MAR behind the public Pipeline (transformer + diffusion head, KL VAE): vanilla MAR sampling and
// continuous speculative decoding with a draft MAR.
#include "pipeline/mar_family.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "decode/mar_sampler.h"
#include "models/kl_vae_decoder.h"
#include "models/mar.h"
#include "speculative/continuous/cspd_loop.h"
#include "speculative/method.h"
#include "tessera/mar.h"

namespace tessera {

struct MarFamily::Data {
  ModelConfig config;
  Backend* backend = nullptr;
  std::unique_ptr<Mar> model;
  std::unique_ptr<GaussianDiffusion> diffusion;
  std::unique_ptr<KlVaeDecoder> vae;
  std::string draft_dir;  // the draft of the last speculative call
  std::unique_ptr<Mar> draft;

  const Mar& draft_model(const std::string& dir);
};

const Mar& MarFamily::Data::draft_model(const std::string& dir) {
  if (draft && draft_dir == dir) return *draft;
  draft.reset();
  ModelConfig dc = load_model_config(dir);
  dc.check_weights = config.check_weights;
  check_param(
      dc.is_mar(), "draft",
      "{draft} " + dir + ": not a MAR model directory (architecture \"" + dc.architecture + "\")");
  const MarConfig &t = config.mar, &d = dc.mar;
  auto same = [&](const char* what, long a, long b) {
    check_param(a == b, "draft",
                "{draft} " + dir + ": " + what + " " + std::to_string(b) +
                    " does not match the target's " + std::to_string(a) +
                    " (a draft MAR must share the target's tokenizer, classes and diffusion "
                    "schedule)");
  };
  same("seq_len", t.seq_len(), d.seq_len());
  same("token_dim", t.token_dim(), d.token_dim());
  same("num_classes", t.num_classes, d.num_classes);
  same("num_train_timesteps", t.num_train_timesteps, d.num_train_timesteps);
  same("num_sampling_steps", t.num_sampling_steps, d.num_sampling_steps);
  check_param(t.noise_schedule == d.noise_schedule, "draft",
              "{draft} " + dir + ": noise_schedule \"" + d.noise_schedule +
                  "\" does not match the target's \"" + t.noise_schedule + "\"");
  draft = std::make_unique<Mar>(dc, *backend);
  draft_dir = dir;
  return *draft;
}

MarFamily::MarFamily(const ModelConfig& config, Backend& backend, bool load_decoder)
    : d_(std::make_unique<Data>()) {
  d_->config = config;
  d_->backend = &backend;
  d_->model = std::make_unique<Mar>(config, backend);
  const MarConfig& c = config.mar;
  d_->diffusion = std::make_unique<GaussianDiffusion>(c.num_train_timesteps, c.num_sampling_steps,
                                                      c.noise_schedule);
  if (load_decoder && config.has_vae) d_->vae = std::make_unique<KlVaeDecoder>(config, backend);
}
MarFamily::~MarFamily() = default;

bool MarFamily::has_decoder() const {
  return d_->vae != nullptr;
}
int MarFamily::image_size() const {
  return d_->config.mar.image_size;
}

std::vector<std::vector<float>> MarFamily::generate(const std::vector<int>& labels,
                                                    const MarGenerateOptions& opts,
                                                    MarStats* stats) {
  const MarConfig& c = d_->config.mar;
  MarSamplingOptions s = opts.sampling;
  if (s.num_iter == 0) s.num_iter = std::min(64, c.seq_len());
  check_param(opts.batch >= 1, "batch", "must be at least 1");
  check_param(std::isfinite(s.temperature) && s.temperature > 0.0f, "temperature",
              "must be a finite number > 0");
  check_param(std::isfinite(s.cfg_scale) && s.cfg_scale >= 0.0f, "cfg",
              "must be a finite number >= 0 (1: no guidance)");
  check_param(s.cfg_schedule == "linear" || s.cfg_schedule == "constant", "cfg_schedule",
              "must be linear or constant, got \"" + s.cfg_schedule + "\"");
  check_param(
      s.num_iter >= 1 && s.num_iter <= c.seq_len(), "steps",
      "must be in [1, " + std::to_string(c.seq_len()) + "], got " + std::to_string(s.num_iter));
  for (int l : labels)
    check(l >= -1 && l < c.num_classes, "class " + std::to_string(l) + " out of range [0, " +
                                            std::to_string(c.num_classes) + ")");
  const std::optional<CspdSettings> cspd = speculative::make_cspd_settings(opts.spec);
  if (cspd)
    check_param(cspd->draft_len <= s.num_iter, "draft_len",
                "{draft_len} must be in [1, " + std::to_string(s.num_iter) +
                    "] (MAR steps drafted per round; " + "this run has {steps} " +
                    std::to_string(s.num_iter) + "), got " + std::to_string(cspd->draft_len));
  const Mar* draft = cspd ? &d_->draft_model(opts.spec.draft_model) : nullptr;
  {
    // A batch's largest live activations, before the first step allocates them: per image and
    // guidance half, the MAE rows (sequence + buffer) x (x, h, qkv, attention out, MLP) and the
    // diffusion head's chains over every position (x, noise, hidden, modulation).
    const int64_t images = std::min<int64_t>(static_cast<int64_t>(labels.size()), opts.batch);
    const double halves = s.cfg_scale != 1.0f ? 2.0 : 1.0;
    const double mae =
        static_cast<double>(c.seq_len() + c.buffer_size) * (6.0 * c.dim + c.mlp_dim());
    const double head = static_cast<double>(c.seq_len()) * (4.0 * c.diffloss_width + 3.0 * c.dim);
    const double need = images * halves * (mae + head) * sizeof(float) * (draft ? 2.0 : 1.0);
    const int64_t available = d_->backend->available_memory();
    check_param(need <= static_cast<double>(available), "batch",
                "not enough memory: " + std::to_string(images) + " images in flight need about " +
                    std::to_string(static_cast<int64_t>(need / (1 << 20))) +
                    " MiB of activations, " + std::to_string(available >> 20) +
                    " MiB is available; lower {batch}");
  }

  MarStats local;
  MarStats& st = stats ? *stats : local;
  st.steps = s.num_iter;
  const double t0 = now_s();
  const int64_t total = static_cast<int64_t>(labels.size()) * c.seq_len();
  int64_t done = 0;
  std::vector<std::vector<float>> out;
  for (size_t b0 = 0; b0 < labels.size(); b0 += opts.batch) {
    if (opts.cancel && opts.cancel->load()) break;
    const size_t b1 = std::min(labels.size(), b0 + static_cast<size_t>(opts.batch));
    const std::vector<int> batch(labels.begin() + b0, labels.begin() + b1);
    std::vector<uint64_t> idx;
    for (size_t i = b0; i < b1; ++i) idx.push_back(opts.first_image_index + i);
    const PhiloxMarNoise noise(opts.seed, idx);
    auto on_tokens = [&](int64_t k) {
      done += k;
      if (opts.progress) opts.progress(done, total);
    };
    auto images = cspd ? cspd_generate(*d_->model, *draft, *d_->diffusion, *d_->backend, batch, s,
                                       *cspd, noise, on_tokens, st)
                       : mar_generate(*d_->model, *d_->diffusion, *d_->backend, batch, s, noise,
                                      on_tokens, st);
    for (auto& im : images) {
      if (opts.on_image) opts.on_image(out.size(), im);
      out.push_back(std::move(im));
    }
  }
  st.seconds += now_s() - t0;
  return out;
}

std::vector<float> MarFamily::forward_z(int label, std::span<const float> tokens,
                                        std::span<const uint8_t> unknown) {
  const MarConfig& c = d_->config.mar;
  check(static_cast<int64_t>(tokens.size()) == static_cast<int64_t>(c.seq_len()) * c.token_dim(),
        "forward: expected " + std::to_string(c.seq_len() * c.token_dim()) + " token values");
  check(static_cast<int>(unknown.size()) == c.seq_len(),
        "forward: expected " + std::to_string(c.seq_len()) + " mask values");
  check(label >= -1 && label < c.num_classes, "class " + std::to_string(label) + " out of range");
  std::vector<int32_t> all(c.seq_len());
  for (int i = 0; i < c.seq_len(); ++i) all[i] = i;
  const std::vector<int32_t> labels{label};
  const Tensor z = d_->model->forward(tokens, unknown, labels, {all});
  return download_f32(*d_->backend, z);
}

std::vector<float> MarFamily::decode_float(std::span<const float> tokens, int n) {
  check(d_->vae != nullptr, "this model directory has no VAE decoder (vae.safetensors)");
  // One image at a time, as LlamaGenFamily::decode_float (per-image ops, bounded memory).
  const MarConfig& c = d_->config.mar;
  const size_t per_image = static_cast<size_t>(c.seq_len()) * c.token_dim();
  check(tokens.size() == per_image * static_cast<size_t>(std::max(n, 0)),
        "decode: expected " + std::to_string(per_image * std::max(n, 0)) + " latent values, got " +
            std::to_string(tokens.size()));
  std::vector<float> out;
  for (int i = 0; i < n; ++i) {
    const Tensor y = d_->vae->decode(tokens.subspan(i * per_image, per_image), 1);
    const std::vector<float> one = download_f32(*d_->backend, y);
    if (out.empty()) out.reserve(one.size() * static_cast<size_t>(n));
    out.insert(out.end(), one.begin(), one.end());
  }
  return out;
}

std::vector<uint8_t> MarFamily::decode(std::span<const float> tokens, int n) {
  const int size = image_size();
  return to_pixels_mar(decode_float(tokens, n), n, size, size);
}

}  // namespace tessera
