#include "decode/decoder.h"

#include <algorithm>

#include "common/clock.h"
#include "decode/guidance.h"
#include "sampling/sample_rows.h"
#include "tessera/error.h"

namespace tessera {

Decoder::Decoder(const AutoregressiveModel& model, const SessionOptions& session,
                 const DecoderSettings& settings, GenerateStats& stats)
    : model_(model), session_(model, session), settings_(settings), stats_(stats) {}

int Decoder::image_tokens() const {
  const int N = model_.info().n_tokens;
  return settings_.max_tokens > 0 ? std::min(settings_.max_tokens, N) : N;
}

int Decoder::capacity_images() const {
  return session_.free_slots() / (cfg() ? 2 : 1);
}

bool Decoder::batches_with(const SamplingParams& sampling) const {
  const SamplingParams& own = settings_.sampling;
  return sampling.uses_cfg() == own.uses_cfg() &&
         (sampling.temperature <= 0.0f) == (own.temperature <= 0.0f);
}

int Decoder::add(const Condition& condition, uint64_t image_index, std::optional<uint64_t> seed,
                 const std::optional<SamplingParams>& sampling) {
  check(capacity_images() > 0, "internal: no free KV slot for another image");
  const SamplingParams& own = settings_.sampling;
  if (sampling) {
    check_param(sampling->uses_cfg() == own.uses_cfg(), "sampling",
                std::string("an image's guidance must be on or off as its generation's (cfg ") +
                    (own.uses_cfg() ? "> 1" : "<= 1") +
                    "): it decides the batch's unconditional slots");
    check_param((sampling->temperature <= 0.0f) == (own.temperature <= 0.0f), "sampling",
                std::string("an image must be ") + (own.temperature <= 0.0f ? "" : "not ") +
                    "greedy (temperature 0) as its generation is");
  }
  auto im = std::make_unique<ImageState>();
  const auto free = std::find(images_.begin(), images_.end(), nullptr);
  im->id = static_cast<int>(free - images_.begin());
  im->condition = condition;
  im->rng = CounterRng(seed.value_or(settings_.seed), image_index);
  im->sampling = sampling.value_or(own);
  im->slot = session_.acquire_slot();
  if (cfg()) im->uncond_slot = session_.acquire_slot();
  im->stats.accepted_depth.assign(model_.info().n_tokens, 0);
  const int id = im->id;
  if (free == images_.end())
    images_.push_back(std::move(im));
  else
    *free = std::move(im);
  return id;
}

void Decoder::remove(int id) {
  std::unique_ptr<ImageState>& im = images_.at(id);
  check(im != nullptr, "internal: image removed twice");
  session_.release_slot(im->slot);
  if (im->uncond_slot >= 0) session_.release_slot(im->uncond_slot);
  im.reset();
}

bool Decoder::finished() const {
  for (const auto& im : images_)
    if (im && !im->done) return false;
  return true;
}

bool Decoder::step() {
  const double t0 = now_s();
  std::vector<ImageState*> fresh, active;
  for (auto& im : images_)
    if (im && !im->prefilled)
      fresh.push_back(im.get());
    else if (im && !im->done)
      active.push_back(im.get());
  if (fresh.empty() && active.empty()) return false;
  last_prefill_ = !fresh.empty() && (active.empty() || !last_prefill_);
  if (last_prefill_)
    prefill(fresh);
  else
    round(active);
  stats_.seconds += now_s() - t0;
  return true;
}

int32_t Decoder::sample(ImageState& im, const float* cond, const float* uncond, int index) {
  const int V = model_.info().vocab_size;
  probs_.resize(V);
  guided_distribution(cond, uncond, V, im.sampling, index, probs_);
  return im.sampling.temperature <= 0.0f ? argmax(probs_)
                                         : sample_index(probs_, im.rng.uniform(index));
}

void Decoder::prefill(std::vector<ImageState*>& fresh) {
  const double t0 = now_s();
  const int n = static_cast<int>(fresh.size()), V = model_.info().vocab_size;
  std::vector<const Condition*> conds;
  std::vector<int32_t> slots;
  for (ImageState* im : fresh) {
    conds.push_back(&im->condition);
    slots.push_back(im->slot);
  }
  if (cfg())
    for (ImageState* im : fresh) slots.push_back(im->uncond_slot);
  const ForwardOutputs out = session_.prefill(conds, cfg(), slots);
  session_.read(out.logits, logits_);
  prefill_hidden_ = out.hidden;
  stats_.forward_passes++;
  // The first token of every method is drawn exactly as vanilla sampling draws it, from the last
  // prefix row of each slot.
  const size_t rows = static_cast<size_t>(session_.prefill_rows());
  for (int i = 0; i < n; ++i) {
    ImageState& im = *fresh[i];
    const float* c = logits_.data() + (static_cast<size_t>(i) * rows + rows - 1) * V;
    const float* u =
        cfg() ? logits_.data() + (static_cast<size_t>(n + i) * rows + rows - 1) * V : nullptr;
    im.tokens.push_back(sample(im, c, u, 0));
    im.prefilled = true;
    im.stats.tokens = 1;
    im.stats.target_forwards = 1;
    im.done = image_tokens() <= 1;
  }
  const double dt = now_s() - t0;
  stats_.prefill_seconds += dt;
  stats_.target_seconds += dt;
  if (settings_.on_tokens) settings_.on_tokens(n);
}

namespace {
// Vanilla's step: each image's last token, at its position, for both halves with guidance.
StepBatch vanilla_step(const AutoregressiveModel& model, const std::vector<ImageState*>& active,
                       bool cfg) {
  StepBatch b;
  b.n_new = 1;
  b.output_at = {0};
  for (int h = 0; h < (cfg ? 2 : 1); ++h)
    for (ImageState* im : active) {
      b.slots.push_back(h == 0 ? im->slot : im->uncond_slot);
      b.tokens.push_back(im->tokens.back());  // the sampled token is fed to both halves
      b.positions.push_back(model.token_position(static_cast<int>(im->tokens.size()) - 1));
    }
  return b;
}

// Whether the device loop can run: its step advances every position by one, reads no features
// (EAGLE's), and samples where the backend can.
bool device_loop_possible(const AutoregressiveModel& model) {
  const ArModelInfo& m = model.info();
  return consecutive_token_positions(model) && m.feature_dim == 0 &&
         can_sample_rows(model.backend(), m.vocab_size);
}
}  // namespace

VanillaDecoder::VanillaDecoder(const AutoregressiveModel& model, int max_images,
                               const DecoderSettings& settings, GenerateStats& stats)
    : Decoder(model, SessionOptions{.n_slots = max_images * (settings.sampling.uses_cfg() ? 2 : 1)},
              settings, stats) {
  check(settings.device_burst >= 1, "internal: device_burst must be at least 1");
  const bool possible = device_loop_possible(model);
  check_param(possible || settings.device_loop != DeviceLoop::On, "device-loop",
              "on: this model's tokens cannot be drawn on " + model.backend().name() +
                  " (vocabulary " + std::to_string(model.info().vocab_size) + ", at most " +
                  std::to_string(kMaxDeviceSampleVocab) +
                  " on a GPU; positions must follow each other)");
  device_loop_ =
      possible && (settings.device_loop == DeviceLoop::On ||
                   (settings.device_loop == DeviceLoop::Auto && !model.backend().host_memory()));
}

VanillaDecoder::~VanillaDecoder() = default;

void VanillaDecoder::round(std::vector<ImageState*>& active) {
  if (device_loop_)
    device_round(active);
  else
    host_round(active);
}

void VanillaDecoder::device_round(std::vector<ImageState*>& active) {
  const double t0 = now_s();
  Backend& be = model_.backend();
  const int m = static_cast<int>(active.size()), N = model_.info().n_tokens;
  int burst = settings_.device_burst;  // every image in the burst still needs this many tokens
  for (const ImageState* im : active)
    burst = std::min(burst, image_tokens() - static_cast<int>(im->tokens.size()));
  check(burst >= 1, "internal: a device burst of no step");
  const StepBatch b = vanilla_step(model_, active, cfg());
  const ForwardInputs in = session_.prepare(b);
  if (!params_.data) {
    const int64_t images = session_.n_slots() / (cfg() ? 2 : 1);
    params_ = be.empty(DType::U8, {images * static_cast<int64_t>(sizeof(DeviceSampleParams))});
    history_ = be.empty(DType::I32, {images, N});
    error_flag_ = be.empty(DType::I32, {1});
  }
  std::vector<DeviceSampleParams> ps;
  for (const ImageState* im : active)
    ps.push_back(device_sample_params(im->sampling, im->rng.seed(), im->rng.image_index(),
                                      static_cast<uint32_t>(im->tokens.size())));
  Tensor params = params_.rows(0, m * static_cast<int64_t>(sizeof(DeviceSampleParams)));
  be.upload_into(ps.data(), params);
  const int32_t no_error = 0;
  be.upload_into(&no_error, error_flag_);
  const Tensor history = history_.rows(0, m);
  // One step: forward, draw into the next step's tokens (both halves), positions and cached
  // lengths one further. It holds views whose addresses depend only on m, never host values of
  // this burst, so the graph captured for m at its first burst replays every later one.
  auto step = [this, in, params, history, m]() mutable {
    Backend& be = model_.backend();
    const int N = model_.info().n_tokens;
    const ForwardOutputs out = session_.run(in);
    const Tensor uncond = cfg() ? out.logits.rows(m, m) : Tensor{};
    SampleRowsOut o;
    o.tokens = in.tokens;
    o.mirror = cfg() ? m : 0;
    o.history = history;
    o.history_stride = N;
    o.advance = true;
    sample_rows(be, out.logits.rows(0, m), cfg() ? &uncond : nullptr, m, params, o, error_flag_);
    Tensor positions = in.positions, past = in.attn.past;
    be.add_scalar_i32(positions, 1);
    be.add_scalar_i32(past, 1);
  };
  // The key visibility table (t2i caption padding) exists once any key is hidden: a step
  // captured before it reads none, so it is part of the key.
  const int key = 2 * m + (in.attn.key_visible ? 1 : 0);
  for (int k = 0; k < burst; ++k)
    if (graphs_.replay_or_run(be, key, step)) {
      graph_replays_++;
      stats_.replayed_steps++;
    }
  history_host_.resize(static_cast<size_t>(m) * N);
  int32_t failed = 0;
  be.download_async(history, history_host_.data());
  be.download_async(error_flag_, &failed);
  be.synchronize();
  if (failed) throw Error(device_sample_failed());
  session_.advance(b.slots, burst);
  stats_.forward_passes += burst;
  stats_.device_steps += burst;
  for (int j = 0; j < m; ++j) {
    ImageState& im = *active[j];
    const size_t from = static_cast<size_t>(j) * N + im.tokens.size();
    im.tokens.insert(im.tokens.end(), history_host_.begin() + static_cast<std::ptrdiff_t>(from),
                     history_host_.begin() + static_cast<std::ptrdiff_t>(from + burst));
    im.round += burst;
    im.stats.rounds += burst;
    im.stats.target_forwards += burst;
    im.stats.tokens = static_cast<int64_t>(im.tokens.size());
    im.done = static_cast<int>(im.tokens.size()) >= image_tokens();
  }
  stats_.target_seconds += now_s() - t0;
  if (settings_.on_tokens) settings_.on_tokens(int64_t{m} * burst);
}

void VanillaDecoder::host_round(std::vector<ImageState*>& active) {
  const double t0 = now_s();
  const int m = static_cast<int>(active.size()), V = model_.info().vocab_size;
  session_.read(session_.forward(vanilla_step(model_, active, cfg())).logits, logits_);
  stats_.forward_passes++;
  for (int j = 0; j < m; ++j) {
    ImageState& im = *active[j];
    const float* u = cfg() ? logits_.data() + static_cast<size_t>(m + j) * V : nullptr;
    const int t = static_cast<int>(im.tokens.size());
    im.tokens.push_back(sample(im, logits_.data() + static_cast<size_t>(j) * V, u, t));
    im.round++;
    im.stats.rounds++;
    im.stats.target_forwards++;
    im.stats.tokens = static_cast<int64_t>(im.tokens.size());
    im.done = static_cast<int>(im.tokens.size()) >= image_tokens();
  }
  stats_.target_seconds += now_s() - t0;
  if (settings_.on_tokens) settings_.on_tokens(m);
}

std::vector<std::vector<int32_t>> generate_all(Decoder& decoder,
                                               const std::vector<const Condition*>& conds,
                                               const std::vector<uint64_t>& image_indices,
                                               GenerateStats& stats) {
  check(conds.size() == image_indices.size(), "internal: conditions vs image indices");
  std::vector<std::vector<int32_t>> out;
  for (size_t b0 = 0; b0 < conds.size();) {
    const size_t b1 = std::min(conds.size(), b0 + static_cast<size_t>(decoder.capacity_images()));
    check(b1 > b0, "internal: the decoder holds no image");
    std::vector<int> ids;
    for (size_t i = b0; i < b1; ++i) ids.push_back(decoder.add(*conds[i], image_indices[i]));
    while (decoder.step()) {
    }
    for (int id : ids) {
      const ImageState& im = decoder.image(id);
      std::vector<int32_t> grid = im.tokens;
      grid.resize(static_cast<size_t>(decoder.n_tokens()), 0);
      out.push_back(std::move(grid));
      stats.tokens += static_cast<int64_t>(im.tokens.size());
      stats.images++;
      stats.per_image.push_back(im.stats);
      decoder.remove(id);
    }
    b0 = b1;
  }
  return out;
}

}  // namespace tessera
